"""The simulated GPUs' placement and scheduler tables for heterogeneous time-sliced vGPU: pure data and functions
over the marker model (no host I/O), so the tree builder (sim/profiles.py) and the simulated driver and nvidia-smi
(sim/hetero.py, sim/nvidia_smi.py) read the same numbers. The model and its sources: sim/hetero.py's docstring
and docs/reference/nvidia-host-policies.md."""

from __future__ import annotations

from typing import Any

POLICIES = ("best-effort", "equal-share", "fixed-share")
NO_PLACEMENT = -1


def gpu_state(types: list[list[Any]]) -> dict[str, Any]:
    """The marker's entry for one GPU, from its time-sliced `types` (the ones with a placement): supported, mode
    off, the best-effort scheduler."""
    sizes = [int(fb) // 1024 for _num, _name, fb, _mx in types if fb]
    return {"supported": True, "enabled": False, "slots": max(sizes), "types": sorted(int(t[0]) for t in types),
            "scheduler": {"policy": "best-effort", "timeslice_ms": 0}}  # fmt: skip


def placement_size(fb_mib: int) -> int:
    return int(fb_mib) // 1024


def supported_ids(st: dict[str, Any], fb_mib: int) -> list[int]:
    size = placement_size(fb_mib)
    return list(range(0, st["slots"] - size + 1, size)) if size else []


def decode_rmpvmrl(value: int) -> tuple[str, int]:
    """0x00 best effort; 0x01 / 0x00TT0001 equal share; 0x11 / 0x00TT0011 fixed share (TT: time slice in ms, hex).
    Anything else: best effort [I: the driver ignores a value it cannot read]."""
    low, tt = value & 0xFFFF, (value >> 16) & 0xFF
    if value >> 24 or low not in (0x00, 0x01, 0x11):
        return "best-effort", 0
    return {0x00: "best-effort", 0x01: "equal-share", 0x11: "fixed-share"}[low], (tt if low else 0)
