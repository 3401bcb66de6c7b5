"""CSV views, a header row then stable columns (spreadsheets and `awk` read them by position):

- a host inventory gives ONE ROW PER DEVICE (mdev, typed VF, passthrough function) with its owner;
- a fleet report gives ONE ROW PER HOST AND TYPE with used / free / stranded instances.
Empty cells stand for "not known"; `owned` is yes / no / unknown. A text cell that a spreadsheet would run as a
formula (it starts with = + - @, a tab or a carriage return: host names and domain names come from the host) gets
a leading ' (OWASP's advice for CSV injection), and control characters but tab and newline show escaped (\\r);
numbers are written as they are.
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


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Control characters but tab and newline (which the writer quotes) as escapes: a bare CR would end the row for
# some readers, an ESC would recolor a terminal that `cat`s the file.
_CONTROL = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return ("'" if value.startswith(FORMULA_START) else "") + value.translate(_CONTROL)
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
