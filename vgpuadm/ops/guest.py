"""The guest verbs: `create`, `destroy`, `passthrough`, `release`. Each runs in one Session (lock, snapshot, one
domain scan), asks plan/guest.py for ONE plan per domain (kernel steps + libvirt steps + the metadata record) and
hands it to the executor, so a failed attach rolls back the device it just made."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpuadm.catalog.mig import MigGpu
from vgpuadm.catalog.naming import mig_profile_name, resolve_type
from vgpuadm.errors import NotFoundError, VgpuadmError
from vgpuadm.executor import load_drivers
from vgpuadm.host import mig as host_mig
from vgpuadm.host import nvidia_smi
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.modes import mig as mig_mode
from vgpuadm.ops.session import Session
from vgpuadm.plan import guest as planner
from vgpuadm.plan.domains import with_recorded
from vgpuadm.plan.guest import DomainPlan
from vgpuadm.steps import CreateGpuInstance, CreateMdev, Plan, SetVfVgpuType
from vgpuadm.virt import xml
from vgpuadm.virt.steps import DefineDomain

Progress = Callable[[int, int, str], None]


@dataclass
class GuestResult:
    """What a guest command did (or, with dry_run, would do)."""

    domain: str
    uri: str
    plan: Plan
    dry_run: bool
    devices: list[Allocation]  # what the domain owns afterwards
    added: list[Allocation] = field(default_factory=list)
    removed: list[Allocation] = field(default_factory=list)
    hostdevs: list[str] = field(default_factory=list)  # the hostdev XML of added/removed devices
    message: str = ""

    @property
    def changed(self) -> bool:
        return not self.plan.empty and not self.dry_run

    def to_json(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "uri": self.uri,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "message": self.message,
            "steps": self.plan.describe(),
            "added": [allocation_json(a) for a in self.added],
            "removed": [allocation_json(a) for a in self.removed],
            "devices": [allocation_json(a) for a in self.devices],
            "hostdevs": self.hostdevs,
        }


def allocation_json(a: Allocation) -> dict[str, Any]:
    return {
        "slot": a.slot,
        "mode": a.mode,
        "type_id": a.type_id,
        "parent": a.parent,
        "uuid": a.uuid,
        "address": a.address,
        "params": a.params,
        "options": dict(sorted(a.extra.items())),
    }


def create(
    root: str | None,
    vm: str,
    type_name: str,
    count: int = 1,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    **options: Any,
) -> GuestResult:
    """Give domain `vm` `count` devices of `type_name` in total (gpu, policy, numa, display, ramfb, params)."""
    return create_many(root, [(vm, count)], type_name, connect=connect, dry_run=dry_run, progress=progress,
                       **options)[0]  # fmt: skip


def create_many(
    root: str | None,
    requests: Sequence[tuple[str, int]],
    type_name: str,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    **options: Any,
) -> list[GuestResult]:
    """Provision several domains (name, total count) with one type under one lock, one discovery and one libvirt
    connection. Placement is joint; each domain's plan is applied (or rolled back) as a unit, in order. When one
    fails, the domains before it keep their devices and the error says which they are."""
    with Session.open(root, connect) as s:
        snap = s.snap
        xmls = [(s.domain_xml(vm), count) for vm, count in requests]
        planning = with_recorded(snap, s.domains())  # what restore will bring back is taken
        planning, gpus = _mig_projection(s, planning, type_name)
        plans = planner.plan_create_many(planning, xmls, type_name, taken=s.domains().users(), **options)
        if gpus:
            plans = _with_gpu_instances(planning, gpus, plans)
        done: list[str] = []
        for p in plans:
            try:
                s.execute(p.plan, dry_run=dry_run, progress=progress)
            except VgpuadmError as exc:
                if len(plans) > 1:
                    exc.message = f"domain {p.name}: {exc.message}"
                    exc.args = (exc.message,)
                    if done:
                        exc.hint += f"; already provisioned before it: {', '.join(done)}"
                raise
            if p.added:
                done.append(p.name)
        return [
            GuestResult(p.name, s.uri, p.plan, dry_run, p.after, p.added,
                        hostdevs=[xml.hostdev_for(a) for a in p.added], message=p.plan.summary)
            for p in plans
        ]  # fmt: skip


def _mig_gpus(s: Session) -> list[MigGpu]:
    """The MIG state, or none when this host has no nvidia-smi or it fails (the vGPU writes then meet the driver's
    answer)."""
    try:
        return host_mig.read(s.root)
    except VgpuadmError:
        return []


def _mig_projection(s: Session, snap: HostSnapshot, type_name: str) -> tuple[HostSnapshot, list[MigGpu]]:
    """For a MIG-backed type (or one this host does not list now: with MIG off a GPU lists none of them), the
    snapshot as it will be once MIG mode is on and the GPU instances exist (modes/mig.py project), and the MIG
    state it was projected from; for other types the snapshot as it is, and no MIG state (nvidia-smi not run)."""
    try:
        found = resolve_type(snap.types(), type_name)
    except NotFoundError:
        found = []
    if found and not any("mig_slices" in t.attributes for t in found):
        return snap, []
    gpus = [g for g in _mig_gpus(s) if g.mig_capable]
    if not gpus:
        return snap, []
    text = nvidia_smi.run(s.root, "vgpu", "-s", "-v")
    supported = nvidia_smi.parse_supported_types(text) if text else {}
    projected = mig_mode.MODE.project(snap, gpus, supported)
    try:
        if any(t.available_instances > 0 for t in resolve_type(projected.types(), type_name)):
            return projected, gpus
    except NotFoundError:
        pass
    # no GPU can take it as things are: a GPU whose MIG mode cannot go on now says why (vGPUs run, reset pending)
    blocked = mig_mode.MODE.project(snap, gpus, supported, blocked_too=True)
    try:
        found = resolve_type(blocked.types(), type_name)
    except NotFoundError:
        found = []
    for g in gpus:
        if not g.enabled and any(blocked.physical_gpu(t.parent) == g.address for t in found):
            mig_mode.MODE.plan_enable_now(snap, g)
    return blocked, gpus


def _with_gpu_instances(snap: HostSnapshot, gpus: list[MigGpu], plans: list[DomainPlan]) -> list[DomainPlan]:
    """Each plan's vGPUs of MIG-backed types (layout C VFs, layout B mdevs) get what they need first: MIG mode on
    and the GPU instances (modes/mig.py plan_for_vgpus), each made instance recorded on the allocation it was
    made for (`mig_instance` = profile id:start) so that `destroy` removes it again."""
    types = {(t.parent, t.type_id): t for t in snap.types()}
    out = []
    for p in plans:
        needs = []
        for st in p.plan.steps:
            if isinstance(st, SetVfVgpuType):
                parent, t = st.vf, types.get((st.vf, f"nvidia-{st.type_num}"))
            elif isinstance(st, CreateMdev):
                parent, t = st.parent, types.get((st.parent, st.type_id))
            else:
                continue
            profile = mig_profile_name(t.name) if t is not None and "mig_slices" in t.attributes else None
            if profile and any(g.address == snap.physical_gpu(parent) for g in gpus):
                needs.append((snap.physical_gpu(parent), profile, parent))
        if not needs:
            out.append(p)
            continue
        pre = mig_mode.MODE.plan_for_vgpus(snap, gpus, [(pf, profile) for pf, profile, _ in needs])
        gpus = mig_mode.MODE.with_planned(gpus, pre)
        made = [st for st in pre if isinstance(st, CreateGpuInstance)]
        added = list(p.added)
        for pf, profile, parent in needs:  # each made instance is recorded on one vGPU of its GPU and profile
            gi = next((m for m in made if m.address == pf and m.profile == profile), None)
            if gi is None:
                continue
            made.remove(gi)
            i = next(
                i for i, a in enumerate(added) if parent in (a.parent, a.address) and "mig_instance" not in a.extra
            )
            added[i] = dataclasses.replace(
                added[i], extra={**added[i].extra, "mig_instance": f"{gi.profile_id}:{gi.start}"}
            )
        after = [next((b for b in added if b.slot == a.slot), a) for a in p.after]
        element = xml.metadata_xml(after, snap.host_key)
        steps = [*pre, *(dataclasses.replace(st, element=element) if isinstance(st, DefineDomain) else st
                         for st in p.plan.steps)]  # fmt: skip
        out.append(dataclasses.replace(p, plan=Plan(tuple(steps), p.plan.summary), added=added, after=after))
    return out


# -- destroy ---------------------------------------------------------------------------------------------------------


def destroy(
    root: str | None,
    vm: str,
    *,
    uuid: str | None = None,
    all_: bool = False,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GuestResult:
    with Session.open(root, connect) as s:
        dom = s.domain_xml(vm)
        plan, gone, after = planner.plan_destroy(s.snap, dom, s.domains().users(besides=vm), uuid=uuid, all_=all_,
                                                 drivers=load_drivers(s.root.path))  # fmt: skip
        if any("mig_instance" in a.extra for a in gone):  # the GPU instances vgpuadm made for them go after them
            release = mig_mode.MODE.plan_release(s.snap, _mig_gpus(s), gone)
            plan = Plan(plan.steps + tuple(release), plan.summary)
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(
            vm, s.uri, plan, dry_run, after, removed=gone, hostdevs=[xml.hostdev_for(a) for a in gone],
            message=plan.summary if gone else f"domain {vm} owns no vgpuadm devices",
        )  # fmt: skip


# -- passthrough / release -------------------------------------------------------------------------------------------


def passthrough(
    root: str | None,
    gpu: str,
    vm: str,
    *,
    connect: str | None = None,
    force: bool = False,
    rom_file: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    on_demand: bool = False,
) -> GuestResult:
    with Session.open(root, connect) as s:
        dom = s.domain_xml(vm)
        plan, added, after = planner.plan_passthrough(s.snap, dom, gpu, s.domains().users(besides=vm), force=force,
                                                      rom_file=rom_file, on_demand=on_demand,
                                                      running=vm in s.domains().running)  # fmt: skip
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(vm, s.uri, plan, dry_run, after, added,
                           hostdevs=[xml.hostdev_for(a) for a in added], message=plan.summary)  # fmt: skip


def release(
    root: str | None,
    gpu: str,
    *,
    connect: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GuestResult:
    """Take a passed-through GPU back from whichever domain has it (per vgpuadm metadata) and give it back to its
    host drivers. With no domain holding it, only the drivers are restored."""
    gpu = str(xml.PciAddress.parse(gpu))
    with Session.open(root, connect) as s:
        if gpu not in s.snap.functions:
            raise NotFoundError(
                f"No PCI function {gpu} on this host", s.snap.skipped(gpu, "run `vgpuadm gpus` to list GPUs")
            )
        plan, holders, gone = planner.plan_release(s.snap, s.domains(), gpu, load_drivers(s.root.path))
        s.execute(plan, dry_run=dry_run, progress=progress)
        return GuestResult(", ".join(holders) or "no domain", s.uri, plan, dry_run, [], removed=gone,
                           hostdevs=[xml.hostdev_for(a) for a in gone], message=plan.summary)  # fmt: skip
