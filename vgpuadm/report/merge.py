"""The fleet report: merge many hosts' inventory documents (vgpuadm-inventory/1) into one (vgpuadm-fleet/1).

Totals per type and per host, free capacity, fragmentation (free framebuffer on GPUs locked to one type or size,
and the instances of each type stranded there) and leaks. Every input host appears in the output or the merge
fails with a one-line error naming the file: another schema version, truncated JSON and duplicate host names are
refused, never skipped. Pure apart from `load_report`, which reads one file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from vgpuadm.errors import UsageError
from vgpuadm.host.inputs import read_input
from vgpuadm.model import INVENTORY_SCHEMA as HOST_SCHEMA
from vgpuadm.model import type_id_order

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


def load_report(path: str, *, rows: bool = True) -> dict[str, Any]:
    """Read and check one host inventory; any problem is a UsageError naming the file. `rows=False` leaves the
    types[] rows to merge(), which checks each as it folds it (one look-up of each value, not two)."""
    return parse_report(read_input(path, "", _HINT, limit=MAX_REPORT), path, rows=rows)


def parse_report(text: bytes, path: str, *, rows: bool = True) -> dict[str, Any]:
    """One host inventory from its bytes (a file's, or what another host's vgpuadm printed: `path` names it),
    checked as load_report checks a file."""
    try:
        doc = orjson.loads(text)  # its JSONDecodeError subclasses json's, with lineno/colno
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UsageError(f"{path} is not valid JSON{where} (truncated?)", _HINT) from None
    if not _plain(doc, rows):
        check_report(doc, path)
    return doc


def check_report(doc: Any, path: str) -> None:
    if _plain(doc):
        return
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


_NONE = type(None)
_INT, _INT_OR_NONE, _TEXT_OR_NONE = {int}, {int, _NONE}, {str, _NONE}
_REQUIRED_GET = itemgetter(*_REQUIRED)
_REQUIRED_TYPES = tuple(_REQUIRED.values())
_SUMMARY_GET = itemgetter(*_SUMMARY)
_SUMMARY_OPTIONAL = ("owned", "unowned", "not_recorded", "framebuffer_stranded_mib")
_TYPE_GET = itemgetter("type_id", "name", "framebuffer_mib", "used", "free", "stranded", "max")


def _plain(doc: Any, rows: bool = True) -> bool:
    """Whether a document passes every check below, decided mostly in C (map, itemgetter, sets of value types):
    the checks value by value cost as much as parsing the JSON. Exact types, as orjson makes them (a bool is no
    count: type(True) is bool). False sends the document through the checks that name the first problem."""
    try:
        if type(doc) is not dict or doc.get("schema") != HOST_SCHEMA:
            return False
        values = _REQUIRED_GET(doc)
        if not all(map(isinstance, values, _REQUIRED_TYPES)):
            return False
        summary, gpus, types, devices, missing, warnings = values[2:]
        if (
            set(map(type, _SUMMARY_GET(summary))) != _INT
            or not set(map(type, map(summary.get, _SUMMARY_OPTIONAL))) <= _INT_OR_NONE
            or type(summary.get("framebuffer_reserved_mib", 0)) is not int
            or type(doc.get("ownership_source")) not in _TEXT_OR_NONE
            or (rows and not _plain_types(types))
            or not set(map(type, gpus)) <= {dict}
            or not set(map(type, devices)) <= {dict}
            or not set(map(type, missing)) <= {dict}
            or not set(map(type, warnings)) <= {str}
        ):
            return False
    except (KeyError, TypeError):  # a missing key or a row that is no dict
        return False
    for row in devices:
        if row.get("owned") is False and not (
            type(row.get("id")) is str
            and type(row.get("kind")) is str
            and type(row.get("type_id")) in _TEXT_OR_NONE
            and type(row.get("physical_gpu")) in _TEXT_OR_NONE
            and type(row.get("parent")) in _TEXT_OR_NONE
        ):
            return False
    return True


def _plain_types(rows: list[Any]) -> bool:
    """_TYPE_KINDS of every types[] row, a column at a time (KeyError, TypeError: a key missing, a row no dict)."""
    if not rows:
        return True
    type_id, name, fb, used, free, stranded, most = zip(*map(_TYPE_GET, rows), strict=True)
    return (
        set(map(type, type_id)) == {str}
        and set(map(type, name)) <= _TEXT_OR_NONE
        and set(map(type, fb)) <= _INT_OR_NONE
        and set(map(type, used + free + stranded)) == _INT
        and set(map(type, most)) <= _INT_OR_NONE
        and set(map(type, map(dict.get, rows, repeat("reserved"), repeat(0)))) == _INT
    )


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
    fold = Fold()
    fold.add(reports)
    return fold.document(generated_at)


def _duplicate(name: str, first: str, source: str) -> UsageError:
    return UsageError(
        f"host {name!r} appears in both {first} and {source}",
        "merge one report per host; regenerate the stale one or rename it with --host",
    )


class Fold:
    """The sums of the hosts folded in so far, in their order. Consecutive shares of one list of reports may be
    folded apart (in other processes: a Fold pickles) and joined in order: the result, and the first error, are
    those of one fold of the whole list."""

    __slots__ = ("gpus_empty", "gpus_locked", "hosts", "leaks", "missing", "seen", "types", "warnings")

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}  # host name → its source
        self.hosts: list[dict[str, Any]] = []
        # type_id → [name, framebuffer, used, free, stranded, reserved, max, hosts with room, per host: its name,
        # used, free, stranded one after the other (flat: the rows are made once, at the end; a child sends less)]
        self.types: dict[str, list[Any]] = {}
        self.leaks: list[dict[str, Any]] = []
        self.missing: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.gpus_locked = self.gpus_empty = 0

    def __getstate__(self) -> tuple[Any, ...]:  # `seen` is the hosts' names again: not sent
        return (self.hosts, self.types, self.leaks, self.missing, self.warnings, self.gpus_locked, self.gpus_empty)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.hosts, self.types, self.leaks, self.missing, self.warnings, self.gpus_locked, self.gpus_empty = state
        self.seen = {h["host"]: h["source"] for h in self.hosts}

    def join(self, later: Fold) -> None:
        """Fold in `later`, the fold of the reports that come after this one's; a host both hold is refused as
        one fold would refuse it (at the first such host of `later`)."""
        seen = self.seen
        for h in later.hosts:
            name = h["host"]
            if name in seen:
                raise _duplicate(name, seen[name], h["source"])
            seen[name] = h["source"]
        self.hosts += later.hosts
        types = self.types
        for type_id, more in later.types.items():
            acc = types.get(type_id)
            if acc is None:
                types[type_id] = more
                continue
            acc[2] += more[2]
            acc[3] += more[3]
            acc[4] += more[4]
            acc[5] += more[5]
            acc[6] = None if acc[6] is None or more[6] is None else acc[6] + more[6]
            acc[7] += more[7]
            acc[8] += more[8]
        self.leaks += later.leaks
        self.missing += later.missing
        self.warnings += later.warnings
        self.gpus_locked += later.gpus_locked
        self.gpus_empty += later.gpus_empty

    def add(self, reports: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Fold in (source file, host document) pairs, in order. On an error the hosts before the bad report are
        in `hosts` (the sums may hold part of the bad one)."""
        seen, hosts, types, leaks = self.seen, self.hosts, self.types, self.leaks
        missing, warnings = self.missing, self.warnings
        row_values = _TYPE_GET
        gpus_locked = gpus_empty = 0
        try:
            for source, doc in reports:
                name = doc["host"]
                try:  # the types[] rows, checked as they are folded in (load_report(rows=False) left them)
                    for t in doc["types"]:
                        type_id, name_, fb, used, free, stranded, most = row_values(t)
                        reserved = t.get("reserved", 0)
                        if not (
                            type(type_id) is str
                            and type(used) is int
                            and type(free) is int
                            and type(stranded) is int
                            and type(reserved) is int
                            and type(name_) in _TEXT_OR_NONE
                            and type(fb) in _INT_OR_NONE
                            and type(most) in _INT_OR_NONE
                        ):
                            raise TypeError
                        acc = types.get(type_id)
                        if acc is None:
                            acc = types[type_id] = [name_, fb, 0, 0, 0, 0, 0, 0, []]
                        acc[2] += used
                        acc[3] += free
                        acc[4] += stranded
                        acc[5] += reserved
                        acc[6] = None if most is None or acc[6] is None else acc[6] + most
                        if free:
                            acc[7] += 1
                        acc[8] += (name, used, free, stranded)  # per host: its row in document()
                except (KeyError, TypeError):
                    check_report(doc, source)  # raises, naming the first wrong value
                    raise UsageError(f"{source}: a types[] row has the wrong type", _HINT) from None
                if name in seen:
                    raise _duplicate(name, seen[name], source)
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
                        "not_recorded": s.get("not_recorded"),  # owned, attached without vgpuadm (None: older)
                        "missing": s["missing"],
                        "framebuffer_total_mib": s["framebuffer_total_mib"],
                        "framebuffer_used_mib": s["framebuffer_used_mib"],
                        "framebuffer_free_mib": s["framebuffer_free_mib"],
                        "framebuffer_reserved_mib": s.get("framebuffer_reserved_mib", 0),  # awaiting `restore`
                        "framebuffer_locked_free_mib": s["framebuffer_locked_free_mib"],
                        # what the capacity model says no type can fill; a report older than the field: locked free
                        "framebuffer_stranded_mib": s.get("framebuffer_stranded_mib", s["framebuffer_locked_free_mib"]),
                    }
                )
                for g in doc["gpus"]:
                    if g.get("locked_to"):
                        gpus_locked += 1
                    elif not g.get("devices") and g.get("framebuffer_total_mib"):
                        gpus_empty += 1
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
                if doc["missing"]:  # most hosts have none: no generator to set up
                    missing.extend({"host": name, **m} for m in doc["missing"])
                if doc["warnings"]:
                    warnings.extend(f"{name}: {w}" for w in doc["warnings"])
        finally:
            self.gpus_locked += gpus_locked
            self.gpus_empty += gpus_empty

    def document(self, generated_at: str) -> dict[str, Any]:
        """The fleet document (vgpuadm-fleet/1) of the hosts folded in."""
        hosts, leaks, missing = self.hosts, self.leaks, self.missing
        if not hosts:
            raise UsageError(
                "no inventory files to merge", "pass one or more files: vgpuadm inventory merge A.json B.json"
            )
        type_rows = sorted(
            (
                {
                    "type_id": type_id,
                    "name": name,
                    "framebuffer_mib": fb,
                    "used": used,
                    "free": free,
                    "stranded": stranded,
                    "reserved": reserved,
                    "max": most,
                    "hosts_with_room": with_room,
                    "hosts": [
                        {"host": h, "used": u, "free": f, "stranded": st}
                        for h, u, f, st in zip(*[iter(per_host)] * 4, strict=True)
                    ],
                    "framebuffer_used_mib": used * fb if fb is not None else None,
                    "framebuffer_free_mib": free * fb if fb is not None else None,
                }
                for type_id, (name, fb, used, free, stranded, reserved, most, with_room, per_host) in self.types.items()
            ),
            key=lambda row: type_id_order(row["type_id"]),
        )
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
                "gpus_locked": self.gpus_locked,
                "gpus_empty": self.gpus_empty,
                "framebuffer_free_mib": free_fb,
                "framebuffer_locked_free_mib": locked_fb,
                "locked_share": round(locked_fb / free_fb, 4) if free_fb else 0.0,
            },
            "hosts": hosts,
            "types": type_rows,
            "leaks": leaks,
            "missing": missing,
            "warnings": self.warnings,
        }
