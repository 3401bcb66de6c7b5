"""The capacity model's per-GPU answer: how many more of each type fit on each physical GPU now, and why not. Pure.

Part of the one capacity model: catalog/capacity.py re-exports the rules here and holds the rest (placement's
reasons, projections, MIG and heterogeneous placements). It is its own module because the read path
(`vgpuadm types --json`, cli/fast.py) reads it: it imports no dataclasses, typing, json or collections
(bench/bench_cold_start.py). `gpu_rooms(snapshot, awaiting)` is the one answer `types` (fits_on_gpu), `inventory`
(free, room per GPU, stranded) and their renderers read. Capacity reserved for devices that domains record but
that do not exist now (after a reboot, awaiting `vgpuadm restore`) is counted neither used nor free.
"""

from __future__ import annotations

from vgpuadm.catalog.boards import board_framebuffer_mib
from vgpuadm.model import (
    Allocation,
    Holding,
    HostSnapshot,
    Layout,
    MdevParent,
    VgpuType,
    _Record,
    _record,
    describe_nvidia_name,
    holding,
    is_nvidia_type,
)

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence
    from typing import Any


def sharing_rule(layout: Layout, parent: MdevParent | None) -> str:
    """one-type | one-size | kernel | whole, for a physical GPU of `layout` (its mdev parent, if any): the layout's
    declared rule (Layout.sharing), where one type per GPU is NVIDIA's and other drivers share the kernel's budget."""
    rule = layout.sharing
    if rule == "one-type" and not (parent is not None and any(is_nvidia_type(t.type_id) for t in parent.types)):
        return "kernel"
    return rule


def conflicting_types(running: Iterable[str], type_id: str) -> list[str]:
    """Layout A: the other types a GPU runs, which forbid `type_id` on it (one vGPU type per GPU)."""
    return sorted({tid for tid in running if tid != type_id})


def conflicting_sizes(running: Iterable[int], framebuffer_mib: int | None) -> list[int]:
    """Layouts B/C: the other framebuffer sizes a GPU runs, which forbid a type of `framebuffer_mib` on it."""
    if not framebuffer_mib:
        return []
    return sorted({s for s in running if s != framebuffer_mib})


