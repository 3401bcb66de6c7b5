"""The GPU sharing rules, once: why a parent cannot take one more of a type, and what is free after a change. Pure.

Rules (shared/docs/vgpu-sysfs.md §2.4, §3.2-3.4, §4.1, §4.4):
  one-type  (layout A, NVIDIA pre-Ampere): one vGPU type per physical GPU, `max_instance` of it;
  one-size  (layouts B/C, SR-IOV): one vGPU per VF, one framebuffer size per physical GPU, `max_instance` per GPU;
  mixed-size (layout C in NVIDIA's heterogeneous mode): one vGPU per VF, any sizes, each at a free placement ID of
            its type (the placement section at the end of this module);
  kernel    (other mdev drivers: mtty, mdpy, mbochs, GVT-g): the types of a parent share one budget, in the driver's
            own units (ports, a count, MiB, aperture), and the kernel's `available_instances` is believed;
  whole     (passthrough): no sharing.
Placement asks `why_not` per candidate parent, `why_not_listed` when no free layout C VF lists a type, and
`in_the_way` for the devices a refusal names; the inventory asks `sharing_rule`, `conflicting_types`,
`conflicting_sizes` and `gpu_maximum`; `apply -f` and mdevctl import project the snapshot with `consume` / `release`.
The room per type on each GPU (`gpu_rooms`, what `types`, `inventory` and its renderers read) lives in
catalog/rooms.py, light enough for the read commands' fast path, and is re-exported here.
This module never reads the host; the simulated kernel (vgpuadm/sim) is the independent oracle the tests check it
against, and never imports it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vgpuadm.catalog.hetero import GpuPolicy
from vgpuadm.catalog.mig import MigGpu, MigProfile
from vgpuadm.catalog.rooms import (  # the per-GPU room model, re-exported: one capacity model in two modules
    GpuRoom,
    Room,
    Running,
    _mig_only,
    conflicting_sizes,
    conflicting_types,
    gpu_maximum,
    gpu_rooms,
    gpu_rule,
    reserved_for,
    sharing_rule,
    size_key,
    stranded_framebuffer,
    type_room,
    vf_type_name,
    whole_gpu_room,
)
from vgpuadm.errors import FREE, Blocker, CapacityError
from vgpuadm.model import (
    Allocation,
    DeviceMode,
    Holding,
    HostSnapshot,
    Mdev,
    MdevParent,
    VendorVf,
    VgpuType,
    describe_nvidia_name,
    holding,
    is_nvidia_type,
    nvidia_type_id,
)

__all__ = [
    "GpuRoom",
    "Room",
    "Running",
    "conflicting_sizes",
    "conflicting_types",
    "gpu_maximum",
    "gpu_rooms",
    "gpu_rule",
    "reserved_for",
    "sharing_rule",
    "size_key",
    "stranded_framebuffer",
    "type_room",
    "vf_type_name",
    "whole_gpu_room",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """What runs on one physical GPU: vGPU count, type ids (→ display name), framebuffer sizes, and the VFs that
    already host one (→ the type id they run); `live_types`/`live_sizes` leave out what is only reserved (devices
    domains record but the host lacks, awaiting `vgpuadm restore`: HostSnapshot.reserved), `reserved` names their
    domains (one entry per device) and `reserved_vfs` the VFs they will take back."""

    count: int = 0
    types: Mapping[str, str] = dataclasses.field(default_factory=dict)
    sizes: frozenset[int] = frozenset()
    busy_vfs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    live_types: frozenset[str] = frozenset()
    live_sizes: frozenset[int] = frozenset()
    reserved: tuple[str, ...] = ()
    reserved_vfs: Mapping[str, str] = dataclasses.field(default_factory=dict)


NO_USAGE = GpuUsage()


def gpu_usage(snapshot: HostSnapshot) -> dict[str, GpuUsage]:
    """Per physical GPU (PF address, or the parent name for non-PCI parents), what vGPUs exist now."""
    names = {(t.parent, t.type_id): t for t in snapshot.types()}
    fb_by_id: dict[str, int] = {t.type_id: t.framebuffer_mib for t in names.values() if t.framebuffer_mib}
    name_by_id = {t.type_id: t.name for t in names.values()}  # a typed layout C VF lists nothing: another VF names it
    count: dict[str, int] = {}
    types: dict[str, dict[str, str]] = {}
    sizes: dict[str, set[int]] = {}
    busy: dict[str, dict[str, str]] = {}
    live_types: dict[str, set[str]] = {}
    live_sizes: dict[str, set[int]] = {}
    reserved: dict[str, list[str]] = {}
    reserved_vfs: dict[str, dict[str, str]] = {}

    def add(phys: str, type_id: str, name: str, vf: str | None, held_for: str | None = None) -> None:
        count[phys] = count.get(phys, 0) + 1
        types.setdefault(phys, {})[type_id] = name
        fb = fb_by_id.get(type_id)
        if fb:
            sizes.setdefault(phys, set()).add(fb)
        if vf is not None:
            busy.setdefault(phys, {})[vf] = type_id
        if held_for is None:
            live_types.setdefault(phys, set()).add(type_id)
            if fb:
                live_sizes.setdefault(phys, set()).add(fb)
        else:
            reserved.setdefault(phys, []).append(held_for)
            if vf is not None:
                reserved_vfs.setdefault(phys, {})[vf] = held_for

    held = snapshot.reserved
    for m in snapshot.mdevs.values():
        phys = snapshot.physical_gpu(m.parent)
        t = names.get((m.parent, m.type_id))
        add(phys, m.type_id, t.name if t else m.type_id, m.parent if phys != m.parent else None, held.get(m.uuid))
    for vf in snapshot.vendor_vfs.values():
        if vf.in_use:
            tid = vf.current_type_id
            add(snapshot.physical_gpu(vf.address), tid, name_by_id.get(tid, tid), vf.address, held.get(vf.address))
    for pool in snapshot.vf_pools.values():  # a VF pool's VFs in use: on vfio-pci (or a variant driver)
        for t in pool.offered:
            for addr in pool.vfs[: pool.num_vfs]:
                if addr not in pool.free:
                    add(pool.pf, t.type_id, t.name, addr)
    return {
        phys: GpuUsage(n, types.get(phys, {}), frozenset(sizes.get(phys, ())), busy.get(phys, {}),
                       frozenset(live_types.get(phys, ())), frozenset(live_sizes.get(phys, ())),
                       tuple(reserved.get(phys, ())), reserved_vfs.get(phys, {}))
        for phys, n in count.items()
    }  # fmt: skip


def in_the_way(snapshot: HostSnapshot, gpus: Iterable[str]) -> list[Blocker]:
    """The vGPUs on physical GPUs `gpus` that a request could be given room by freeing: each with the verb that
    frees it while no VM owns it (errors.Blocker; the Session names the owners)."""
    on = set(gpus)
    out = [(m.uuid, "mdev remove") for m in snapshot.mdevs.values() if snapshot.physical_gpu(m.parent) in on]
    out += [(vf.address, "vf clear") for vf in snapshot.vendor_vfs.values()
            if vf.in_use and snapshot.physical_gpu(vf.address) in on]  # fmt: skip
    return sorted(out)


def per_parent_room(t: VgpuType) -> int:
    """How many more of `t` its parent itself takes: one per VF on layouts B/C, else the kernel's count."""
    return 1 if t.layout.one_vgpu_per_vf else t.available_instances


