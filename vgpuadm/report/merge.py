"""The fleet report: merge many hosts' inventory documents (vgpuadm-inventory/1) into one (vgpuadm-fleet/1).

Totals per type and per host, free capacity, fragmentation (free framebuffer on GPUs locked to one type or size,
and the instances of each type stranded there) and leaks. Every input host appears in the output or the merge
fails with a one-line error naming the file: another schema version, truncated JSON and duplicate host names are
refused, never skipped. Pure apart from `load_report`, which reads one file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from vgpuadm.errors import UsageError
from vgpuadm.host.inputs import read_input
from vgpuadm.report.inventory import SCHEMA as HOST_SCHEMA
from vgpuadm.report.inventory import type_order

SCHEMA = "vgpuadm-fleet/1"
MAX_REPORT = 16 * 1024 * 1024  # bytes of one host's inventory; larger files are refused before reading
_HINT = "pass files written by `vgpuadm inventory --format json` (schema vgpuadm-inventory/1)"
# What the merge reads from each host document; checked by hand because full JSON-schema validation of 1,000
# documents would cost seconds (the published schema is vgpuadm/schemas/inventory-v1.schema.json).
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "host": str,
    "generated_at": str,
    "summary": dict,
    "gpus": list,
    "types": list,
    "devices": list,
    "missing": list,
    "warnings": list,
}
_SUMMARY = (
    "gpus",
    "devices",
    "missing",
    "framebuffer_total_mib",
    "framebuffer_used_mib",
    "framebuffer_free_mib",
    "framebuffer_locked_free_mib",
)
_TYPE = frozenset(("type_id", "name", "framebuffer_mib", "used", "free", "stranded", "max"))


def load_report(path: str) -> dict[str, Any]:
    """Read and check one host inventory; any problem is a UsageError naming the file."""
    text = read_input(path, "", _HINT, limit=MAX_REPORT)
    try:
        doc = orjson.loads(text)  # its JSONDecodeError subclasses json's, with lineno/colno
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UsageError(f"{path} is not valid JSON{where} (truncated?)", _HINT) from None
    check_report(doc, path)
    return doc


def check_report(doc: Any, path: str) -> None:
    if not isinstance(doc, dict) or "schema" not in doc:
        raise UsageError(f'{path} is not a vgpuadm inventory (no "schema" field)', _HINT)
    if doc["schema"] != HOST_SCHEMA:
        raise UsageError(f"{path} has schema {doc['schema']!r}, expected {HOST_SCHEMA!r}", _HINT)
    for key, kind in _REQUIRED.items():
        if not isinstance(doc.get(key), kind):
            raise UsageError(f"{path} is missing {key!r} or it has the wrong type", _HINT)
    missing = [k for k in _SUMMARY if k not in doc["summary"]]
    if missing:
        raise UsageError(f"{path}: summary lacks {', '.join(missing)}", _HINT)
    for row in doc["types"]:
        if not isinstance(row, dict) or not row.keys() >= _TYPE:
            raise UsageError(f"{path}: a types[] row lacks one of {', '.join(sorted(_TYPE))}", _HINT)
    _check_values(doc, path)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count_or_none(v: Any) -> bool:
    return v is None or _count(v)


def _text_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


# The values merge and the fleet renderers compute with, per part of a host document: a report edited by hand
# (or by a tool) must fail here with the file's name, not halfway through the sums.
_SUMMARY_KINDS = {**dict.fromkeys(_SUMMARY, _count), "owned": _count_or_none, "unowned": _count_or_none,
                  "not_recorded": _count_or_none, "framebuffer_stranded_mib": _count_or_none,
                  "framebuffer_reserved_mib": _count}  # fmt: skip
_TYPE_KINDS = {"type_id": lambda v: isinstance(v, str), "name": _text_or_none, "framebuffer_mib": _count_or_none,
               "used": _count, "free": _count, "stranded": _count, "max": _count_or_none,
               "reserved": _count}  # fmt: skip
_LEAK_KINDS = {"id": lambda v: isinstance(v, str), "kind": lambda v: isinstance(v, str), "type_id": _text_or_none,
               "physical_gpu": _text_or_none, "parent": _text_or_none}  # fmt: skip


def _type_row_ok(row: dict[str, Any]) -> bool:
    """_TYPE_KINDS of one types[] row in one expression (14 rows a host, 10,000 hosts: a call per value counts)."""
    fb, used, free, stranded, most = row["framebuffer_mib"], row["used"], row["free"], row["stranded"], row["max"]
    name = row["name"]
    return (
        isinstance(row["type_id"], str)
        and (name is None or isinstance(name, str))
        and (fb is None or (isinstance(fb, int) and not isinstance(fb, bool)))
        and isinstance(used, int) and not isinstance(used, bool)
        and isinstance(free, int) and not isinstance(free, bool)
        and isinstance(stranded, int) and not isinstance(stranded, bool)
        and (most is None or (isinstance(most, int) and not isinstance(most, bool)))
        and _count(row.get("reserved", 0))  # since reports count capacity awaiting restore; older ones lack it
    )  # fmt: skip


def _check_values(doc: dict[str, Any], path: str) -> None:
    def bad(where: str) -> UsageError:
        return UsageError(f"{path}: {where} has the wrong type", _HINT)

    for key, ok in _SUMMARY_KINDS.items():
        if key in doc["summary"] and not ok(doc["summary"][key]):
            raise bad(f"summary.{key}")
    if not _text_or_none(doc.get("ownership_source")):
        raise bad("ownership_source")
    for i, row in enumerate(doc["types"]):
        if not _type_row_ok(row):  # the fast check of the whole row; the loop names the first wrong value
            for key, ok in _TYPE_KINDS.items():
                if key in row and not ok(row[key]):
                    raise bad(f"types[{i}].{key}")
    for part in ("gpus", "devices", "missing"):
        for i, row in enumerate(doc[part]):
            if not isinstance(row, dict):
                raise bad(f"{part}[{i}]")
    for i, row in enumerate(doc["devices"]):
        if row.get("owned") is False:
            for key, ok in _LEAK_KINDS.items():
                if not ok(row.get(key)) or (key in ("id", "kind") and key not in row):
                    raise bad(f"devices[{i}].{key}")
    if not all(isinstance(w, str) for w in doc["warnings"]):
        raise bad("warnings[]")


def merge(reports: Iterable[tuple[str, dict[str, Any]]], *, generated_at: str) -> dict[str, Any]:
    """Merge (source file, host document) pairs into the fleet document. Duplicate hosts are refused. `reports`
    may be a generator: each document is folded in and dropped before the next is read."""
    seen: dict[str, str] = {}
    hosts: list[dict[str, Any]] = []
    types: dict[str, dict[str, Any]] = {}
    leaks: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    warnings: list[str] = []
    gpus_locked = gpus_empty = 0
    for source, doc in reports:
        name = doc["host"]
        if name in seen:
            raise UsageError(
                f"host {name!r} appears in both {seen[name]} and {source}",
                "merge one report per host; regenerate the stale one or rename it with --host",
            )
        seen[name] = source
        s = doc["summary"]
        hosts.append(
            {
                "host": name,
                "source": source,
                "generated_at": doc["generated_at"],
                "ownership_source": doc.get("ownership_source"),
                "gpus": s["gpus"],
                "devices": s["devices"],
                "owned": s.get("owned"),
                "unowned": s.get("unowned"),
                "not_recorded": s.get("not_recorded"),  # owned, attached without vgpuadm (None: an older report)
                "missing": s["missing"],
                "framebuffer_total_mib": s["framebuffer_total_mib"],
                "framebuffer_used_mib": s["framebuffer_used_mib"],
                "framebuffer_free_mib": s["framebuffer_free_mib"],
                "framebuffer_reserved_mib": s.get("framebuffer_reserved_mib", 0),  # awaiting `vgpuadm restore`
                "framebuffer_locked_free_mib": s["framebuffer_locked_free_mib"],
                # what the capacity model says no type can fill; a report older than the field: its locked free
                "framebuffer_stranded_mib": s.get("framebuffer_stranded_mib", s["framebuffer_locked_free_mib"]),
            }
        )
        for g in doc["gpus"]:
            if g.get("locked_to"):
                gpus_locked += 1
            elif not g.get("devices") and g.get("framebuffer_total_mib"):
                gpus_empty += 1
        for t in doc["types"]:
            row = types.get(t["type_id"])
            if row is None:
                row = types[t["type_id"]] = {
                    "type_id": t["type_id"],
                    "name": t["name"],
                    "framebuffer_mib": t["framebuffer_mib"],
                    "used": 0,
                    "free": 0,
                    "stranded": 0,
                    "reserved": 0,
                    "max": 0,
                    "hosts_with_room": 0,
                    "hosts": [],
                }
            row["used"] += t["used"]
            row["free"] += t["free"]
            row["stranded"] += t["stranded"]
            row["reserved"] += t.get("reserved", 0)
            row["max"] = None if t["max"] is None or row["max"] is None else row["max"] + t["max"]
            if t["free"]:
                row["hosts_with_room"] += 1
            row["hosts"].append({"host": name, "used": t["used"], "free": t["free"], "stranded": t["stranded"]})
        for d in doc["devices"]:
            if d.get("owned") is False:
                leaks.append(
                    {
                        "host": name,
                        "id": d["id"],
                        "kind": d["kind"],
                        "type_id": d.get("type_id"),
                        "physical_gpu": d.get("physical_gpu"),
                        "parent": d.get("parent"),
                    }
                )
        missing.extend({"host": name, **m} for m in doc["missing"])
        warnings.extend(f"{name}: {w}" for w in doc["warnings"])
    if not hosts:
        raise UsageError("no inventory files to merge", "pass one or more files: vgpuadm inventory merge A.json B.json")
    type_rows = sorted(types.values(), key=type_order)
    for row in type_rows:
        fb = row["framebuffer_mib"]
        row["framebuffer_used_mib"] = row["used"] * fb if fb is not None else None
        row["framebuffer_free_mib"] = row["free"] * fb if fb is not None else None
    free_fb = sum(h["framebuffer_free_mib"] for h in hosts)
    locked_fb = sum(h["framebuffer_locked_free_mib"] for h in hosts)
    return {
        "schema": SCHEMA,
        "generated_at": generated_at,
        "totals": {
            "hosts": len(hosts),
            "gpus": sum(h["gpus"] for h in hosts),
            "devices": sum(h["devices"] for h in hosts),
            "unowned": len(leaks),
            "missing": len(missing),
            "framebuffer_total_mib": sum(h["framebuffer_total_mib"] for h in hosts),
            "framebuffer_used_mib": sum(h["framebuffer_used_mib"] for h in hosts),
            "framebuffer_free_mib": free_fb,
        },
        "fragmentation": {
            "gpus_locked": gpus_locked,
            "gpus_empty": gpus_empty,
            "framebuffer_free_mib": free_fb,
            "framebuffer_locked_free_mib": locked_fb,
            "locked_share": round(locked_fb / free_fb, 4) if free_fb else 0.0,
        },
        "hosts": hosts,
        "types": type_rows,
        "leaks": leaks,
        "missing": missing,
        "warnings": warnings,
    }
