"""Where each device goes and the steps that make, free and retype it: placement (pack | spread | --numa, every
rejection with its reason) and the device planners every verb shares — create (placement + the mode's steps),
remove, layout C types, SR-IOV, vfio-pci bind and give-back. Pure: a HostSnapshot in, a Plan out; each dispatches
to its mode (vgpuadm.modes).

The kernel's `available_instances` already reflects the driver's rules for what exists now; placement also
applies them itself (vgpuadm/catalog/capacity.py, reference §2.4, §3.2-3.4) so that the reasons are explicit and
several instances of one request are counted against each other.
pack fills the most-used compatible physical GPU first; spread the least-used. Ties go to the lower address.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid as uuid_mod
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog import capacity
from vgpuadm.catalog.capacity import (
    NO_USAGE,
    GpuUsage,
    gpu_room,
    gpu_usage,
    heterogeneous,
    hidden_by_mig,
    host_maximum,
    idle_for_vgpu,
    in_the_way,
    mig_only,
    per_parent_room,
    policy_of,
    why_no_placement,
    why_no_types,
    why_not,
    why_not_listed,
)
from vgpuadm.catalog.mig import MigGpu, MigHost, MigInstance
from vgpuadm.errors import FREE, CapacityError, ConflictError, NotFoundError, UsageError
from vgpuadm.model import (
    Allocation,
    HostSnapshot,
    VgpuType,
    device_key,
    mdev_uuid,
    nvidia_type_id,
    nvidia_type_number,
    pci_address,
    resolve_type,
)
from vgpuadm.modes import mdev, passthrough, sriov, vf_vgpu
from vgpuadm.modes import mig as mig_mode
from vgpuadm.modes.base import Instance, Made
from vgpuadm.steps import CreateGpuInstance, CreateMdev, DestroyGpuInstance, Plan, SetMigMode, SetVfVgpuType, Step

POLICIES = ("pack", "spread")


@dataclass(frozen=True)
class Placement:
    """`choices`: one (parent, type) per requested instance, in creation order. `rejected`: every considered
    parent that cannot take (more of) the type, with the reason. `gpus`: per GPU of the host, why it was or was
    not chosen (`--explain`)."""

    type_id: str
    choices: list[tuple[str, VgpuType]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    gpus: list[tuple[str, str]] = field(default_factory=list)
    policy: str = "pack"

    def explain(self) -> str:
        rule = "fill the busiest GPU first" if self.policy == "pack" else "take the idlest GPU first"
        lines = [f"placement of {len(self.choices)} × {self.type_id}, policy {self.policy} ({rule}):"]
        lines += [f"  {gpu}: {why}" for gpu, why in self.gpus]
        return "\n".join(lines)


MAX_COUNT = 4096  # devices one command may ask for: far above what any host holds (a GPU has at most 32 vGPUs)


def check_count(count: int, unit: str = "instances") -> None:
    """1 ≤ count ≤ MAX_COUNT, checked before any planning (a huge --count must not be placed one by one)."""
    if count < 1:
        raise UsageError(f"--count must be at least 1, not {count}", f"ask for one or more {unit}")
    if count > MAX_COUNT:
        raise UsageError(
            f"--count {count} is more than vgpuadm places in one command ({MAX_COUNT})",
            "ask for what the host can hold: `vgpuadm types --available` lists the free instances",
        )


def check_host_count(snapshot: HostSnapshot, count: int, unit: str = "instances") -> None:
    """`count` devices fit what this host could ever hold (catalog/capacity.py host_maximum); checked before any
    planning, so an impossible request is refused at once instead of being placed one by one."""
    most = host_maximum(snapshot)
    if count > most:
        raise CapacityError(
            f"{count} {unit} are more than this host could ever hold ({most} vGPU devices in all)",
            "ask for what the host can hold: `vgpuadm types --available` lists the free instances",
        )


def place(
    snapshot: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
    taken: Mapping[str, str] | None = None,
    have: Collection[str] = (),
) -> Placement:
    """Choose `count` parents for `type_name`. `taken`: PCI addresses that a domain references (a layout C VF given
    to a VM whether or not its type is set now) → that domain; they are never chosen. `have`: how many of the type
    the requester already has, by device id (a total asked for is len(have) + count: the errors give that total, as
    it was asked, and never offer to free these for it).
    Raises NotFoundError (unknown type or GPU), UsageError (bad policy/count) or CapacityError listing why each
    candidate was rejected."""
    if policy not in POLICIES:
        raise UsageError(f'Unknown placement policy "{policy}"', "use --policy pack or --policy spread")
    check_count(count)
    check_host_count(snapshot, len(have) + count)
    types = snapshot.types()
    if gpu is not None:
        gpu = pci_address(gpu)
        on_gpu = [t for t in types if gpu in (t.parent, snapshot.physical_gpu(t.parent))]
        if not on_gpu:
            if gpu not in snapshot.functions and gpu not in snapshot.mdev_parents:
                raise NotFoundError(f"No GPU or mdev parent {gpu} on this host", "run `vgpuadm gpus` to list them")
            why, hint = why_no_types(snapshot, gpu)
            raise NotFoundError(f"GPU {snapshot.label(gpu)} offers no vGPU types: {why}", hint)
        candidates = resolve_on_host(snapshot, on_gpu, type_name, gpu)
    else:
        try:
            candidates = resolve_on_host(snapshot, types, type_name)
        except NotFoundError:
            if not any(vf.offered for vf in snapshot.vendor_vfs.values()):  # no list from the driver either
                _vendor_vfs_full(snapshot, type_name, count)
            raise
    if all(t.layout.types_by_number and not t.available_instances for t in candidates):
        _vendor_vfs_full(snapshot, type_name, count, candidates)  # known from the driver's list, creatable on no VF
    type_id = candidates[0].type_id
    usage = gpu_usage(snapshot)
    rejected: list[tuple[str, str]] = []
    remaining: dict[str, int] = {}
    by_parent: dict[str, VgpuType] = {}
    for t in candidates:
        st = usage.get(snapshot.physical_gpu(t.parent), NO_USAGE)
        reason = why_not(snapshot, t, st, numa, owner=(taken or {}).get(t.parent))
        if reason:
            rejected.append((t.parent, reason))
            continue
        remaining[t.parent] = per_parent_room(t)
        by_parent[t.parent] = t
    # Layout C VFs in use drop every type from creatable_vgpu_types: name them so the reasons are complete.
    phys_seen = {snapshot.physical_gpu(t.parent) for t in candidates}
    for addr, vf in sorted(snapshot.vendor_vfs.items()):
        listed = any(p == addr for p, _ in rejected)
        if addr not in by_parent and vf.in_use and snapshot.physical_gpu(addr) in phys_seen and not listed:
            rejected.append((addr, f"VF already hosts a vGPU ({vf.current_type_id}); one vGPU per VF"))
    used = Counter({phys: st.count for phys, st in usage.items()})
    # Per physical GPU cap on SR-IOV layouts: max_instance counts vGPUs of this size across all VFs.
    gpu_left: dict[str, int] = {}
    for t in by_parent.values():
        phys = snapshot.physical_gpu(t.parent)
        st = usage.get(phys, NO_USAGE)
        # MIG profiles mix: a MIG-backed type's maximum counts its own vGPUs; the GPU instances decide the rest
        mine = sum(1 for tid in st.busy_vfs.values() if tid == t.type_id) if mig_only(t, st) else used[phys]
        room = gpu_room(t, mine, heterogeneous(snapshot, phys))
        if room is not None:
            gpu_left[phys] = room
    choices: list[tuple[str, VgpuType]] = []
    for _ in range(count):
        open_parents = [p for p, n in remaining.items() if n > 0 and gpu_left.get(snapshot.physical_gpu(p), 1) > 0]
        if not open_parents:
            break

        def key(p: str) -> tuple[int, str, str]:
            phys = snapshot.physical_gpu(p)
            return (-used[phys] if policy == "pack" else used[phys], phys, p)

        parent = min(open_parents, key=key)
        remaining[parent] -= 1
        used[snapshot.physical_gpu(parent)] += 1
        if snapshot.physical_gpu(parent) in gpu_left:
            gpu_left[snapshot.physical_gpu(parent)] -= 1
        choices.append((parent, by_parent[parent]))
    full = [(p, f"no free instances of {type_id} left after this request") for p, n in remaining.items() if n == 0]
    full += [
        (f"{phys} (GPU)", f"at most {by_parent_max(by_parent, snapshot, phys)} × {type_id} per GPU")
        for phys, left in gpu_left.items()
        if left <= 0
    ]
    per_gpu = _per_gpu(snapshot, type_id, candidates, sorted(rejected), choices, usage, policy, gpu)
    placement = Placement(type_id, choices, sorted(rejected), per_gpu, policy)
    if len(choices) < count:
        reasons = _summary(snapshot, sorted(rejected) + full)
        if have:
            fit = f" ({len(have)} exist, {count} more needed; " + (
                f"only {len(choices)} fit)" if choices else "none fits)"
            )
        else:
            fit = f" (only {len(choices)} fit)" if choices else ""
        where = f" on {gpu}" if gpu else ""
        gpus = {snapshot.physical_gpu(p.removesuffix(" (GPU)")) for p, _ in rejected + full}
        blockers = [b for b in in_the_way(snapshot, gpus) if b[0] not in have]
        raise CapacityError(
            f"No room for {len(have) + count} × {type_id}{where}{fit}: {reasons or 'no candidate parent'}",
            f"{FREE}or pick another type or GPU; `vgpuadm types --available` lists what fits now",
            blockers=blockers,
        )
    return placement


def _per_gpu(
    snapshot: HostSnapshot, type_id: str, candidates: Sequence[VgpuType], rejected: list[tuple[str, str]],
    choices: list[tuple[str, VgpuType]], usage: Mapping[str, GpuUsage], policy: str, only: str | None,
) -> list[tuple[str, str]]:  # fmt: skip
    """Why each GPU was or was not chosen: the chosen ones first (in choice order), then the other candidates,
    then the host's other GPUs (which do not offer the type; with the reason when they offer none)."""
    phys = snapshot.physical_gpu
    chosen: dict[str, list[str]] = {}
    for parent, _ in choices:
        on = chosen.setdefault(phys(parent), [])
        if parent not in on:
            on.append(parent)
    refused: dict[str, list[tuple[str, str]]] = {}
    for parent, reason in rejected:
        refused.setdefault(phys(parent), []).append((parent, reason))
    open_gpus = {phys(t.parent) for t in candidates if t.parent not in {p for p, _ in rejected}}
    rule = "fills the busiest GPU first" if policy == "pack" else "takes the idlest GPU first"
    out: list[tuple[str, str]] = []
    for gpu in [*chosen, *sorted(({phys(t.parent) for t in candidates} | set(refused)) - set(chosen))]:
        running = usage.get(gpu, NO_USAGE).count
        if gpu in chosen:
            n = sum(1 for p, _ in choices if phys(p) == gpu)
            where = "" if chosen[gpu] == [gpu] else f" on {', '.join(chosen[gpu])}"
            why = f"chosen for {n}{where} ({running} vGPU(s) ran on it)"
            if refused.get(gpu):
                why += f"; not on {_reasons(snapshot, gpu, refused[gpu])}"
        elif gpu in open_gpus:
            why = f"not chosen: it has room, but {policy} {rule} ({running} vGPU(s) run on it)"
        else:
            why = f"not chosen: {_reasons(snapshot, gpu, refused[gpu])}"
        out.append((snapshot.label(gpu), why))
    seen = {phys(t.parent) for t in candidates} | set(refused)
    offering = {phys(t.parent) for t in snapshot.types()}
    for fn in snapshot.gpus:
        if fn.physfn or fn.address in seen or (only is not None and only != fn.address):
            continue
        if fn.address in offering:
            why = f"not chosen: it does not offer {type_id}"
        else:
            why = f"not chosen: it offers no vGPU types: {why_no_types(snapshot, fn.address)[0]}"
        out.append((snapshot.label(fn.address), why))
    return out