def host_maximum(snapshot: HostSnapshot) -> int:
    """The most vGPU devices this host could ever hold at once, whatever their types: per mdev parent on a PF the
    largest count any one of its types allows (its max_instance, else what is free now plus what exists), one per
    VF (layouts B and C) and per VF an SR-IOV pool may have. An upper bound: a request for more can never be
    placed."""
    existing = Counter(m.parent for m in snapshot.mdevs.values())
    total = 0
    for name, p in snapshot.mdev_parents.items():
        if p.layout.one_vgpu_per_vf:
            total += 1
        else:
            total += max((t.max_instances or t.available_instances + existing[name] for t in p.types), default=0)
    total += sum(pool.total_vfs for pool in snapshot.vf_pools.values())
    return total + sum(1 for addr in snapshot.vendor_vfs if addr not in snapshot.mdev_parents)


def gpu_room(t: VgpuType, running: int, mixed: bool = False) -> int | None:
    """How many more vGPUs of `t`'s size its physical GPU takes on layouts B/C (max_instance counts vGPUs of this
    size across all VFs), or None when there is no per-GPU cap (`mixed`: heterogeneous mode, where the free
    placements decide)."""
    if t.layout.one_vgpu_per_vf and t.max_instances and not mixed:
        return t.max_instances - running
    return None


