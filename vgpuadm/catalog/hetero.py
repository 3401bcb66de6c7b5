"""NVIDIA host policies as the planner sees them, per GPU: heterogeneous (mixed-size) time-sliced mode, the
placement size and supported placement IDs of each time-sliced type, and the vGPU scheduler (read by
host/hetero.py from nvidia-smi; facts in docs/reference/nvidia-host-policies.md). Pure data; the placement rules
are catalog/capacity.py's."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import HostIOError
from vgpuadm.model import PCI_PATTERN

POLICIES = ("best-effort", "equal-share", "fixed-share")
# RmPVMRL low word per policy (NVIDIA: 0x00 best effort, 0x01 equal share, 0x11 fixed share; 0x00TT00xx adds a
# time slice of TT ms)
RMPVMRL = {"best-effort": 0x00, "equal-share": 0x01, "fixed-share": 0x11}
TIMESLICE_MAX_MS = 30  # the largest time slice vgpuadm writes (one byte of RmPVMRL holds up to 255) [I]
STATE_PATH = "/var/lib/vgpuadm/gpus.json"  # io/policyfile.py writes it; its text is made and read here
MAX_STATE = 64 * 1024
_PCI = re.compile(PCI_PATTERN)


@dataclass(frozen=True)
class TypePlacement:
    """A time-sliced type's placement on one GPU: the slots one vGPU takes and the IDs (first slots) it may use."""

    type_num: int
    name: str
    fb_mib: int | None
    size: int
    ids: tuple[int, ...]


@dataclass(frozen=True)
class GpuPolicy:
    """One GPU's policies as nvidia-smi reports them."""

    index: int
    address: str
    supported: bool  # Heterogeneous Time-Slice Sizes : Supported
    mode: str  # vGPU Heterogeneous Mode: Enabled, Disabled, N/A
    scheduler: str | None  # best-effort, equal-share, fixed-share; None when not reported
    timeslice_ms: int
    types: tuple[TypePlacement, ...]

    @property
    def heterogeneous(self) -> bool:
        return self.mode == "Enabled"

    @property
    def slots(self) -> int:
        return max((max(t.ids) + t.size for t in self.types if t.ids), default=0)

    @property
    def slot_mib(self) -> int | None:
        """MiB per slot (from any type whose framebuffer is known), to speak of free slots in GiB."""
        sizes = [t.fb_mib // t.size for t in self.types if t.fb_mib and t.size]
        return min(sizes) if sizes else None

    def placement(self, type_num: int) -> TypePlacement | None:
        return next((t for t in self.types if t.type_num == type_num), None)


def rmpvmrl(policy: str, timeslice_ms: int = 0) -> int:
    """The RmPVMRL DWORD for a policy and time slice (0: the driver's default)."""
    value = RMPVMRL[policy]
    return value | (timeslice_ms << 16) if value and timeslice_ms else value


def render_modprobe(schedulers: Mapping[str, tuple[str, int]]) -> str | None:
    """The modprobe file for GPU address → (policy, time slice ms); None when every GPU is best effort (no file)."""
    parts = [f"pci={gpu};RmPVMRL={rmpvmrl(p, ts):#x}" for gpu, (p, ts) in sorted(schedulers.items())
             if p != "best-effort"]  # fmt: skip
    if not parts:
        return None
    return ("# written by vgpuadm (`gpus:` in a plan file): the vGPU scheduler per GPU, read when nvidia loads\n"
            f'options nvidia NVreg_RegistryDwordsPerDevice="{";".join(parts)}"\n')  # fmt: skip


def render_state(gpus: Mapping[str, Mapping[str, Any]]) -> str | None:
    return (
        json.dumps({"version": 1, "gpus": dict(sorted(gpus.items()))}, indent=1, sort_keys=True) + "\n"
        if gpus
        else None
    )


def parse_state(text: str | None) -> dict[str, dict[str, Any]]:
    """GPU address → {heterogeneous: bool, scheduler: str, timeslice_ms: int}; a malformed file is an error."""
    if text is None:
        return {}
    where = STATE_PATH
    try:
        doc = json.loads(text[:MAX_STATE]) if len(text) <= MAX_STATE else None
    except ValueError:
        doc = None
    gpus = doc.get("gpus") if isinstance(doc, dict) and doc.get("version") == 1 else None
    if not isinstance(gpus, dict):
        raise HostIOError(f"{where} is not a vgpuadm gpus state file", f"remove {where} and apply the plan again")
    out: dict[str, dict[str, Any]] = {}
    for gpu, body in gpus.items():
        ok = isinstance(body, dict) and _PCI.fullmatch(str(gpu)) and isinstance(body.get("heterogeneous"), bool)
        ok = ok and body.get("scheduler") in POLICIES and isinstance(body.get("timeslice_ms"), int)
        if not ok or not 0 <= body["timeslice_ms"] <= TIMESLICE_MAX_MS:
            raise HostIOError(f"{where}: GPU entry {str(gpu)[:20]!r} is malformed", f"remove {where} and apply again")
        out[str(gpu)] = {k: body[k] for k in ("heterogeneous", "scheduler", "timeslice_ms")}
    return out