def _reasons(snapshot: HostSnapshot, gpu: str, refused: list[tuple[str, str]]) -> str:
    """The reasons of one GPU's parents; the GPU's own address is not repeated."""
    if [p for p, _ in refused] == [gpu]:
        return refused[0][1]
    return _summary(snapshot, refused)


def resolve_on_host(
    snapshot: HostSnapshot, types: Sequence[VgpuType], wanted: str, where: str = "this host"
) -> list[VgpuType]:
    """resolve_type, and when nothing matches, also the GPUs whose types are not listed now because they are bound
    to vfio-pci (so "Unknown type" says why a type the host had is gone)."""
    try:
        return resolve_type(types, wanted, where)
    except NotFoundError as exc:
        mig = [
            g for g in hidden_by_mig(snapshot, wanted) if where in ("this host", g) or snapshot.physical_gpu(where) == g
        ]
        if mig:
            labels = ", ".join(snapshot.label(g) for g in mig)
            raise NotFoundError(
                f'Unknown type "{wanted}" on {where}: {labels} {"is" if len(mig) == 1 else "are"} in MIG mode, '
                f"which lists only MIG-backed types; {wanted} is time-sliced, and time-sliced and MIG-backed types do "
                "not mix on one GPU",
                f"turn MIG mode off (`vgpuadm mig disable --gpu {mig[0]}`, once its MIG-backed vGPUs are gone) to get "
                "time-sliced types, or ask for a MIG-backed type (`vgpuadm types` lists them)",
            ) from None
        idle = [a for a in idle_for_vgpu(snapshot) if where == "this host" or a == where]
        if not idle:
            raise
        labels = ", ".join(snapshot.label(a) for a in idle)
        verb = "is" if len(idle) == 1 else "are"
        raise NotFoundError(
            f"{exc.message} ({labels} {verb} bound to vfio-pci, so {'its' if len(idle) == 1 else 'their'} types are "
            "not offered now)",
            f"`vgpuadm release --gpu {idle[0]}` or `vgpuadm vfio unbind {idle[0]}` gives it back to its driver; "
            f"{exc.hint}",
        ) from None