def mig_only(t: VgpuType, usage: GpuUsage) -> bool:
    """MIG-backed `t` on a GPU whose vGPUs are all MIG-backed: profiles mix there (see _mig_only)."""
    return size_key(t)[1] and all(describe_nvidia_name(n).slices is not None for n in usage.types.values())


def why_not(
    snapshot: HostSnapshot, t: VgpuType, usage: GpuUsage, numa: int | None, owner: str | None = None
) -> str | None:
    """Why parent t.parent cannot take one more t given `usage` of its physical GPU, or None. `owner`: the domain
    a layout C VF is given to."""
    if owner and t.layout.parent_is_device:
        return f"VF is given to domain {owner}"
    if numa is not None:
        fn = snapshot.functions.get(snapshot.physical_gpu(t.parent))
        node = fn.numa_node if fn is not None else None
        if node is None or node < 0:
            return f"NUMA node unknown, wanted {numa}"
        if node != numa:
            return f"on NUMA node {node}, wanted {numa}"
    if t.layout.one_vgpu_per_vf:
        if t.parent in usage.reserved_vfs:
            return f"VF {reserved_for([usage.reserved_vfs[t.parent]])}"
        if t.parent in usage.busy_vfs:
            return f"VF already hosts a vGPU ({usage.busy_vfs[t.parent]}); one vGPU per VF"
        other = [] if mig_only(t, usage) else conflicting_sizes(usage.sizes, t.framebuffer_mib)
        if other and not heterogeneous(snapshot, snapshot.physical_gpu(t.parent)):
            if not conflicting_sizes(usage.live_sizes, t.framebuffer_mib):  # only what awaits restore holds it
                return f"GPU {reserved_for(usage.reserved)}"
            return f"GPU runs {other[0]} MiB vGPUs; one framebuffer size per GPU"
    elif t.layout.sharing == "one-type" and is_nvidia_type(t.type_id):
        other_types = conflicting_types(usage.types, t.type_id)
        if other_types and not conflicting_types(usage.live_types, t.type_id):  # only what awaits restore holds it
            return f"GPU {reserved_for(usage.reserved)}"
        if other_types:
            tid = other_types[0]
            return f"GPU runs {tid} ({usage.types[tid]}); one vGPU type per GPU"
    if t.available_instances <= 0:
        return f"no free instances of {t.type_id} (available_instances 0)"
    return None


def why_not_listed(snapshot: HostSnapshot, gpu: str, t: VgpuType, usage: GpuUsage) -> tuple[str, str] | None:
    """Why the free VFs of SR-IOV GPU `gpu`, running `usage`, list no `t` by the one-size rule (reference §3.4), and
    what to do (a hint with FREE for the GPU's vGPUs, errors.Blocker): time-sliced and MIG-backed vGPUs do not mix
    on one GPU (MIG-backed ones run only while MIG mode is on), and one framebuffer size runs per GPU. None when
    neither applies: the GPU is full, mixes sizes (heterogeneous mode) or runs nothing."""
    if not usage.count or heterogeneous(snapshot, gpu):
        return None
    names = ", ".join(sorted(set(usage.types.values())))
    n = usage.count
    if not size_key(t)[1] and all(describe_nvidia_name(name).slices is not None for name in usage.types.values()):
        return (
            f"MIG mode is on and {n} MIG-backed vGPU{'s run' if n > 1 else ' runs'} on it ({names}); {t.name} is "
            "time-sliced, and time-sliced and MIG-backed vGPUs do not mix on one GPU",
            f"{FREE}then turn MIG mode off (`vgpuadm mig disable --gpu {gpu}`) to run time-sliced types; or ask for a "
            "MIG-backed type (`vgpuadm types --available` lists what fits now)",
        )
    other = [] if mig_only(t, usage) else conflicting_sizes(usage.sizes, t.framebuffer_mib)
    if other:
        size = "/".join(f"{s} MiB" for s in sorted(usage.sizes))
        maxima = {r.max_instances for r in snapshot.types() if r.type_id in usage.types and r.max_instances}
        full = bool(maxima) and n >= min(maxima)  # no more of the size that runs fits either
        return (
            f"{n} vGPU{'s' if n > 1 else ''} of {size} run{'' if n > 1 else 's'} on it ({names}) and {t.name} is "
            f"{t.framebuffer_mib} MiB; one framebuffer size per GPU" + (", and it is full" if full else ""),
            f"{FREE}or pick another GPU"
            if full
            else f"{FREE}or ask for a {size} type (`vgpuadm types --available` lists what fits now)",
        )
    return None


