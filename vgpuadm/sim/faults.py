"""Fault injection for simulated hosts: make chosen writes fail with a chosen errno, from tests or from another
process (`vgpuadm sim fail`).

Faults live in the marker's `faults` list, so every process writing to the root sees them:
    {"path_glob": "/sys/bus/pci/devices/*/sriov_numvfs", "errno": "EIO", "after": 0, "times": 1}
- `path_glob` is an fnmatch pattern (`*` also crosses `/`) tried against the host path as written and against
  its canonical form (links resolved, e.g. /sys/devices/pci0000:00/…).
- `after`: this many matching writes still succeed first; `times`: how many then fail (0 = every one, forever).
A failing write has no effect at all (the kernel refused it before doing anything). Faults survive `sim reboot`.

A slow write instead: {"path_glob": …, "stall": 5.0, "after": 0, "times": 1} (`inject_stall`) — the write takes
effect, then the writer waits `stall` seconds before the kernel returns (a driver slow to finish). Tests use it to
interrupt a change in the middle of a step (tests/unit/test_rollback.py).
"""

from __future__ import annotations

import errno as errno_mod
import json
import math
from fnmatch import fnmatchcase
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.sim.state import load_model, marker_path, require_simulated, root_lock
from vgpuadm.sim.tree import TreeBuilder


def errno_code(name: str) -> int:
    code = getattr(errno_mod, name.upper(), None) if name.upper().startswith("E") else None
    if not isinstance(code, int):
        raise UsageError(f'Unknown errno name "{name}"', "use a name such as EIO, EBUSY, EINVAL, ENOSPC")
    return code


def save_faults(root: str, faults: list[dict[str, Any]]) -> None:
    """Replace the marker's faults list (caller holds the root lock)."""
    model = load_model(root)
    model["faults"] = faults
    TreeBuilder(root).marker(model)


def inject_fault(root: str, path_glob: str, errno_name: str, times: int = 1, after: int = 0) -> None:
    """Make the next matching writes under `root` fail with `errno_name` (see the module docstring)."""
    require_simulated(root)
    errno_code(errno_name)
    if times < 0 or after < 0:
        raise UsageError(f"times={times} after={after}", "times and after are counts: 0 or more")
    with root_lock(root):
        faults = load_model(root)["faults"]
        faults.append({"path_glob": path_glob, "errno": errno_name.upper(), "after": after, "times": times})
        save_faults(root, faults)


def inject_stall(root: str, path_glob: str, seconds: float, times: int = 1, after: int = 0) -> None:
    """Make the next matching writes under `root` take effect, then return only after `seconds`."""
    require_simulated(root)
    if not (math.isfinite(seconds) and 0 < seconds <= 600) or times < 0 or after < 0:
        raise UsageError(f"stall={seconds} times={times} after={after}", "stall is 0-600 seconds; times, after ≥ 0")
    with root_lock(root):
        faults = load_model(root)["faults"]
        faults.append({"path_glob": path_glob, "stall": float(seconds), "after": after, "times": times})
        save_faults(root, faults)


def clear_faults(root: str) -> None:
    require_simulated(root)
    with root_lock(root):
        save_faults(root, [])


def list_faults(root: str) -> list[dict[str, Any]]:
    require_simulated(root)
    with open(marker_path(root)) as f:
        return list(json.load(f).get("faults") or [])


def check(root: str, faults: list[dict[str, Any]], paths: tuple[str, ...]) -> tuple[int | None, float]:
    """Called by the kernel under the lock before a write: (the errno to fail with or None, the seconds to stall
    after the write took effect). Persists counters."""
    updated = [dict(f) for f in faults]
    code = None
    stall = 0.0
    for i, fault in enumerate(updated):
        if not any(fnmatchcase(p, fault["path_glob"]) for p in paths):
            continue
        if fault["after"] > 0:
            fault["after"] -= 1
            continue
        if "stall" in fault:
            stall = float(fault["stall"])
        else:
            code = errno_code(fault["errno"])
        if fault["times"] == 1:
            del updated[i]
        elif fault["times"] > 1:
            fault["times"] -= 1
        break
    if updated != faults:
        save_faults(root, updated)
    return code, stall
