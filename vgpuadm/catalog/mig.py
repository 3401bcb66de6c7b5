"""MIG as the planner sees it: a GPU's MIG mode, its GPU-instance profiles with their placements, and its GPU
instances (read by host/mig.py from nvidia-smi), plus the MIG profile a MIG-backed vGPU type needs. Pure data.

A MIG-backed type is named `<board>-<slices>-<GB>C[ME]` and needs the GPU-instance profile `<slices>g.<GB>gb`
(`+me` for ME): H200X-1-18C ↔ 1g.18gb, A100D-1-10CME ↔ 1g.10gb+me (reference §3.5). Where the driver says which
profile a type needs (`nvidia-smi vgpu -s -v`: GPU Instance Profile ID), that answer wins: time-sliced MIG-backed
types share a larger instance than their name's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpuadm.model import mig_profile_name, nvidia_type_id


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
    ecc: str | None = None  # the current ECC mode, Enabled or Disabled; None: not reported
    driver_version: str | None = None  # the host driver's release

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


@dataclass(frozen=True)
class MigType:
    """One type the driver lists for a GPU (`nvidia-smi vgpu -s -v`): its id, name, the GPU-instance profile it
    needs (None: time-sliced) and how many of it the GPU holds at most."""

    type_id: int
    name: str  # NVIDIA DC-1-12C
    profile_id: int | None
    max_instances: int | None


@dataclass(frozen=True)
class MigHost:
    """The host's MIG state as the planners see it: every GPU nvidia-smi reports, and per GPU (PF address) the types
    its driver lists (empty where `vgpu -s -v` answered nothing, e.g. layout B boards)."""

    gpus: tuple[MigGpu, ...]
    types: dict[str, tuple[MigType, ...]]

    def gpu(self, address: str) -> MigGpu | None:
        return next((g for g in self.gpus if g.address == address and g.mig_capable), None)

    def supported(self) -> dict[str, tuple[tuple[int, str], ...]]:
        """PF → (type id, name) of every type the driver lists."""
        return {pf: tuple((t.type_id, t.name) for t in types) for pf, types in self.types.items()}

    def need(self, pf: str, type_id: str, name: str) -> tuple[str, int] | None:
        """The GPU-instance profile a MIG-backed type (`nvidia-<id>`, its name) needs on GPU `pf`, and how many of
        its vGPUs one instance holds: the driver's profile id where it names one (time-sliced MIG-backed types
        share a larger instance than their name says: DC-1-12C on 1g.24gb), else the name's (H200X-1-18C ↔
        1g.18gb); per instance, the type's maximum over the profile's instance count (DC-1-12C: 8 / 4 = 2), else 1.
        None when `pf` has no MIG or the type names no profile."""
        g = self.gpu(pf)
        if g is None:
            return None
        info = next((t for t in self.types.get(pf, ()) if nvidia_type_id(t.type_id) == type_id), None)
        p = g.profile(str(info.profile_id)) if info is not None and info.profile_id is not None else None
        if p is None:
            word = mig_profile_name(name)
            if word is None:
                return None
            p = g.profile(word)
            if p is None:
                return word, 1  # the GPU offers no such profile: planning it says so
        per = info.max_instances // p.total if info is not None and info.max_instances and p.total else 1
        return p.name, max(per, 1)


def recorded_instance(extra: dict[str, str]) -> tuple[int, int] | None:
    """The GPU instance vgpuadm made for a device, as its metadata records it (`mig_instance` = profile id:start,
    grammar-checked on read): (profile id, start), or None."""
    pid, _, start = extra.get("mig_instance", "").partition(":")
    return (int(pid), int(start)) if pid.isdecimal() and start.isdecimal() else None