def hidden_by_mig(snapshot: HostSnapshot, wanted: str) -> list[str]:
    """The GPUs that do not list the time-sliced type named `wanted` (a name like H200X-4C) because MIG mode is on:
    every type they offer is MIG-backed and of the same board. Time-sliced and MIG-backed types do not mix on one
    GPU, so the driver lists the time-sliced ones only while MIG mode is off."""
    info = describe_nvidia_name(wanted)
    if info.board is None or info.slices is not None:
        return []
    per_gpu: dict[str, list[tuple[str | None, int | None]]] = {}
    for t in snapshot.types():
        name = describe_nvidia_name(t.name)
        per_gpu.setdefault(snapshot.physical_gpu(t.parent), []).append((name.board, name.slices))
    board = info.board.lower()
    return sorted(gpu for gpu, names in per_gpu.items()
                  if all(s is not None and (b or "").lower() == board for b, s in names))  # fmt: skip


def why_no_types(snapshot: HostSnapshot, address: str) -> tuple[str, str]:
    """Why the GPU at `address` offers no vGPU types now, and what to do: (reason, hint). The driver decides:
    vfio-pci (passed through), none, SR-IOV VFs not enabled, a driver without vGPUs, or nvidia without types."""
    fn = snapshot.functions.get(address)
    if fn is None:
        return "it is not a PCI function on this host", "run `vgpuadm gpus` to list the GPUs"
    if fn.driver == "vfio-pci":
        return (
            "it is bound to vfio-pci (whole-GPU passthrough)",
            f"`vgpuadm release --gpu {address}` (when a VM has it) or `vgpuadm vfio unbind {address}` gives it back "
            "to its driver",
        )
    if not fn.driver:
        return "it is bound to no driver", "load the vendor's vGPU driver (nvidia) and bind the GPU to it"
    if fn.sriov_total_vfs and not fn.sriov_num_vfs:
        return "its vGPUs live on SR-IOV VFs, and none are enabled", f"`vgpuadm sriov enable {address}`"
    if fn.driver == "nvidia":
        return (
            "the nvidia driver lists none on it (a board without vGPU support, or the vGPU manager is not running)",
            "check `systemctl status nvidia-vgpud nvidia-vgpu-mgr`; a GeForce board can only be passed through "
            f"(`vgpuadm passthrough --gpu {address} --vm NAME`)",
        )
    return f"it is bound to {fn.driver}, which has no vGPU types", "bind it to the vendor's vGPU driver"


def idle_for_vgpu(snapshot: HostSnapshot) -> list[str]:
    """GPUs that would offer vGPU types but are bound to vfio-pci now (their types are not listed meanwhile)."""
    return [a for a, fn in sorted(snapshot.functions.items()) if fn.is_display and fn.driver == "vfio-pci"]


# -- projection: what is free after planned creates and removes -----------------------------------------------
#
# NVIDIA parents are recomputed from the rules and the projected mdevs. Pooled (kernel-rule) parents cannot be
# predicted exactly from sysfs, so the projection is a lower bound of what the kernel will report: with the cost of
# each type in the driver's units known (mtty ports, mdpy count, mbochs MiB, GVT-g aperture — reference §4.1, §4.4)
# the free budget is bounded below by max(available × cost) over the parent's types; with costs unknown the removed
# type regains exactly one instance, the others nothing, and a create takes one instance of every type.


def pool_cost(t: VgpuType) -> dict[str, int] | None:
    """What one instance of a pooled type draws from its parent's budget, per resource, or None if unknown."""
    low, high = t.attributes.get("low_gm_mib"), t.attributes.get("high_gm_mib")
    if isinstance(low, int) and isinstance(high, int) and low > 0 and high > 0:  # GVT-g: min over both apertures
        return {"low_gm": low, "high_gm": high}
    prefix, _, num = t.type_id.partition("-")
    if prefix == "mtty" and num.isdigit() and int(num) > 0:  # mtty-N: N of the driver's ports
        return {"": int(num)}
    if prefix == "mdpy":  # one shared count
        return {"": 1}
    words = t.description.split()
    if prefix == "mbochs" and "MB" in words:  # "virtual display, %d MB video memory"
        size = words[words.index("MB") - 1]
        if size.isdigit() and int(size) > 0:
            return {"": int(size)}
    return None


