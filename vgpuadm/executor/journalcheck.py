"""The journal is untrusted input: `recover` and `reconcile` act on it as root. Before anything reads its steps,
the file must be owned by root or by the caller and not writable by group or others, and its document must match
the journal's schema: the structure `execute` writes, known step kinds with exactly their fields, and every value
matching its grammar (PCI addresses, UUIDs, type ids, driver, domain and unit names); every free-text field has a
bound too: vgpu_params in their `k=v` form, device XML a <hostdev> element, metadata an element, mdevctl definitions
JSON objects, unit files and descriptions printable text, each with a length limit, and no XML declaration, DOCTYPE
or entity anywhere. Anything else is one UnsafeError naming /var/lib/vgpuadm/journal.json. The checks of free-text
fields are declared with each step's fields (steps.check, narrowed by Step.checks); the identity grammars by field
name are here. A step kind an older vgpuadm wrote (steps.LEGACY_KINDS) is checked as the step it is now."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from typing import Any

from vgpuadm.errors import UnsafeError
from vgpuadm.model import PARENT_PATTERN, PCI_PATTERN, UUID_PATTERN
from vgpuadm.steps import DRIVER, STEP_KINDS, line, upgrade_step

JOURNAL_HOST = "/var/lib/vgpuadm/journal.json"
HINT = f"inspect {JOURNAL_HOST} and remove it by hand if no vgpuadm change was interrupted"
MAX_TEXT = 1024 * 1024

PCI = re.compile(PCI_PATTERN)
PARENT = re.compile(PARENT_PATTERN)  # the same rule the domain metadata holds a parent to (virt/xml.py)
UUID = re.compile(UUID_PATTERN)
TYPE_ID = re.compile(r"[A-Za-z0-9_.-]{0,64}")
DOMAIN = re.compile(r"[^/\x00-\x1f\x7f]{1,255}")
UNIT = re.compile(r"[A-Za-z0-9_@:-][A-Za-z0-9_.@:-]{0,254}")
_PRINTABLE = re.compile(r"[^\x00-\x08\x0b-\x1f\x7f]*")  # the plan summary: no control character but tab and newline
_ONE_LINE = line(1024)  # a text field whose step declares no check of its own
STATES = ("applying", "rolling-back")
GRAMMAR: dict[str, re.Pattern[str]] = {
    "parent": PARENT, "address": PCI, "pf": PCI, "vf": PCI, "uuid": UUID, "type_id": TYPE_ID, "driver": DRIVER,
    "expect": DRIVER, "domain": DOMAIN, "name": UNIT, "device_path_kind": re.compile(r"mdev|vf"),
    "hook": re.compile(r"qemu\.d/vgpuadm|qemu|qemu\.vgpuadm-chained"),
    "profile": re.compile(r"[0-9]+[cg]\.[0-9a-z.]+(\+[a-z.]+)?"),  # a MIG profile name, 1g.18gb
}  # fmt: skip


def check_progress_state(state: Any) -> str:
    """The `state` of a progress line: one the executor writes."""
    if state not in STATES:
        raise _bad(f"a progress line holds the state {str(state)[:60]!r}")
    return str(state)


def _bad(problem: str) -> UnsafeError:
    return UnsafeError(f"refusing the journal {JOURNAL_HOST}: {problem}", HINT)


def check_owner(st: os.stat_result) -> None:
    """Owned by root or the caller, a regular file, writable by its owner only."""
    if not stat.S_ISREG(st.st_mode):
        raise _bad("it is not a regular file")
    if st.st_uid not in (0, os.geteuid()):
        raise _bad(f"it is owned by uid {st.st_uid}, not root or this user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _bad(f"it is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}")


def _value(kind: str, name: str, annotation: str, value: Any, free: Any) -> None:
    where = f"step {kind} field {name}"
    if annotation == "bool":
        ok = isinstance(value, bool)
    elif annotation == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and -1 <= value <= 4096
    elif annotation.startswith("tuple["):
        ok = isinstance(value, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) and PCI.fullmatch(p[0])
            and DRIVER.fullmatch(p[1]) for p in value
        )  # fmt: skip
    else:
        ok = isinstance(value, str) or (value is None and "None" in annotation)
        if ok and isinstance(value, str):
            ok = len(value) <= MAX_TEXT
            pattern = GRAMMAR.get(name)
            if name == "id":
                pattern = PCI if PCI.fullmatch(value) else UUID
            if pattern is not None and not (value == "" and name in ("type_id", "driver", "expect")):
                ok = ok and pattern.fullmatch(value) is not None and ".." not in value.split("/")
            if pattern is None:  # free text: the step field's own check (steps.check), else one printable line
                ok = ok and bool(free(value))
    if not ok:
        raise _bad(f"{where} holds {str(value)[:60]!r}, not a valid value")


def check_document(doc: Any) -> None:
    """The journal's plan document: {"version": 1, "plan": {"summary": str, "steps": [step…]}, …}."""
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise _bad("it is not a version 1 vgpuadm journal")
    plan = doc.get("plan")
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list):
        raise _bad("it holds no plan steps")
    summary = plan.get("summary", "")
    if not isinstance(summary, str) or len(summary) > 4096 or _PRINTABLE.fullmatch(summary) is None:
        raise _bad("its plan summary is not a line of text")
    for key in ("current", "done", "pid"):
        if key in doc and (not isinstance(doc[key], int) or isinstance(doc[key], bool) or doc[key] < 0):
            raise _bad(f"{key} is not a non-negative integer")
    for old in plan["steps"]:
        if not isinstance(old, dict):
            raise _bad("a step is not an object")
        step = upgrade_step(old)  # an older vgpuadm's kind, as the step it is now (steps.step_from_dict reads it so)
        cls = STEP_KINDS.get(str(step.get("kind")))
        if cls is None:
            raise _bad(f"unknown step kind {str(step.get('kind'))[:60]!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        extra = sorted(set(step) - set(fields) - {"kind"})
        if extra:
            raise _bad(f"step {cls.kind} has unknown fields {', '.join(extra)}")
        checks = cls.checks(step)
        for name, f in fields.items():
            if name not in step:
                if f.default is dataclasses.MISSING:
                    raise _bad(f"step {cls.kind} lacks field {name}")
                continue
            _value(cls.kind, name, str(f.type), step[name], checks.get(name, _ONE_LINE))
