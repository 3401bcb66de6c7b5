"""What MIG-backed vGPU types need, for every verb that gives a VM one — `create`, `apply -f` and so the Ansible
module. Pure: the MIG state comes in (catalog/mig.py MigHost, read by host/mig.py).

- `project`: the snapshot as the driver will list it once MIG mode is on (a GPU with MIG off lists none of its
  MIG-backed types), so that the types resolve and place; a GPU whose MIG mode cannot go on says why.
- `for_vgpus`: a plan's steps get what their vGPUs need first — MIG mode on (journaled, in effect before the next
  step), then the GPU instances at the placement the capacity model chooses (modes/mig.py, the rule `mig create`
  uses), right before the first vGPU step (after SR-IOV) — and each instance made is recorded on the allocations
  it is made for (`mig_instance` = profile id:start), so that `destroy` and `apply` remove it again and `restore`
  puts it back at the same start.
- `release`: the recorded instances of the vGPUs that go, destroyed after them (never one made by hand).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from vgpuadm.catalog.mig import MigGpu, MigHost, MigInstance
from vgpuadm.catalog.naming import resolve_type
from vgpuadm.errors import NotFoundError
from vgpuadm.model import Allocation, HostSnapshot, nvidia_type_id
from vgpuadm.modes import mig as mig_mode
from vgpuadm.steps import CreateGpuInstance, CreateMdev, DestroyGpuInstance, SetMigMode, SetVfVgpuType, Step

NONE = MigHost((), {})


def may_need(snap: HostSnapshot, type_names: Iterable[str]) -> bool:
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


def _available(snap: HostSnapshot, name: str) -> bool:
    try:
        return any(t.available_instances > 0 for t in resolve_type(snap.types(), name))
    except NotFoundError:
        return False


def project(snap: HostSnapshot, mig: MigHost, type_names: Iterable[str]) -> HostSnapshot:
    """`snap` as the driver will list it once the MIG-backed vGPUs' prerequisites exist (modes/mig.py project).
    A type no GPU can take then: a GPU whose MIG mode cannot go on now (a vGPU runs, a reset is pending) says why
    (ConflictError); else the snapshot with those GPUs too, so that planning names what is in the way."""
    gpus = [g for g in mig.gpus if g.mig_capable]
    names = [n for n in type_names if may_need(snap, [n])] if gpus else []
    if not names:
        return snap
    supported = mig.supported()
    projected = mig_mode.MODE.project(snap, gpus, supported)
    short = [n for n in names if not _available(projected, n)]
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


def _key(a: Allocation) -> str:
    return a.uuid or a.address or ""


def for_vgpus(
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
    out = [dataclasses.replace(a, extra={**a.extra, "mig_instance": records[_key(a)]}) if _key(a) in records else a
           for a in added]  # fmt: skip
    at = next(i for i, st in enumerate(steps) if isinstance(st, (SetVfVgpuType, CreateMdev)))
    state = dataclasses.replace(mig, gpus=tuple(gpus[g.address] for g in mig.gpus))
    return [*steps[:at], *pre, *steps[at:]], out, state


def release(snap: HostSnapshot, mig: MigHost, gone: Sequence[Allocation]) -> tuple[list[Step], MigHost]:
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


def one_mode_change(first: Sequence[Step], steps: Sequence[Step]) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
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


def diff_lines(steps: Iterable[Step]) -> list[str]:
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