def _summary(snapshot: HostSnapshot, rejected: list[tuple[str, str]]) -> str:
    """One clause per physical GPU and reason; VFs sharing a reason are counted instead of listed."""
    groups: dict[tuple[str, str], list[str]] = {}
    for parent, reason in rejected:
        groups.setdefault((snapshot.physical_gpu(parent), reason), []).append(parent)
    parts = []
    for (phys, reason), parents in groups.items():
        if len(parents) == 1:
            parts.append(f"{parents[0]}: {reason}")
        else:
            parts.append(f"{len(parents)} VFs of {phys}: {reason}")
    return "; ".join(parts)


def by_parent_max(by_parent: dict[str, VgpuType], snapshot: HostSnapshot, phys: str) -> int:
    return max((t.max_instances or 0) for t in by_parent.values() if snapshot.physical_gpu(t.parent) == phys)


def _vendor_vfs_full(snapshot: HostSnapshot, type_name: str, count: int, candidates: Sequence[VgpuType] = ()) -> None:
    """Layout C VFs list nothing creatable once their GPU is full: say that instead of "unknown type". Where the
    type is known (`candidates`: its entries, none free), the sharing rule says why its GPU's free VFs do not list
    it (catalog/capacity.py why_not_listed: MIG-backed vGPUs run, or another framebuffer size)."""
    per_pf: dict[str, list[int]] = {}
    for vf in snapshot.vendor_vfs.values():
        busy_free = per_pf.setdefault(snapshot.physical_gpu(vf.address), [0, 0])
        busy_free[0 if vf.in_use else 1] += 1
    busy = sorted(pf for pf, (b, _) in per_pf.items() if b)
    if not busy:
        return
    usage = gpu_usage(snapshot)
    known = {snapshot.physical_gpu(t.parent): t for t in candidates}
    why = {pf: r for pf in busy if pf in known and (r := why_not_listed(snapshot, pf, known[pf], usage[pf]))}
    if len(why) == len(busy):
        raise CapacityError(
            f"No room for {count} × {type_name}: " + "; ".join(f"{pf}: {why[pf][0]}" for pf in busy),
            "; ".join(dict.fromkeys(why[pf][1] for pf in busy)),
            blockers=in_the_way(snapshot, busy),
        )
    parts = [f"{pf}: {per_pf[pf][0]} VFs host vGPUs" + (f", {per_pf[pf][1]} free VFs do not list it"
             if per_pf[pf][1] else "") + _no_placement(snapshot, pf, type_name) for pf in busy]  # fmt: skip
    raise CapacityError(
        f"No room for {count} × {type_name}: no VF lists it in nvidia/creatable_vgpu_types ({'; '.join(parts)})",
        f"the GPU is full or runs another framebuffer size; {FREE}or pick another type",
        blockers=in_the_way(snapshot, busy),
    )


