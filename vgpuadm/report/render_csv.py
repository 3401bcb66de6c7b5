"""CSV views, a header row then stable columns (spreadsheets and `awk` read them by position):

- a host inventory gives ONE ROW PER DEVICE (mdev, typed VF, passthrough function) with its owner;
- a fleet report gives ONE ROW PER HOST AND TYPE with used / free / stranded instances.
Empty cells stand for "not known"; `owned` is yes / no / unknown.
"""

from __future__ import annotations

import csv
import io
from typing import Any

HOST_COLUMNS = [
    "host",
    "device",
    "kind",
    "type_id",
    "name",
    "framebuffer_mib",
    "parent",
    "physical_gpu",
    "layout",
    "iommu_group",
    "numa_node",
    "domain",
    "owned",
]
FLEET_COLUMNS = ["host", "type_id", "name", "framebuffer_mib", "used", "free", "stranded"]


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value


def _write(columns: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows([[_cell(v) for v in row] for row in rows])
    return buf.getvalue()


def host_csv(doc: dict[str, Any]) -> str:
    return _write(
        HOST_COLUMNS,
        [
            [
                doc["host"],
                d["id"],
                d["kind"],
                d["type_id"],
                d["name"],
                d["framebuffer_mib"],
                d["parent"],
                d["physical_gpu"],
                d["layout"],
                d["iommu_group"],
                d["numa_node"],
                d["domain"],
                "unknown" if d["owned"] is None else d["owned"],
            ]
            for d in doc["devices"]
        ],
    )


def fleet_csv(doc: dict[str, Any]) -> str:
    return _write(
        FLEET_COLUMNS,
        [
            [h["host"], t["type_id"], t["name"], t["framebuffer_mib"], h["used"], h["free"], h["stranded"]]
            for t in doc["types"]
            for h in t["hosts"]
        ],
    )
