"""MIG as the planner sees it: a GPU's MIG mode, its GPU-instance profiles with their placements, and its GPU
instances (read by host/mig.py from nvidia-smi), plus the MIG profile a MIG-backed vGPU type needs. Pure data.

A MIG-backed type is named `<board>-<slices>-<GB>C[ME]` and needs the GPU-instance profile `<slices>g.<GB>gb`
(`+me` for ME): H200X-1-18C ↔ 1g.18gb, A100D-1-10CME ↔ 1g.10gb+me (reference §3.5). Where the driver says which
profile a type needs (`nvidia-smi vgpu -s -v`: GPU Instance Profile ID), that answer wins: time-sliced MIG-backed
types share a larger instance than their name's size.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile of one GPU (`mig -lgip` row + its `-lgipp` placements)."""

    name: str  # 1g.18gb
    profile_id: int
    free: int
    total: int
    memory_gib: float
    p2p: bool
    sm: int
    ce: int | None
    dec: int
    enc: int
    jpeg: int | None
    ofa: int | None
    starts: tuple[int, ...]
    size: int

    @property
    def slots(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(range(s, s + self.size)) for s in self.starts)


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance (`mig -lgi` row) and the vGPU devices on it (layout C VFs whose gpu_instance_id names it)."""

    name: str
    profile_id: int
    instance_id: int
    start: int
    size: int
    users: tuple[str, ...] = ()

    @property
    def slots(self) -> set[int]:
        return set(range(self.start, self.start + self.size))


@dataclass(frozen=True)
class MigGpu:
    """One GPU nvidia-smi reports: index, address, modes, profiles and instances."""

    index: int
    address: str
    product: str
    mig_current: str  # Enabled, Disabled, N/A
    mig_pending: str
    virtualization_mode: str
    host_vgpu_mode: str
    profiles: tuple[MigProfile, ...]
    instances: tuple[MigInstance, ...]

    @property
    def mig_capable(self) -> bool:
        return self.mig_current in ("Enabled", "Disabled") and bool(self.profiles)

    @property
    def enabled(self) -> bool:
        return self.mig_current == "Enabled"

    def profile(self, word: str) -> MigProfile | None:
        """A profile by name (`1g.18gb`, `MIG 1g.18gb`) or id (`19`)."""
        word = word.strip().removeprefix("MIG ").strip().lower()
        return next((p for p in self.profiles if word in (p.name, str(p.profile_id))), None)