def _no_placement(snapshot: HostSnapshot, gpu: str, type_name: str) -> str:
    """On a GPU in heterogeneous mode, why the type has no free placement (catalog/capacity.py)."""
    policy = policy_of(snapshot, gpu)
    if policy is None or not policy.heterogeneous:
        return ""
    word = type_name.lower()
    tp = next((t for t in policy.types if word in (nvidia_type_id(t.type_num), t.name.lower(),
                                                   t.name.split()[-1].lower())), None)  # fmt: skip
    return f"; {why_no_placement(snapshot, gpu, tp.type_num)}" if tp is not None else ""


# -- the device planners ---------------------------------------------------------------------------------------


def plan_create(snap: HostSnapshot, type_name: str, count: int = 1, **options: Any) -> tuple[Plan, list[str]]:
    """plan_devices (same options) as one plan, and the device ids it makes (mdev UUIDs, or VF addresses on layout C
    and VF pools): what `mdev create` runs."""
    made, summary = plan_devices(snap, type_name, count, **options)
    return Plan.of([s for m in made for s in m.steps], summary), [m.device for m in made]


def plan_devices(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
    params: str = "",
    uuids: Sequence[str] = (),
    taken: Mapping[str, str] | None = None,
    have: Sequence[str] = (),
) -> tuple[list[Made], str]:
    """Plan `count` vGPUs of `type_name`, per device (each with its own steps and what its allocation records, as
    the mode that makes it says: Mode.plan_instance), and a summary of the whole. `uuids` fixes the mdev UUIDs (one
    per instance), else random ones are drawn. `have`: the devices of the type the requester has already
    (placement's errors name the total asked for)."""
    if uuids and len(uuids) != count:
        raise UsageError(f"{len(uuids)} UUIDs given for {count} devices", "give one --uuid per device, or none")
    if uuids and all(mdev_uuid(u) in snap.mdevs for u in uuids):
        # Idempotence: every named mdev already exists; fine when each runs the requested type.
        wanted = {t.type_id for t in resolve_type(snap.types(), type_name)}
        existing = [snap.mdevs[mdev_uuid(u)] for u in uuids]
        if all(m.type_id in wanted for m in existing):
            kept = [Made((), m.uuid, (mode := modes.for_type_on(snap, m.parent, m.type_id)).name, m.type_id, m.parent,
                         uuid=m.uuid, display=True, placed_at_start=mode.placed_at_start) for m in existing]  # fmt: skip
            return kept, f"mdevs {', '.join(m.uuid for m in existing)} already exist"
    gpu = pci_address(gpu) if gpu is not None else None
    placement = place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa, taken=taken, have=have)
    out: list[Made] = []
    ids: list[str] = []
    enabling: set[str] = set()
    planned: dict[str, list[tuple[int, int]]] = {}  # GPU in heterogeneous mode → placements this plan takes
    for i, (_parent, t) in enumerate(placement.choices):
        ask = Instance(
            params,
            functools.partial(_uuid, uuids[i] if uuids else None, ids),
            functools.partial(_placement, snap, t, planned),
            lambda: {*(taken or {}), *ids},
            enabling,
        )
        one = modes.for_type(t).plan_instance(snap, t, ask)
        out.append(one)
        ids.append(one.device)
    where = ", ".join(sorted({p for p, _ in placement.choices}))
    return out, f"create {count} × {placement.type_id} on {where}"


