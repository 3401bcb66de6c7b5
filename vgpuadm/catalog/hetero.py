"""NVIDIA host policies as the planner sees them, per GPU: heterogeneous (mixed-size) time-sliced mode, the
placement size and supported placement IDs of each time-sliced type, and the vGPU scheduler (read by
host/hetero.py from nvidia-smi; facts in docs/reference/nvidia-host-policies.md). Pure data; the placement rules
are catalog/capacity.py's."""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("best-effort", "equal-share", "fixed-share")
# RmPVMRL low word per policy (NVIDIA: 0x00 best effort, 0x01 equal share, 0x11 fixed share; 0x00TT00xx adds a
# time slice of TT ms)
RMPVMRL = {"best-effort": 0x00, "equal-share": 0x01, "fixed-share": 0x11}
TIMESLICE_MAX_MS = 30  # the largest time slice vgpuadm writes (one byte of RmPVMRL holds up to 255) [I]


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