def gpu_maximum(vfs: int, t: VgpuType, total_fb: int | None) -> int | None:
    """Layouts B/C: at most one vGPU per VF and at most the type's maximum. A type with no maximum is bounded by
    the framebuffer `total_fb` when known, else None. A known maximum is not cut by framebuffer arithmetic: MIG
    profile sizes are rounded (H200X-3-71C: 2 on 141 GB)."""
    if t.max_instances is not None:
        return min(vfs or 1, t.max_instances)
    if total_fb and t.framebuffer_mib:
        return min(vfs or 1, total_fb // t.framebuffer_mib)
    return None


def size_key(t: VgpuType) -> tuple[int, bool]:
    """Equal-size mode groups types by framebuffer size and MIG-backed-ness (reference §3.4)."""
    return t.framebuffer_mib or 0, describe_nvidia_name(t.name).slices is not None


def _mig_only(t: VgpuType, keys: set[tuple[int, bool] | None]) -> bool:
    """MIG-backed `t` on a GPU running only MIG-backed vGPUs: profiles mix there (each vGPU has its own GPU
    instance), so where it fits is the GPU-instance placement rule's (place_gpu_instances), not one size per GPU."""
    return size_key(t)[1] and None not in keys and all(k is not None and k[1] for k in keys)


# -- room per type on one physical GPU: what the inventory reports ---------------------------------------------


@_record
class Running(_Record):
    """One vGPU on a physical GPU: the function it sits on, its type, size and display name; `reserved_for`: the
    domain whose recorded device it is when it does not exist now (awaiting `vgpuadm restore`), else None."""

    parent: str
    type_id: str
    framebuffer_mib: int | None
    name: str | None
    reserved_for: str | None

    def __init__(
        self, parent: str, type_id: str, framebuffer_mib: int | None = None, name: str | None = None,
        reserved_for: str | None = None,
    ) -> None:  # fmt: skip
        self.__dict__.update(parent=parent, type_id=type_id, framebuffer_mib=framebuffer_mib, name=name,
                             reserved_for=reserved_for)  # fmt: skip


@_record
class Room(_Record):
    """One type on one physical GPU: vGPUs of it running, the GPU's maximum of it, how many more fit, why none
    fits (when free is 0), how many the free framebuffer would hold but a lock forbids (stranded), and how many of
    it are reserved for domains whose recorded devices await `vgpuadm restore` (counted neither used nor free)."""

    used: int
    max: int | None
    free: int
    reason: str
    stranded: int
    locked: bool  # free is 0 because the GPU runs another type / size / MIG-ness
    reserved: int

    def __init__(
        self, used: int, max: int | None, free: int, reason: str = "", stranded: int = 0, locked: bool = False,
        reserved: int = 0,
    ) -> None:  # fmt: skip
        self.__dict__.update(used=used, max=max, free=free, reason=reason, stranded=stranded, locked=locked,
                             reserved=reserved)  # fmt: skip

    def but(self, **changes: Any) -> Room:
        """This room with `changes` (a replace that does not import the dataclasses module)."""
        return Room(**{**{f: self.__dict__[f] for f in self._fields}, **changes})


def _running_key(r: Running) -> tuple[int, bool] | None:
    if not r.framebuffer_mib:
        return None
    return r.framebuffer_mib, r.name is not None and describe_nvidia_name(r.name).slices is not None


def _full(used: int, mx: int | None) -> str:
    return f"full ({used} of {mx})" if mx is not None else "the kernel reports 0 available"


def type_room(
    rule: str,
    vfs: int,
    entries: Sequence[VgpuType],
    running: Sequence[Running],
    total_fb: int | None,
    free_fb: int | None,
) -> Room:
    """Room for the type of `entries` (one entry per parent of the GPU offering it) on a GPU of sharing `rule` with
    `vfs` enabled VFs, running `running`, of `total_fb` MiB framebuffer (`free_fb` free; None: unknown)."""
    room = _room(rule, vfs, entries, running, total_fb)
    t = entries[0]
    held = [r.reserved_for for r in running if r.reserved_for]
    if held:  # the kernel counts a reserved instance as free: take it from its parent's count, and say why
        mine = [r for r in running if r.reserved_for and r.type_id == t.type_id]
        taken = _count(r.parent for r in mine)
        kernel = [e.with_available(max(0, e.available_instances - taken.get(e.parent, 0))) for e in entries]
        room = _room(rule, vfs, entries if t.layout.one_vgpu_per_vf else kernel, running, total_fb)
        room = room.but(used=room.used - len(mine), reserved=len(mine))
        live = [r for r in running if not r.reserved_for]
        if room.free == 0 and _room(rule, vfs, entries, live, total_fb).free > 0:
            room = room.but(reason=reserved_for(held))
    if room.locked and free_fb and t.framebuffer_mib:
        n = free_fb // t.framebuffer_mib
        return room.but(stranded=min(n, room.max) if room.max is not None else n)
    return room


def _room(rule: str, vfs: int, entries: Sequence[VgpuType], running: Sequence[Running], total_fb: int | None) -> Room:
    t = entries[0]
    type_id = t.type_id
    counts: dict[str, int] = {}
    for r in running:
        counts[r.type_id] = counts.get(r.type_id, 0) + 1
    used = counts.get(type_id, 0)
    available = sum(e.available_instances for e in entries)
    if rule == "one-type":
        mx = t.max_instances
        others = conflicting_types(counts, type_id)
        if others:
            return Room(used, mx, 0, f"runs {', '.join(others)} (one type per GPU)", locked=True)
        free = min(available, mx - used) if mx is not None else available
        if free > 0:
            return Room(used, mx, free)
        # some drivers read 0 for every type in some states (reference §2.4): believe the kernel, say so
        return Room(used, mx, 0, _full(used, mx) if mx is not None and used >= mx else "the kernel reports 0 available")
    if rule == "one-size":
        mx = gpu_maximum(vfs, t, None if t.max_instances is not None else total_fb)
        sizes = sorted({r.framebuffer_mib for r in running if r.framebuffer_mib is not None})
        keys = {k for k in map(_running_key, running) if k is not None}
        if sizes and _mig_only(t, set(map(_running_key, running))):  # placed by GPU instances, not by size
            busy = {r.parent for r in running}
            free = sum(1 for e in entries if e.parent not in busy and e.available_instances > 0)
            if mx is not None:
                free = min(free, mx - used)
            return Room(used, mx, free) if free > 0 else Room(used, mx, 0, _full(used, mx) if mx is not None
                                                              and used >= mx else "no free VF")  # fmt: skip
        if sizes and (t.framebuffer_mib not in sizes or (t.framebuffer_mib and keys - {size_key(t)})):
            size = "/".join(f"{s} MiB" for s in sizes)
            if t.framebuffer_mib in sizes:  # same size, the other kind: MIG-backed vs time-sliced (reference §3.4)
                size += " MIG-backed" if any(mig for _, mig in keys) else " time-sliced"
            return Room(
                used, mx, 0, f"runs {', '.join(sorted(counts))} ({size}; one framebuffer size per GPU)", locked=True
            )
        busy = {r.parent for r in running}
        free = sum(1 for e in entries if e.parent not in busy and e.available_instances > 0)
        if mx is not None:  # every running vGPU has this size, so each one uses a slot of this type's maximum
            free = min(free, mx - len(running))
        if free > 0:
            return Room(used, mx, free)
        return Room(used, mx, 0, _full(len(running), mx) if mx is not None and len(running) >= mx else "no free VF")
    if rule == "mixed-size":  # the driver lists a type on a free VF while one of its placements is free
        busy = {r.parent for r in running}
        free = sum(1 for e in entries if e.parent not in busy and e.available_instances > 0)
        return Room(used, None, free, "" if free else "no free placement (see the mixed-size table)")
    return Room(
        used, t.max_instances, available, "" if available > 0 else "the kernel reports 0 available (shared budget)"
    )


def stranded_framebuffer(rooms: Iterable[tuple[VgpuType, Room]], free_fb: int | None, busy: bool) -> int | None:
    """Free framebuffer MiB of a GPU that no type it can still take can fill: what is left once the type that fills
    most has taken every instance that still fits. 0 on an idle GPU (its largest type spans it); None if unknown."""
    if free_fb is None:
        return None
    if not busy or free_fb <= 0:
        return 0
    fill = max((r.free * (t.framebuffer_mib or 0) for t, r in rooms if r.free > 0), default=0)
    return free_fb - min(free_fb, fill)


def whole_gpu_room(devices: int) -> int:
    """Passthrough: a GPU is given whole or not at all — 1 while none of its functions is taken, else 0."""
    return 0 if devices else 1


def _count(items: Iterable[str]) -> dict[str, int]:
    """collections.Counter's counts (collections stays off the read path)."""
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def reserved_for(domains: Iterable[str]) -> str:
    """`reserved for web01 (3 devices awaiting `vgpuadm restore`)`: who holds capacity that does not exist now."""
    parts = [f"{d} ({n} device{'s' if n != 1 else ''} awaiting `vgpuadm restore`)"
             for d, n in sorted(_count(domains).items())]  # fmt: skip
    return "reserved for " + ", ".join(parts)


# -- the answer for a whole host --------------------------------------------------------------------------------


@_record
class GpuRoom(_Record):
    """One physical GPU (or a non-PCI mdev parent such as mtty): its layout and sharing rule, enabled VFs, the
    types it offers (type id → one entry per parent offering it), the vGPUs on it (existing and reserved), its
    framebuffer (total, None when unknown; used by existing vGPUs; reserved), and the room per type."""

    address: str
    layout: Layout
    rule: str  # one-type | one-size | mixed-size | kernel | whole
    vfs: int
    types: dict[str, list[VgpuType]]
    running: list[Running]
    total_fb: int | None
    used_fb: int
    reserved_fb: int
    rooms: dict[str, tuple[VgpuType, Room]]

    def __init__(
        self, address: str, layout: Layout, rule: str, vfs: int, types: dict[str, list[VgpuType]],
        running: list[Running], total_fb: int | None, used_fb: int, reserved_fb: int,
        rooms: dict[str, tuple[VgpuType, Room]],
    ) -> None:  # fmt: skip
        self.__dict__.update(address=address, layout=layout, rule=rule, vfs=vfs, types=types, running=running,
                             total_fb=total_fb, used_fb=used_fb, reserved_fb=reserved_fb, rooms=rooms)  # fmt: skip

    @property
    def free_fb(self) -> int | None:
        return self.total_fb - self.used_fb - self.reserved_fb if self.total_fb is not None else None

    def fits(self, type_id: str) -> int:
        """How many more of `type_id` fit on this GPU now (0 when it does not offer it)."""
        found = self.rooms.get(type_id)
        return found[1].free if found else 0


def heterogeneous(snap: HostSnapshot, gpu: str) -> bool:
    """Whether `gpu` runs NVIDIA's heterogeneous (mixed-size) mode (its GpuPolicy, read by host/hetero.py)."""
    return getattr(snap.policies.get(gpu), "heterogeneous", False) is True


def gpu_rule(snap: HostSnapshot, layout: Layout, gpu: str) -> str:
    """The sharing rule of physical GPU `gpu`: mixed-size in heterogeneous mode, else its layout's."""
    return "mixed-size" if heterogeneous(snap, gpu) else sharing_rule(layout, snap.mdev_parents.get(gpu))


def vf_type_name(snap: HostSnapshot, physfn: str | None, address: str, type_num: int) -> str | None:
    """A running VF's own creatable list no longer shows its type; its siblings' lists, or the driver's list of
    supported types (discovery puts it in `offered` when no list shows them), do."""
    for vf in sorted(snap.vendor_vfs.values(), key=lambda v: (v.address != address, v.address)):
        if vf.physfn == physfn:
            for t in vf.offered:
                if t.numeric_id == type_num:
                    return t.name
    return None


def _gpus(snap: HostSnapshot, types: list[VgpuType]) -> dict[str, tuple[Layout, int, dict[str, list[VgpuType]]]]:
    """Physical GPU → (layout, enabled VFs, type id → entries): PFs, and non-PCI mdev parents for themselves."""
    out: dict[str, tuple[Layout, int, dict[str, list[VgpuType]]]] = {}
    for fn in snap.gpus:
        if not fn.is_vf:  # a PF of layout B/C carries its VFs' layout
            out[fn.address] = (snap.layouts.get(fn.address, Layout.PASSTHROUGH), len(fn.virtfns), {})
    for name, parent in sorted(snap.mdev_parents.items()):
        g = snap.physical_gpu(name)
        if g not in out:
            out[g] = (parent.layout, 0, {})
    gpu_of: dict[str, str] = {}
    for t in types:
        if t.parent not in gpu_of:
            gpu_of[t.parent] = snap.physical_gpu(t.parent)
        out[gpu_of[t.parent]][2].setdefault(t.type_id, []).append(t)
    return dict(sorted(out.items()))


Offered = dict[tuple[str, str], VgpuType]  # (physical GPU, type id) → the first entry offering it


def running_on(snap: HostSnapshot, offered: Offered) -> dict[str, list[Running]]:
    """Physical GPU → the vGPUs that exist on it: mdevs, typed layout C VFs, VF-pool VFs in use."""
    out: dict[str, list[Running]] = {}
    for m in sorted(snap.mdevs.values(), key=lambda m: (m.parent, m.uuid)):
        g = snap.physical_gpu(m.parent)
        t = offered.get((g, m.type_id))
        out.setdefault(g, []).append(Running(m.parent, m.type_id, t.framebuffer_mib if t else None,
                                             t.name if t else None))  # fmt: skip
    for vf in sorted(snap.vendor_vfs.values(), key=lambda v: v.address):
        if vf.in_use:
            name = vf_type_name(snap, vf.physfn, vf.address, vf.current_type)
            fb = describe_nvidia_name(name).framebuffer_mib if name else None
            out.setdefault(snap.physical_gpu(vf.address), []).append(Running(vf.address, vf.current_type_id, fb, name))
    for pool in snap.vf_pools.values():
        t = pool.offered[0] if pool.offered else None
        for addr in pool.vfs[: pool.num_vfs]:
            if t is not None and addr in snap.functions and addr not in pool.free:
                out.setdefault(pool.pf, []).append(Running(addr, t.type_id, t.framebuffer_mib, t.name))
    return out


def held(snap: HostSnapshot, awaiting: Iterable[Allocation], offered: Offered) -> dict[str, list[Running]]:
    """Physical GPU → what the recorded devices awaiting `vgpuadm restore` hold of it (as each mode's Holding
    says: an instance on its mdev parent, or its VF)."""
    out: dict[str, list[Running]] = {}
    for a in awaiting:
        holds = holding(a.mode)
        where = a.parent if holds == Holding.MDEV_INSTANCE else a.address
        if holds == Holding.NOTHING or not where or not a.type_id:
            continue
        g = snap.physical_gpu(where)
        t = offered.get((g, a.type_id))
        num = a.type_id.rsplit("-", 1)[-1]
        name = t.name if t else (vf_type_name(snap, g, where, int(num)) if num.isdecimal() else None)
        fb = t.framebuffer_mib if t else (describe_nvidia_name(name).framebuffer_mib if name else None)
        out.setdefault(g, []).append(Running(where, a.type_id, fb, name, reserved_for=a.domain))
    return out


def framebuffer(layout: Layout, types: dict[str, list[VgpuType]], running: Sequence[Running]) -> int | None:
    """Total framebuffer MiB of a GPU: the largest max×size any of its time-sliced types spans (MIG sizes are
    rounded). A layout C driver shrinks every VF's creatable list once a vGPU runs, so its GPU's memory comes from
    NVIDIA's table for its board; for a board not in the table only an idle GPU tells it (its largest type spans
    it), a busy one's total is unknown (None)."""
    if layout.types_by_number:
        names = [e[0].name for e in types.values()] + [r.name for r in running if r.name]
        boards = [board_framebuffer_mib(describe_nvidia_name(n).board) for n in names]
        total = next((fb for fb in boards if fb), None)
        if total is not None or running:
            return total
    sized = [e[0] for e in types.values() if e[0].framebuffer_mib]
    time_sliced = [t for t in sized if "mig_slices" not in t.attributes] or sized  # a GPU offering MIG types only
    spans = [(t.max_instances or 1) * (t.framebuffer_mib or 0) for t in time_sliced]
    return max(spans) if spans else None


def gpu_rooms(
    snap: HostSnapshot,
    awaiting: Iterable[Allocation] = (),
    mig_off: Collection[str] = (),
    types: list[VgpuType] | None = None,
) -> dict[str, GpuRoom]:
    """Every physical GPU's room per type: THE capacity answer `types`, `inventory` and their renderers read.
    `awaiting`: the devices domains record that do not exist now (after a reboot, before `vgpuadm restore`); the
    capacity they will take back is reserved. `mig_off`: GPUs whose MIG mode is known to be off (nvidia-smi), where
    a MIG-backed type is unavailable — not stranded: no other type's lock holds it back, MIG mode does. `types`:
    snap.types() when the caller has it already."""
    gpus = _gpus(snap, snap.types() if types is None else types)
    offered = {(g, tid): entries[0] for g, (_, _, by_id) in gpus.items() for tid, entries in by_id.items()}
    live = running_on(snap, offered)
    reserved = held(snap, awaiting, offered)
    out: dict[str, GpuRoom] = {}
    for g, (layout, vfs, offers) in gpus.items():
        running = live.get(g, []) + reserved.get(g, [])
        total_fb = framebuffer(layout, offers, running)
        used_fb = sum(r.framebuffer_mib or 0 for r in live.get(g, []))
        reserved_fb = sum(r.framebuffer_mib or 0 for r in reserved.get(g, []))
        free_fb = total_fb - used_fb - reserved_fb if total_fb is not None else None
        rule = gpu_rule(snap, layout, g)
        rooms = {tid: (entries[0], type_room(rule, vfs, entries, running, total_fb, free_fb))
                 for tid, entries in offers.items()}  # fmt: skip
        if g in mig_off:
            rooms = {tid: (t, room.but(free=0, stranded=0, locked=False, reason="MIG is off") if size_key(t)[1]
                           else room) for tid, (t, room) in rooms.items()}  # fmt: skip
        out[g] = GpuRoom(g, layout, rule, vfs, offers, running, total_fb, used_fb, reserved_fb, rooms)
    return out