def _uuid(given: str | None, ids: Sequence[str]) -> str:
    """The UUID of the next mdev of a create plan: the one given (checked), else a random one."""
    dev = mdev_uuid(given) if given is not None else str(uuid_mod.uuid4())
    if dev in ids:
        raise UsageError(f"UUID {dev} given twice", "give distinct UUIDs")
    return dev


def _placement(snap: HostSnapshot, t: VgpuType, planned: dict[str, list[tuple[int, int]]]) -> int | None:
    """The placement ID of one more vGPU of `t` on its GPU in heterogeneous mode (None elsewhere), counting what
    this plan already placed; a CapacityError saying which vGPUs hold the slots when none is free."""
    gpu = snap.physical_gpu(t.parent)
    policy = capacity.policy_of(snap, gpu)
    tp = policy.placement(t.numeric_id or 0) if policy is not None and policy.heterogeneous else None
    if tp is None:
        return None
    also = planned.setdefault(gpu, [])
    pid = capacity.choose_placement(snap, gpu, tp.type_num, also)
    if pid is None:
        raise CapacityError(
            f"No room for one more {t.type_id} ({tp.name}) on {gpu}: {capacity.why_no_placement(snap, gpu, tp.type_num, also)}",
            "free a vGPU on that GPU or pick a smaller type; `vgpuadm inventory` shows each GPU's free pieces",
        )
    also.append((pid, tp.size))
    return pid