def _pool_after(types: tuple[VgpuType, ...], type_id: str, sign: int) -> tuple[VgpuType, ...]:
    """A pooled parent's types once one `type_id` is freed (sign +1) or taken (sign −1)."""
    costs = {t.type_id: pool_cost(t) for t in types}
    changed = costs.get(type_id)
    if changed is None or any(c is None or c.keys() != changed.keys() for c in costs.values()):
        return tuple(
            t.with_available(max(0, t.available_instances + sign)) if sign < 0 or t.type_id == type_id else t
            for t in types
        )
    floor = {k: max(t.available_instances * (costs[t.type_id] or {})[k] for t in types) for k in changed}
    out = []
    for t in types:
        cost = costs[t.type_id] or {}
        n = min(max(0, floor[k] + sign * changed[k]) // cost[k] for k in changed)
        if sign > 0 and t.max_instances is not None:
            n = min(n, t.max_instances)
        out.append(t.with_available(n))
    return tuple(out)


def _nvidia_one_type(p: MdevParent, running: Sequence[str], type_id: str, sign: int) -> tuple[VgpuType, ...]:
    """Layout A NVIDIA parent: 0 for every type but the one running, whose count moves by one; an idle GPU offers
    every type at its maximum again (the one-type lock lifts)."""
    out = []
    for t in p.types:
        if conflicting_types(running, t.type_id):
            n = 0
        elif not running and sign > 0 and t.max_instances is not None:
            n = t.max_instances
        elif t.type_id == type_id:
            n = max(0, t.available_instances + sign)
        else:
            n = t.available_instances
        out.append(t.with_available(n))
    return tuple(out)


def consume(snap: HostSnapshot, created: Sequence[Allocation]) -> HostSnapshot:
    """The snapshot as it will be once `created` exist, so that the next placement counts them (one type per GPU,
    one vGPU per VF, instances left, a pooled parent's shared budget)."""
    mdevs = dict(snap.mdevs)
    vfs = dict(snap.vendor_vfs)
    parents = dict(snap.mdev_parents)
    for a in created:
        holds = holding(a.mode)
        if holds == Holding.MDEV_INSTANCE and a.uuid and a.parent and a.type_id:
            mdevs[a.uuid] = Mdev(a.uuid, a.type_id, a.parent)
            p = parents.get(a.parent)
            if p is not None:
                parents[a.parent] = dataclasses.replace(p, types=_after(p, mdevs, a.type_id, -1))
        elif holds == Holding.VF_TYPE and a.address and a.type_id:
            vf = vfs.get(a.address)
            if vf is not None:
                pid = a.extra.get("placement_id", "")
                vfs[a.address] = dataclasses.replace(vf, current_type=int(a.type_id.rsplit("-", 1)[-1]),
                                                     placement_id=int(pid) if pid.isdecimal() else vf.placement_id)  # fmt: skip
    return _pools_after(_one_size(snap, created, mdevs, vfs, parents), created, take=True)


def release(snap: HostSnapshot, gone: Sequence[Allocation]) -> HostSnapshot:
    """The snapshot as it will be once `gone` are removed, so that a VM switching types on one GPU can be placed
    (the old type no longer blocks the GPU, its instances are free again)."""
    mdevs = dict(snap.mdevs)
    vfs = dict(snap.vendor_vfs)
    parents = dict(snap.mdev_parents)
    for a in gone:
        m = mdevs.pop(a.uuid or "", None) if holding(a.mode) == Holding.MDEV_INSTANCE else None
        if m is not None and m.parent in parents:
            p = parents[m.parent]
            parents[m.parent] = dataclasses.replace(p, types=_after(p, mdevs, m.type_id, +1))
        if holding(a.mode) == Holding.VF_TYPE and a.address in vfs:
            vfs[a.address] = dataclasses.replace(vfs[a.address], current_type=0)
    return _pools_after(_one_size(snap, gone, mdevs, vfs, parents), gone, take=False)


def _pools_after(snap: HostSnapshot, allocs: Sequence[Allocation], *, take: bool) -> HostSnapshot:
    """VF pools once the pool VFs of `allocs` are taken (a disabled pool is enabled by the first) or given back."""
    if not any(holding(a.mode) == Holding.POOL_VF for a in allocs):
        return snap
    pools = dict(snap.vf_pools)
    for a in allocs:
        p = pools.get(a.parent or "")
        if holding(a.mode) != Holding.POOL_VF or p is None or not a.address:
            continue
        if take:
            free, num = tuple(v for v in p.free if v != a.address), p.num_vfs or p.total_vfs
        else:
            free, num = tuple(v for v in p.vfs if v in p.free or v == a.address), p.num_vfs
        offered = tuple(t.with_available(len(free)) for t in p.offered)
        pools[p.pf] = dataclasses.replace(p, free=free, num_vfs=num, offered=offered)
    return dataclasses.replace(snap, vf_pools=pools)


def idle(snap: HostSnapshot) -> HostSnapshot:
    """The snapshot as it would be with no vGPU running: every mdev removed and every layout C VF cleared. What an
    on-demand request is checked against when it is recorded (it can start once enough others stop)."""
    running = [Allocation("", DeviceMode.MDEV, m.type_id, m.parent, uuid=m.uuid) for m in snap.mdevs.values()]
    running += [Allocation("", DeviceMode.VF, vf.current_type_id, vf.address, address=vf.address)
                for vf in snap.vendor_vfs.values() if vf.current_type]  # fmt: skip
    return release(snap, running) if running else snap


def _after(p: MdevParent, mdevs: Mapping[str, Mdev], type_id: str, sign: int) -> tuple[VgpuType, ...]:
    """`p`'s types once one `type_id` was created (sign −1) or removed (+1); `mdevs` already reflect the change.
    Layout B parents are recomputed per GPU afterwards (_one_size)."""
    if p.layout.one_vgpu_per_vf:
        return p.types
    if sharing_rule(p.layout, p) == "one-type":
        running = [m.type_id for m in mdevs.values() if m.parent == p.name]
        return _nvidia_one_type(p, running, type_id, sign)
    return _pool_after(p.types, type_id, sign)


def _fits(t: VgpuType, running: int, keys: set[tuple[int, bool] | None]) -> bool:
    """Whether a free VF of a GPU running `running` vGPUs of size `keys` (None: unknown) offers `t`."""
    if not running or _mig_only(t, keys):
        return True
    if None in keys or keys != {size_key(t)}:
        return False
    return t.max_instances is not None and running < t.max_instances


def _one_size(
    snap: HostSnapshot,
    changed: Sequence[Allocation],
    mdevs: dict[str, Mdev],
    vfs: dict[str, VendorVf],
    parents: dict[str, MdevParent],
) -> HostSnapshot:
    """Recompute every VF of the SR-IOV GPUs that `changed` touch, from what runs on them once the change is done:
    a busy VF offers nothing; a free one offers the types of the running size while the GPU is below their maximum,
    every type while the GPU is idle. Layout C lists only the types the snapshot still names somewhere (a full GPU
    lists none), so a projection after a removal may offer fewer than the driver will: never more."""
    gpus = {snap.physical_gpu(a.parent or a.address or "") for a in changed}
    known: dict[str, VgpuType] = {}
    for t in snap.types():
        known.setdefault(t.type_id, t)
    for gpu in gpus:
        b_parents = [q for q in parents.values() if q.layout.one_vgpu_per_vf and snap.physical_gpu(q.name) == gpu]
        c_vfs = [vf for vf in vfs.values() if snap.physical_gpu(vf.address) == gpu]
        running: list[VgpuType | None] = [
            known.get(m.type_id) for m in mdevs.values() if any(q.name == m.parent for q in b_parents)
        ]
        running += [known.get(vf.current_type_id) for vf in c_vfs if vf.in_use]
        keys = {size_key(t) if t is not None else None for t in running}
        busy = {m.parent for m in mdevs.values()}
        for q in b_parents:
            types = tuple(
                t.with_available(1 if q.name not in busy and _fits(t, len(running), keys) else 0) for t in q.types
            )
            parents[q.name] = dataclasses.replace(q, types=types)
        if not c_vfs:
            continue
        pool: dict[str, VgpuType] = {}
        for vf in c_vfs:
            for t in vf.offered:
                pool.setdefault(t.type_id, t)
        mixed = heterogeneous(snap, gpu)
        for vf in c_vfs:
            if vf.in_use:
                continue
            offered = tuple(
                dataclasses.replace(t, parent=vf.address, available_instances=1)
                for t in sorted(pool.values(), key=lambda t: t.numeric_id or 0)
                if (choose_placement(snap, gpu, t.numeric_id or 0, vfs=vfs) is not None if mixed
                    else _fits(t, len(running), keys))
            )  # fmt: skip
            creatable = tuple((t.numeric_id or 0, t.name) for t in offered)
            vfs[vf.address] = dataclasses.replace(vf, offered=offered, creatable=creatable)
    return dataclasses.replace(snap, mdevs=mdevs, vendor_vfs=vfs, mdev_parents=parents)


# --- MIG GPU instances ------------------------------------------------------------------------------------------


def _holders(gpu: MigGpu, slots: set[int]) -> list[str]:
    """`0 and 2 hold 1g.18gb`: the instances on any of `slots`, by profile (each named by its start slot)."""
    by_name: dict[str, list[int]] = {}
    for gi in sorted(gpu.instances, key=lambda g: g.start):
        if gi.slots & slots:
            by_name.setdefault(gi.name, []).append(gi.start)
    out = []
    for name, starts in by_name.items():
        words = [str(s) for s in starts]
        said = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
        out.append(f"{said} {'holds' if len(words) == 1 else 'hold'} {name}")
    return out


def _larger_placements_left(gpu: MigGpu, used: set[int], profile: MigProfile) -> int:
    """How many placements of profiles larger than `profile` are still free with `used` taken, weighted by size:
    the number a placement keeps high to keep larger profiles possible."""
    score = 0
    for p in gpu.profiles:
        if p.size > profile.size or (p.size == profile.size and p.profile_id != profile.profile_id):
            score += p.size * sum(1 for slots in p.slots if not used & set(slots))
    return score


def place_gpu_instances(gpu: MigGpu, profile: MigProfile, count: int = 1, start: int | None = None) -> list[int]:
    """Start slots for `count` new GPU instances of `profile` on `gpu`: each at the free placement that leaves the
    most room for larger profiles (ties: the highest start). CapacityError says which slots block which profile."""
    if count < 1:
        raise CapacityError(f"--count {count} asks for no GPU instance", "give --count 1 or more")
    if start is not None and start not in profile.starts:
        raise CapacityError(
            f"{profile.name} cannot start at slot {start} on {gpu.address}",
            f"{profile.name} starts at slot {'/'.join(map(str, profile.starts))}",
        )
    used: set[int] = set().union(*(gi.slots for gi in gpu.instances)) if gpu.instances else set()
    have = sum(1 for gi in gpu.instances if gi.profile_id == profile.profile_id)
    chosen: list[int] = []
    for _ in range(count):
        if have + count > profile.total:
            raise CapacityError(
                f"{gpu.address} holds at most {profile.total} {profile.name} GPU instance"
                f"{'s' if profile.total != 1 else ''} ({have} exist{'s' if have == 1 else ''})",
                "destroy one first (`vgpuadm mig destroy`) or pick a smaller profile",
            )
        candidates = [s for s in profile.starts if (start is None or s == start)
                      and not used & set(range(s, s + profile.size))]  # fmt: skip
        if not candidates:
            where = [start] if start is not None else list(profile.starts)
            blocked = _holders(gpu, set().union(*(range(s, s + profile.size) for s in where)))
            blocked += [f"{s} is taken by this request" for s in chosen if s in where]
            raise CapacityError(
                f"{profile.name} needs slot{'s' if len(where) > 1 else ''} {'/'.join(map(str, where))}; "
                f"{'; '.join(blocked) or 'none is free'}",
                "destroy the instances in the way (`vgpuadm mig instances` lists them) or pick another profile",
            )
        best = max(candidates, key=lambda s: (_larger_placements_left(gpu, used | set(range(s, s + profile.size)),
                                                                      profile), s))  # fmt: skip
        chosen.append(best)
        used |= set(range(best, best + profile.size))
    return chosen


# -- heterogeneous (mixed-size) time-sliced vGPU: placement IDs (docs/reference/nvidia-host-policies.md) -----------
# A GPU in heterogeneous mode runs time-sliced vGPUs of different sizes; each takes the slots [id, id + size) of
# one of its type's supported placement IDs. Which free ID a new vGPU takes decides what still fits: the planner
# takes the one that blocks the fewest still-free placements of larger types (small vGPUs pack together, at the
# high end on a tie), so the largest sizes stay placeable.


def policy_of(snap: HostSnapshot, gpu: str) -> GpuPolicy | None:
    found = snap.policies.get(gpu)
    return found if isinstance(found, GpuPolicy) else None


def heterogeneous(snap: HostSnapshot, gpu: str) -> bool:
    p = policy_of(snap, gpu)
    return p is not None and p.heterogeneous


def placed(snap: HostSnapshot, gpu: str, vfs: Mapping[str, VendorVf] | None = None) -> dict[str, tuple[int, int]]:
    """VF → (placement ID, size) of each vGPU running on `gpu` with a placement (`vfs`: a projected VF table)."""
    p = policy_of(snap, gpu)
    out: dict[str, tuple[int, int]] = {}
    for addr, vf in sorted((snap.vendor_vfs if vfs is None else vfs).items()):
        tp = p.placement(vf.current_type) if p is not None and vf.in_use else None
        if tp is not None and vf.placement_id is not None and vf.placement_id >= 0 and vf.physfn == gpu:
            out[addr] = (vf.placement_id, tp.size)
    return out


def _used(held: Iterable[tuple[int, int]]) -> set[int]:
    return {s for start, size in held for s in range(start, start + size)}


def free_placements(p: GpuPolicy, type_num: int, used: set[int]) -> list[int]:
    tp = p.placement(type_num)
    if tp is None:
        return []
    return [i for i in tp.ids if not used & set(range(i, i + tp.size))]


def choose_placement(
    snap: HostSnapshot, gpu: str, type_num: int, also: Iterable[tuple[int, int]] = (),
    vfs: Mapping[str, VendorVf] | None = None,
) -> int | None:  # fmt: skip
    """The placement ID a new vGPU of `type_num` takes on `gpu` (`also`: placements planned but not made yet), or
    None when no supported ID is free."""
    p = policy_of(snap, gpu)
    if p is None:
        return None
    used = _used([*placed(snap, gpu, vfs).values(), *also])
    free = free_placements(p, type_num, used)
    tp = p.placement(type_num)
    if not free or tp is None:
        return None
    larger = [(t, free_placements(p, t.type_num, used)) for t in p.types if t.size > tp.size]

    def blocked(i: int) -> int:
        mine = set(range(i, i + tp.size))
        return sum(1 for t, ids in larger for j in ids if mine & set(range(j, j + t.size)))

    return min(free, key=lambda i: (blocked(i), -i))


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """Free framebuffer of a GPU in heterogeneous mode: MiB free, in how many contiguous pieces, and the largest
    vGPU that still fits (its framebuffer in MiB and name; 0 and None when none does)."""

    free_mib: int
    pieces: int
    largest_mib: int
    largest: str | None

    def describe(self) -> str:
        n = "piece" if self.pieces == 1 else "pieces"
        largest = f"largest {_gib(self.largest_mib)}" if self.largest_mib else "no vGPU fits"
        return f"{_gib(self.free_mib)} free in {self.pieces} {n}; {largest}"


def _gib(mib: int) -> str:
    return f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib / 1024:.1f} GiB"