def explain_placement(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
) -> str:
    """Why each candidate parent was chosen or rejected (the CapacityError, when nothing fits, says the same)."""

    gpu = pci_address(gpu) if gpu is not None else None
    try:
        return place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa).explain()
    except CapacityError as exc:
        return f"placement of {type_name}: {exc.message}"


def plan_remove(snap: HostSnapshot, device_id: str) -> Plan:
    """Remove a vGPU: an mdev by UUID, or clear a layout C VF by address."""
    device_id = device_key(device_id)

    if device_id in snap.vendor_vfs:
        return Plan.of(vf_vgpu.MODE.plan_clear(snap, device_id), f"clear VF {device_id}")
    return Plan.of(
        mdev.MODE.plan_remove(snap, mdev_uuid(device_id, "as `vgpuadm devices` lists them")),
        f"remove mdev {device_id}",
    )


def plan_vf_type(
    snap: HostSnapshot, type_name: str, vf: str | None = None, *, params: str = "", policy: str = "pack"
) -> tuple[Plan, str]:
    """Layout C: set a vGPU type on `vf` (or on a VF placement picks); returns the plan and the VF address."""
    vf = pci_address(vf) if vf is not None else None

    if vf is not None:
        found = vf_vgpu.MODE.find(snap, vf)
        if found.in_use:
            # A typed VF lists nothing creatable: compare with the number the name stands for instead.
            if _type_number(snap, type_name) == found.current_type:
                return Plan.of([], f"VF {vf} already runs {found.current_type_id}"), vf
            raise ConflictError(
                f"VF {vf} already runs {found.current_type_id}",
                f"{FREE}or pick another VF",
                blockers=[(vf, "vf clear")],
            )
    placement = place(snap, type_name, 1, gpu=vf, policy=policy)
    t = placement.choices[0][1]
    if not t.layout.types_by_number:
        raise UsageError(f"{t.type_id} on {t.parent} is an mdev type", "use `vgpuadm mdev create` for mdev types")
    return Plan.of(vf_vgpu.MODE.plan_create(snap, t, params), f"set {t.type_id} on VF {t.parent}"), t.parent


def _type_number(snap: HostSnapshot, type_name: str) -> int | None:

    try:
        return resolve_type(snap.types(), type_name)[0].numeric_id
    except NotFoundError:
        name = type_name.strip().lower()
        return int(name) if name.isdigit() else nvidia_type_number(name)


def plan_vf_clear(snap: HostSnapshot, vf: str) -> Plan:
    vf = pci_address(vf)

    return Plan.of(vf_vgpu.MODE.plan_clear(snap, vf), f"clear VF {vf}")


def plan_sriov(snap: HostSnapshot, pf: str, enable: bool, num: int | None = None, *, present: bool = False) -> Plan:
    """Enable (`num` VFs, default all) or disable a PF's VFs; `present`: NVIDIA's sriov-manage is installed."""
    pf = pci_address(pf)

    if enable:
        return Plan.of(sriov.MODE.plan_enable(snap, pf, num, sriov_manage=present), f"enable VFs of {pf}")
    return Plan.of(sriov.MODE.plan_disable(snap, pf, sriov_manage=present), f"disable VFs of {pf}")


def plan_vfio_bind(snap: HostSnapshot, gpu: str, force: bool = False) -> Plan:
    """Bind the whole IOMMU group of `gpu` to vfio-pci (empty when already bound)."""
    gpu = pci_address(gpu)

    return Plan.of(passthrough.MODE.plan_bind(snap, gpu, force), f"bind the IOMMU group of {gpu} to vfio-pci")


def plan_vfio_restore(snap: HostSnapshot, gpu: str, original: dict[str, str]) -> Plan:
    """Give the group of `gpu` back to its original drivers (`original`: those `vfio bind` remembered)."""
    gpu = pci_address(gpu)

    return Plan.of(passthrough.MODE.plan_restore(snap, gpu, original), f"give {gpu} back to its drivers")


# -- the MIG GPU instances MIG-backed vGPU types need ---------------------------------------------------------
# What MIG-backed vGPU types need, for every verb that gives a VM one — `create`, `apply -f` and so the Ansible
# module. Pure: the MIG state comes in (catalog/mig.py MigHost, read by host/mig.py).
#
# - `project`: the snapshot as the driver will list it once MIG mode is on (a GPU with MIG off lists none of its
#   MIG-backed types), so that the types resolve and place; a GPU whose MIG mode cannot go on says why.
# - `for_vgpus`: a plan's steps get what their vGPUs need first — MIG mode on (journaled, in effect before the next
#   step), then the GPU instances at the placement the capacity model chooses (modes/mig.py, the rule `mig create`
#   uses), right before the first vGPU step (after SR-IOV) — and each instance made is recorded on the allocations
#   it is made for (`mig_instance` = profile id:start), so that `destroy` and `apply` remove it again and `restore`
#   puts it back at the same start.
# - `release`: the recorded instances of the vGPUs that go, destroyed after them (never one made by hand).

NO_MIG = MigHost((), {})


def mig_may_need(snap: HostSnapshot, type_names: Iterable[str]) -> bool:
    """Whether planning these types needs the MIG state: one of them is MIG-backed, or this host does not list it
    now (with MIG off a GPU lists none of its MIG-backed types). Time-sliced types alone never run nvidia-smi."""
    types = snap.types()
    for name in type_names:
        try:
            found = resolve_type(types, name)
        except NotFoundError:
            return True
        if any("mig_slices" in t.attributes for t in found):
            return True
    return False


def _mig_available(snap: HostSnapshot, name: str) -> bool:
    try:
        return any(t.available_instances > 0 for t in resolve_type(snap.types(), name))
    except NotFoundError:
        return False


def mig_project(snap: HostSnapshot, mig: MigHost, type_names: Iterable[str]) -> HostSnapshot:
    """`snap` as the driver will list it once the MIG-backed vGPUs' prerequisites exist (modes/mig.py project).
    A type no GPU can take then: a GPU whose MIG mode cannot go on now (a vGPU runs, a reset is pending) says why
    (ConflictError); else the snapshot with those GPUs too, so that planning names what is in the way."""
    gpus = [g for g in mig.gpus if g.mig_capable]
    names = [n for n in type_names if mig_may_need(snap, [n])] if gpus else []
    if not names:
        return snap
    supported = mig.supported()
    projected = mig_mode.MODE.project(snap, gpus, supported)
    short = [n for n in names if not _mig_available(projected, n)]
    if not short:
        return projected
    blocked = mig_mode.MODE.project(snap, gpus, supported, blocked_too=True)
    for name in short:
        try:
            found = resolve_type(blocked.types(), name)
        except NotFoundError:
            continue
        for g in gpus:
            if not g.enabled and any(blocked.physical_gpu(t.parent) == g.address for t in found):
                mig_mode.MODE.plan_enable_now(snap, g)
    return blocked


def _mig_key(a: Allocation) -> str:
    return a.uuid or a.address or ""