def fragmentation(snap: HostSnapshot, gpu: str, also: Iterable[tuple[int, int]] = ()) -> Fragmentation | None:
    """None unless `gpu` is in heterogeneous mode with known placements (`also`: placements planned)."""
    p = policy_of(snap, gpu)
    if p is None or not p.heterogeneous or not p.slots or not p.slot_mib:
        return None
    used = _used([*placed(snap, gpu).values(), *also])
    free = [s for s in range(p.slots) if s not in used]
    pieces = sum(1 for i, s in enumerate(free) if i == 0 or free[i - 1] != s - 1)
    fitting = [t for t in p.types if t.fb_mib and free_placements(p, t.type_num, used)]
    best = max(fitting, key=lambda t: (t.size, t.fb_mib or 0), default=None)
    return Fragmentation(len(free) * p.slot_mib, pieces, (best.fb_mib or 0) if best else 0,
                         best.name if best else None)  # fmt: skip


def why_no_placement(snap: HostSnapshot, gpu: str, type_num: int, also: Iterable[tuple[int, int]] = ()) -> str:
    """Why a vGPU of `type_num` has no free placement on `gpu`: which vGPUs hold the slots of its IDs."""
    p = policy_of(snap, gpu)
    tp = p.placement(type_num) if p is not None else None
    if p is None or tp is None:
        return f"{nvidia_type_id(type_num)} has no placement in heterogeneous mode (MIG-backed or not time-sliced)"
    held = placed(snap, gpu)
    taken = ", ".join(f"{vf} at {start}–{start + size - 1}" for vf, (start, size) in held.items())
    planned = ", ".join(f"{start}–{start + size - 1}" for start, size in also)
    frag = fragmentation(snap, gpu, also)
    parts = [f"{tp.name} needs {tp.size} slots at {', '.join(map(str, tp.ids))}"]
    if taken:
        parts.append(f"vGPUs hold {taken}")
    if planned:
        parts.append(f"this plan takes {planned}")
    if frag is not None:
        parts.append(frag.describe())
    return "; ".join(parts)