def mig_for_vgpus(
    snap: HostSnapshot, mig: MigHost, steps: Sequence[Step], added: Sequence[Allocation]
) -> tuple[list[Step], list[Allocation], MigHost]:
    """`steps` (one plan's) with what their MIG-backed vGPUs need put before the first vGPU step, `added` with
    each made instance recorded (`mig_instance`) on the vGPUs that will sit on it, and the MIG state after them
    (for the next plan of the same request). Which instance a vGPU sits on is the driver's choice: an existing
    one with room first (lowest id), then the new ones in the order they are made."""
    types = {(t.parent, t.type_id): t for t in snap.types()}
    needs: list[tuple[tuple[str, str, int], str]] = []  # ((PF, profile, vGPUs per instance), the vGPU's key)
    for st in steps:
        if isinstance(st, SetVfVgpuType):
            dev, type_id, key = st.vf, nvidia_type_id(st.type_num), st.vf
        elif isinstance(st, CreateMdev):
            dev, type_id, key = st.parent, st.type_id, st.uuid
        else:
            continue
        t = types.get((dev, type_id))
        pf = snap.physical_gpu(dev)
        need = mig.need(pf, type_id, t.name) if t is not None and "mig_slices" in t.attributes else None
        if need is not None:
            needs.append(((pf, *need), key))
    if not needs:
        return list(steps), list(added), mig
    pre = mig_mode.MODE.plan_for_vgpus(snap, mig.gpus, [n for n, _ in needs])
    gpus = {g.address: g for g in mig.gpus}
    for st in pre:
        if isinstance(st, SetMigMode) and st.enable:
            gpus[st.address] = dataclasses.replace(gpus[st.address], mig_current="Enabled", mig_pending="Enabled")
    records: dict[str, str] = {}
    for pf, profile, per in dict.fromkeys(n for n, _ in needs):
        g = gpus[pf]
        sizes = {p.profile_id: p.size for p in g.profiles}
        new = [MigInstance(st.profile, st.profile_id, -1, st.start, sizes.get(st.profile_id, 1))
               for st in pre if isinstance(st, CreateGpuInstance) and st.address == pf and st.profile == profile]  # fmt: skip
        pool = [
            gi for gi in sorted(g.instances, key=lambda gi: (gi.instance_id < 0, gi.instance_id)) if gi.name == profile
        ] + new  # planned ones (no id yet) are made after those that exist
        users = {id(gi): list(gi.users) for gi in pool}
        for wanted, key in needs:
            if wanted != (pf, profile, per):
                continue
            gi = next(gi for gi in pool if len(users[id(gi)]) < per)
            users[id(gi)].append(key)
            if any(gi is x for x in new):
                records[key] = f"{gi.profile_id}:{gi.start}"
        kept = tuple(dataclasses.replace(gi, users=tuple(users[id(gi)])) if gi.name == profile else gi
                     for gi in g.instances)  # fmt: skip
        gpus[pf] = dataclasses.replace(g, instances=kept + tuple(dataclasses.replace(gi, users=tuple(users[id(gi)]))
                                                                 for gi in new))  # fmt: skip
    out = [dataclasses.replace(a, extra={**a.extra, "mig_instance": records[_mig_key(a)]}) if _mig_key(a) in records else a
           for a in added]  # fmt: skip
    at = next(i for i, st in enumerate(steps) if isinstance(st, (SetVfVgpuType, CreateMdev)))
    state = dataclasses.replace(mig, gpus=tuple(gpus[g.address] for g in mig.gpus))
    return [*steps[:at], *pre, *steps[at:]], out, state


def mig_release(snap: HostSnapshot, mig: MigHost, gone: Sequence[Allocation]) -> tuple[list[Step], MigHost]:
    """The GPU instances vgpuadm made for the vGPUs in `gone` (modes/mig.py plan_release), and the MIG state after
    those vGPUs and instances are gone."""
    steps = mig_mode.MODE.plan_release(snap, mig.gpus, gone) if any("mig_instance" in a.extra for a in gone) else []
    freed = {k for a in gone for k in (a.uuid, a.address) if k}
    destroyed = {(st.address, st.profile_id, st.start) for st in steps if isinstance(st, DestroyGpuInstance)}
    gpus: list[MigGpu] = []
    for g in mig.gpus:
        kept = tuple(dataclasses.replace(gi, users=tuple(u for u in gi.users if u not in freed)) for gi in g.instances
                     if (g.address, gi.profile_id, gi.start) not in destroyed)  # fmt: skip
        gpus.append(dataclasses.replace(g, instances=kept))
    return steps, dataclasses.replace(mig, gpus=tuple(gpus))


def mig_one_mode_change(first: Sequence[Step], steps: Sequence[Step]) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """A plan file's `gpus:` section turning MIG mode on (`first`) and the MIG-backed types of its VMs needing it on
    (`steps`) are one change: the section's step, in effect at once when the types need it, and no second one."""
    later = {(st.address, st.enable): st for st in steps if isinstance(st, SetMigMode)}
    merged = tuple(
        dataclasses.replace(st, effective=st.effective or later[(st.address, st.enable)].effective)
        if isinstance(st, SetMigMode) and (st.address, st.enable) in later else st
        for st in first
    )  # fmt: skip
    done = {(st.address, st.enable) for st in merged if isinstance(st, SetMigMode)}
    return merged, tuple(st for st in steps if not (isinstance(st, SetMigMode) and (st.address, st.enable) in done))


def mig_diff_lines(steps: Iterable[Step]) -> list[str]:
    """The MIG changes among `steps` as `apply --diff` lines."""
    out = []
    for st in steps:
        if isinstance(st, SetMigMode):
            out.append(f"~ gpu {st.address}: MIG {'off → on' if st.enable else 'on → off'}")
        elif isinstance(st, CreateGpuInstance):
            out.append(f"+ gpu {st.address}: MIG GPU instance {st.profile} at slot {st.start}")
        elif isinstance(st, DestroyGpuInstance):
            out.append(f"- gpu {st.address}: MIG GPU instance {st.profile} at slot {st.start}")
    return out
