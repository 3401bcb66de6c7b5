"""The orchestration behind the declarative commands: `apply -f`, `restore`, `reconcile`, `mdevctl export|import`.

This sits at the API layer (vgpuadm.api re-exports it): it reads the host (discovery) and libvirt, asks the pure
parts (desired.py for the diff, restore.py for the order, placement and the modes for device steps) what to do,
and hands the resulting Plans to the executor. Nothing here writes to the host directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import desired as desired_mod
from vgpuadm import mdevctl
from vgpuadm import restore as restore_mod
from vgpuadm.desired import Current, DesiredPlan, Diff, check_safe, describe_allocation
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.model import Allocation, HostSnapshot, Layout, Mdev, VgpuType
from vgpuadm.steps import CreateMdev, Plan, SetVfVgpuType, SetVgpuParams, Step

Progress = Callable[[int, int, str], None]
Report = Callable[[str], None]


# -- libvirt side --------------------------------------------------------------------------------------------------


@dataclass
class Domains:
    """What libvirt says about every domain: vgpuadm allocations, identities, state and referenced devices."""

    allocations: list[Allocation] = field(default_factory=list)
    uuids: dict[str, str] = field(default_factory=dict)
    running: frozenset[str] = frozenset()
    referenced: set[str] = field(default_factory=set)  # mdev UUIDs and PCI addresses in any domain's hostdevs
    metadata: dict[str, str] = field(default_factory=dict)  # domain → its vgpuadm element ("" = none)
    xml: dict[str, str] = field(default_factory=dict)  # domain → its persistent XML

    def owned(self) -> set[str]:
        keys = set(self.referenced)
        for a in self.allocations:
            keys.update(k for k in (a.uuid, a.address, a.parent if a.mode == "vf" else None) if k)
        return keys


def _register_virt_handlers() -> None:
    from vgpuadm.executor import register
    from vgpuadm.virt.handlers import HANDLERS

    for step_cls, apply_fn, undo_fn, check in HANDLERS:
        register(step_cls, apply_fn, undo_fn, check)


@contextmanager
def open_virt(root: str, connect: str | None, simulated: bool) -> Iterator[Any]:
    from vgpuadm.virt.conn import VirtConn, choose_uri

    _register_virt_handlers()
    with VirtConn(choose_uri(connect, root, simulated)) as virt:
        yield virt


def read_domains(virt: Any) -> Domains:
    from vgpuadm.virt.xml import NS, parse_allocations, parse_hostdevs

    out = Domains()
    running = set()
    for name in virt.list_domains():
        xml = virt.xml(name)
        out.xml[name] = xml
        out.uuids[name] = virt.uuid(name)
        out.allocations.extend(parse_allocations(xml))
        out.referenced.update(ref.key for ref in parse_hostdevs(xml))
        out.metadata[name] = virt.get_metadata(name, NS) or ""
        if virt.is_active(name):
            running.add(name)
    out.running = frozenset(running)
    return out


def read_domain_files(directory: str) -> Domains:
    """Domains from saved or persistent XML files (restore at boot reads /etc/libvirt/qemu before libvirt runs)."""
    import glob
    import os

    from vgpuadm.virt.xml import parse_allocations, parse_hostdevs

    if not os.path.isdir(directory):
        raise UsageError(f"--domain-xml-dir {directory} is not a directory", "give the directory of domain XML files")
    out = Domains()
    for path in sorted(glob.glob(os.path.join(directory, "*.xml"))):
        try:
            with open(path, encoding="utf-8") as f:
                xml = f.read()
            out.allocations.extend(parse_allocations(xml))
            out.referenced.update(ref.key for ref in parse_hostdevs(xml))
        except OSError as exc:
            raise UsageError(f"cannot read domain XML {path}: {exc.strerror}", "check the file's permissions") from None
        except VgpuadmError as exc:
            raise UsageError(f"{path}: {exc.message}", exc.hint) from None
    return out


# -- apply -f --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplyResult:
    diff: Diff
    plan: Plan
    applied: tuple[str, ...]
    checked_only: bool

    def to_json(self) -> dict[str, Any]:
        """The `apply --json` document (vgpuadm/schemas/apply.schema.json)."""
        return {
            "changed": not self.checked_only and not self.plan.empty,
            "check": self.checked_only,
            "summary": self.plan.summary,
            "diff": self.diff.lines(),
            "untouched": list(self.diff.untouched),
            "steps": list(self.applied),
        }


def apply_plan(
    root: str,
    plan_file: str,
    *,
    connect: str | None = None,
    check: bool = False,
    prune: bool = False,
    progress: Progress | None = None,
) -> ApplyResult:
    """Make the host match a plan file. `check` computes the diff and the steps and changes nothing."""
    from vgpuadm.api import discover, exec_context, host_lock
    from vgpuadm.executor import execute
    from vgpuadm.identity import host_identity

    plan_doc = desired_mod.load_plan(plan_file)
    with host_lock(root):
        _refuse_pending(root)
        snap = discover(root)
        with open_virt(root, connect, snap.simulated) as virt:
            doms = read_domains(virt)
            for name, spec in plan_doc.vms.items():
                if name not in doms.uuids:
                    raise NotFoundError(
                        f"{plan_doc.source}:{spec.line}: vms.{name}: no libvirt domain named {name!r}",
                        "define the domain first (virsh define) or fix the name in the plan",
                    )
            resolved = _resolve_types(plan_doc, snap, doms.allocations)
            d = desired_mod.diff(plan_doc, Current(doms.allocations, doms.running), resolved, prune=prune)
            check_safe(d, doms.running)
            plan = build_apply_plan(plan_doc, d, snap, doms, host_identity(root))
            if check or plan.empty:
                return ApplyResult(d, plan, tuple(plan.describe()), check)
            result = execute(plan, exec_context(root, virt), progress=progress)
            return ApplyResult(d, plan, result.applied, False)


def _refuse_pending(root: str) -> None:
    from vgpuadm.executor import JOURNAL, read_journal

    if read_journal(root) is not None:
        raise ConflictError(
            f"an interrupted change is pending in /{JOURNAL}",
            "run `vgpuadm reconcile` to roll it back (or `vgpuadm reconcile --finish` to complete it), then apply again",
        )


def _where(plan_doc: DesiredPlan, vm: str, key: str) -> str:
    spec = plan_doc.vms[vm]
    return f"{plan_doc.source}:{spec.line_of(key)}: vms.{vm}.{key}"


def _resolve_types(plan_doc: DesiredPlan, snap: HostSnapshot, allocations: Sequence[Allocation]) -> dict[str, str]:
    from vgpuadm.naming import resolve_type

    known_ids = {a.type_id for a in allocations if a.type_id}
    types = snap.types()
    out: dict[str, str] = {}
    for vm, spec in sorted(plan_doc.vms.items()):
        if not spec.type or spec.type in out:
            continue
        if spec.type in known_ids:  # already owned under this id: no need for the host to list it right now
            out[spec.type] = spec.type
            continue
        try:
            out[spec.type] = resolve_type(types, spec.type)[0].type_id
        except VgpuadmError as exc:
            raise type(exc)(f"{_where(plan_doc, vm, 'type')}: {exc.message}", exc.hint) from None
    return out


def consume(snap: HostSnapshot, created: Sequence[Allocation]) -> HostSnapshot:
    """The snapshot as it will be once `created` exist, so that the next VM's placement counts them (one type per
    GPU, one vGPU per VF, instances left)."""
    mdevs = dict(snap.mdevs)
    vfs = dict(snap.vendor_vfs)
    parents = dict(snap.mdev_parents)
    for a in created:
        if a.mode == "mdev" and a.uuid and a.parent and a.type_id:
            mdevs[a.uuid] = Mdev(a.uuid, a.type_id, a.parent)
            p = parents.get(a.parent)
            if p is not None:
                per_vf = p.layout == Layout.MDEV_VF
                types = tuple(
                    dataclasses.replace(t, available_instances=0 if per_vf else max(0, t.available_instances - 1))
                    if per_vf or t.type_id == a.type_id
                    else t
                    for t in p.types
                )
                parents[a.parent] = dataclasses.replace(p, types=types)
        elif a.mode == "vf" and a.address and a.type_id:
            vf = vfs.get(a.address)
            if vf is not None:
                vfs[a.address] = dataclasses.replace(vf, current_type=int(a.type_id.rsplit("-", 1)[-1]))
    return dataclasses.replace(snap, mdevs=mdevs, vendor_vfs=vfs, mdev_parents=parents)


def _freed(t: VgpuType, removed_type: str, per_vf: bool, idle: bool) -> int:
    """Instances of `t` left on its parent once one mdev of `removed_type` is gone. An idle NVIDIA GPU offers every
    type again at its full count (the one-type-per-GPU rule lifts); a layout B VF hosts one vGPU of any type."""
    if per_vf:
        return 1
    if idle and t.max_instances is not None:
        return t.max_instances
    return t.available_instances + 1 if t.type_id == removed_type else t.available_instances


def release(snap: HostSnapshot, gone: Sequence[Allocation]) -> HostSnapshot:
    """The snapshot as it will be once `gone` are removed, so that a VM switching types on one GPU can be placed
    (the old type no longer blocks the GPU, its instances are free again)."""
    mdevs = dict(snap.mdevs)
    vfs = dict(snap.vendor_vfs)
    parents = dict(snap.mdev_parents)
    for a in gone:
        m = mdevs.pop(a.uuid or "", None) if a.mode == "mdev" else None
        if m is not None and m.parent in parents:
            p = parents[m.parent]
            per_vf = p.layout == Layout.MDEV_VF
            idle = not any(x.parent == m.parent for x in mdevs.values())

            types = tuple(
                dataclasses.replace(t, available_instances=_freed(t, m.type_id, per_vf, idle)) for t in p.types
            )
            parents[m.parent] = dataclasses.replace(p, types=types)
        if a.mode == "vf" and a.address in vfs:
            vfs[a.address] = dataclasses.replace(vfs[a.address], current_type=0)
    return dataclasses.replace(snap, mdevs=mdevs, vendor_vfs=vfs, mdev_parents=parents)


def build_apply_plan(plan_doc: DesiredPlan, d: Diff, snap: HostSnapshot, doms: Domains, host_id: str) -> Plan:
    """Steps for a diff: detach and remove first, then parameters, then create and attach, then one metadata write
    per changed domain. Placement runs for every VM before anything executes, so a plan that needs more instances
    than exist fails here, with the host untouched."""
    from vgpuadm.api import plan_create
    from vgpuadm.guest import free_slots, remove_steps
    from vgpuadm.identity import device_uuid
    from vgpuadm.virt.steps import AttachHostdev, DetachHostdev, SetMetadata
    from vgpuadm.virt.xml import hostdev_for, metadata_for_libvirt, same_metadata

    steps: list[Step] = []
    owned: dict[str, list[Allocation]] = {}
    for a in doms.allocations:
        owned.setdefault(a.domain, []).append(a)
    changed: set[str] = set()
    for a in d.removes:
        steps.append(DetachHostdev(a.domain, hostdev_for(a), describe_allocation(a)))
    steps.extend(remove_steps(snap, list(d.removes)))
    for a in d.removes:
        owned[a.domain] = [x for x in owned[a.domain] if x is not a]
        changed.add(a.domain)
    for p in d.set_params:
        a = p.allocation
        kind, ident = ("mdev", a.uuid) if a.mode == "mdev" else ("vf", a.address)
        current = snap.mdevs[a.uuid].vgpu_params if a.mode == "mdev" and a.uuid in snap.mdevs else None
        if a.mode == "vf" and a.address in snap.vendor_vfs:
            current = snap.vendor_vfs[a.address].vgpu_params
        steps.append(SetVgpuParams(kind, ident or "", p.params, previous=current or ""))
        owned[a.domain] = [dataclasses.replace(x, params=p.params or None) if x is a else x for x in owned[a.domain]]
        changed.add(a.domain)
    vsnap = release(snap, d.removes)
    taken = doms.owned() - {k for a in d.removes for k in (a.uuid, a.address) if k}
    for add in d.adds:
        vm, spec = add.vm, add.spec
        domain_uuid = doms.uuids[vm]
        mine = owned.setdefault(vm, [])
        if add.address:
            try:
                created, bind = _passthrough(vsnap, vm, domain_uuid, add.address, mine, doms, taken)
            except VgpuadmError as exc:
                raise type(exc)(f"{_where(plan_doc, vm, 'passthrough')}: {exc.message}", exc.hint) from None
            steps.extend(bind)
            steps.extend(AttachHostdev(vm, hostdev_for(a), describe_allocation(a)) for a in created)
            mine.extend(created)
            taken.update(a.address or "" for a in created)
            changed.add(vm)
            continue
        slots = free_slots({a.slot for a in mine}, add.count)
        uuids = [device_uuid(host_id, domain_uuid, s) for s in slots]
        try:
            sub, _ids = plan_create(
                vsnap, add.type_id or "", add.count, gpu=spec.gpu, policy=spec.policy, numa=spec.numa,
                params=spec.params, uuids=uuids,
            )  # fmt: skip
        except (CapacityError, NotFoundError, ConflictError) as exc:
            key = "count" if "count" in spec.key_lines else "type"
            raise type(exc)(f"{_where(plan_doc, vm, key)}: {exc.message}", exc.hint) from None
        created = _allocations_of(sub.steps, vm, domain_uuid, slots, spec)
        steps.extend(sub.steps)
        for alloc in created:
            steps.append(AttachHostdev(vm, hostdev_for(alloc), describe_allocation(alloc)))
        mine.extend(created)
        vsnap = consume(vsnap, created)
        changed.add(vm)
    for vm in sorted(changed):
        devices = sorted(owned.get(vm, []), key=lambda a: a.slot)
        element = metadata_for_libvirt(devices) if devices else ""
        previous = doms.metadata.get(vm, "")
        if not same_metadata(previous or None, element or None):
            steps.append(SetMetadata(vm, element, previous, len(devices)))
    summary = f"apply {plan_doc.source}: +{d.instances_needed} −{len(d.removes)} ~{len(d.set_params)}"
    return Plan.of(steps, summary)


def _passthrough(
    snap: HostSnapshot, vm: str, domain_uuid: str, gpu: str, mine: list[Allocation], doms: Domains, taken: set[str]
) -> tuple[list[Allocation], list[Step]]:
    """Give `gpu` and the rest of its IOMMU group to `vm`: vfio-pci bind steps and one allocation per function, as
    `vgpuadm passthrough` records them (one guest slot, function numbers kept, multifunction on function 0)."""
    from vgpuadm.api import plan_vfio_bind
    from vgpuadm.guest import passthrough_allocations, passthrough_functions

    functions = passthrough_functions(snap, gpu)
    for f in functions:
        if f in taken:
            raise ConflictError(f"{f} is already given to another domain", "take it back from that domain first")
    created = passthrough_allocations(snap, vm, domain_uuid, doms.xml.get(vm, "<domain/>"), gpu, functions, mine)
    return created, list(plan_vfio_bind(snap, gpu).steps)


def _allocations_of(steps: Sequence[Step], vm: str, domain_uuid: str, slots: list[int], spec: Any) -> list[Allocation]:
    """The devices a create plan makes, as the allocations the domain will record (slot order = creation order)."""
    extra = {}
    if spec.display.enabled:
        extra["display"] = "on"
        if spec.display.ramfb:
            extra["ramfb"] = "on"
    out: list[Allocation] = []
    for step in steps:
        slot = slots[len(out)] if len(out) < len(slots) else len(out)
        if isinstance(step, CreateMdev):
            out.append(Allocation(vm, "mdev", step.type_id, step.parent, step.uuid, params=spec.params or None,
                                  domain_uuid=domain_uuid, slot=slot, extra=dict(extra)))  # fmt: skip
        elif isinstance(step, SetVfVgpuType):
            out.append(Allocation(vm, "vf", f"nvidia-{step.type_num}", step.vf, address=step.vf,
                                  params=spec.params or None, domain_uuid=domain_uuid, slot=slot))  # fmt: skip
    return out


# -- restore -----------------------------------------------------------------------------------------------------


@dataclass
class RestoreResult:
    done: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    devices: int = 0

    def to_json(self) -> dict[str, Any]:
        """The `restore --json` document (vgpuadm/schemas/restore.schema.json)."""
        return {"devices": self.devices, "done": self.done, "skipped": self.skipped, "problems": self.problems}


def restore(
    root: str,
    *,
    connect: str | None = None,
    domain_xml_dir: str | None = None,
    timeout: float = 60.0,
    report: Report | None = None,
) -> RestoreResult:
    """Rebuild every domain's devices after a reboot, phase by phase (restore.PHASES). Each device is its own unit:
    one that fails is rolled back and named in `problems`, the others still happen."""
    from vgpuadm.api import exec_context, open_sysfs, sriov_manage_present
    from vgpuadm.executor import execute, recover
    from vgpuadm.host.discover import snapshot

    sysfs = open_sysfs(root)
    say = report or (lambda _line: None)
    if domain_xml_dir:
        doms = read_domain_files(domain_xml_dir)
        virt_cm: Any = None
    else:
        virt_cm = open_virt(root, connect, sysfs.simulated)
    out = RestoreResult()
    with virt_cm if virt_cm is not None else _null() as virt:
        if virt is not None:
            doms = read_domains(virt)
        ctx = exec_context(root, virt)
        try:
            for line in recover(ctx):
                say(f"recovered: {line}")
        except VgpuadmError as exc:
            raise ConflictError(
                f"an interrupted change is pending and could not be rolled back: {exc.message}",
                "run `vgpuadm reconcile` once libvirt runs, then `vgpuadm restore` again",
            ) from None
        allocs = doms.allocations
        out.devices = len(allocs)
        sriov_manage = sriov_manage_present(sysfs.root)
        for phase in restore_mod.PHASES:
            snap = snapshot(sysfs)
            if phase == "vgpu" and restore_mod.missing_devices(allocs, snap) and not out.problems:
                missing = restore_mod.missing_devices(allocs, snap)
                say(f"waiting up to {timeout:g}s for {', '.join(missing)} to register")
                snap = restore_mod.wait_until(
                    lambda: snapshot(sysfs), lambda s: not restore_mod.missing_devices(allocs, s), timeout
                )
            pp = restore_mod.plan_phase(phase, allocs, snap, sriov_manage=sriov_manage)
            for line in pp.skipped:
                say(f"{phase}: skipped: {line}")
                out.skipped.append(line)
            for unit in pp.units:
                try:
                    execute(unit, ctx)
                except VgpuadmError as exc:
                    out.problems.append(f"{phase}: {exc.message}")
                    say(f"{phase}: FAILED: {exc.message}")
                    continue
                for step in unit.steps:
                    out.done.append(f"{phase}: {step.describe()}")
                    say(f"{phase}: {step.describe()}")
            out.problems.extend(f"{phase}: {p}" for p in pp.problems)
            for p in pp.problems:
                say(f"{phase}: cannot restore: {p}")
    return out


@contextmanager
def _null() -> Iterator[None]:
    yield None


# -- reconcile ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leak:
    kind: str  # mdev | vf | vfio
    id: str
    detail: str

    def describe(self) -> str:
        return f"{self.kind} {self.id} ({self.detail}) is owned by no domain"


def find_leaks(snap: HostSnapshot, owned: set[str], vfio_remembered: dict[str, str]) -> list[Leak]:
    """Devices that exist but no domain owns: mdevs, typed layout C VFs, and functions vgpuadm bound to vfio-pci."""
    leaks = [Leak("mdev", m.uuid, f"{m.type_id} on {m.parent}") for m in snap.mdevs.values() if m.uuid not in owned]
    leaks += [Leak("vf", vf.address, f"nvidia-{vf.current_type}") for vf in snap.vendor_vfs.values()
              if vf.in_use and vf.address not in owned]  # fmt: skip
    for addr in sorted(vfio_remembered):
        fn = snap.functions.get(addr)
        group = snap.group_members(addr)
        if fn is not None and fn.driver == "vfio-pci" and not owned.intersection(group):
            leaks.append(Leak("vfio", addr, f"bound to vfio-pci, was {vfio_remembered[addr] or 'unbound'}"))
    return sorted(leaks, key=lambda lk: (lk.kind, lk.id))


def leak_plan(snap: HostSnapshot, leaks: Sequence[Leak], vfio_remembered: dict[str, str]) -> Plan:
    from vgpuadm.api import plan_remove
    from vgpuadm.modes.passthrough import MODE as PASSTHROUGH

    steps: list[Step] = []
    done_groups: set[str] = set()
    for lk in leaks:
        if lk.kind in ("mdev", "vf"):
            steps.extend(plan_remove(snap, lk.id).steps)
        elif lk.id not in done_groups:
            done_groups.update(snap.group_members(lk.id))
            steps.extend(PASSTHROUGH.plan_restore(snap, lk.id, vfio_remembered))
    return Plan.of(steps, f"remove {len(leaks)} leaked device(s)")


@dataclass(frozen=True)
class ReconcileResult:
    recovered: tuple[str, ...]
    leaks: tuple[Leak, ...]
    fixed: tuple[str, ...]
    lost: tuple[str, ...]  # allocations whose device is missing (run `vgpuadm restore`)

    def to_json(self) -> dict[str, Any]:
        """The `reconcile --json` document (vgpuadm/schemas/reconcile.schema.json)."""
        return {
            "recovered": list(self.recovered),
            "leaks": [{"kind": lk.kind, "id": lk.id, "detail": lk.detail} for lk in self.leaks],
            "fixed": list(self.fixed),
            "lost": list(self.lost),
        }


def reconcile(root: str, *, connect: str | None = None, fix: bool = False, finish: bool = False) -> ReconcileResult:
    from vgpuadm.api import discover, exec_context, host_lock, original_drivers
    from vgpuadm.executor import execute, recover

    with host_lock(root):
        simulated = discover(root).simulated
        with open_virt(root, connect, simulated) as virt:
            ctx = exec_context(root, virt)
            recovered = recover(ctx, finish=finish)
            snap = discover(root)
            doms = read_domains(virt)
            remembered = original_drivers(root)
            leaks = find_leaks(snap, doms.owned(), remembered)
            fixed: tuple[str, ...] = ()
            if fix and leaks:
                fixed = execute(leak_plan(snap, leaks, remembered), ctx).applied
                snap = discover(root)
            lost = tuple(f"{a.domain}: {describe_allocation(a)}" for a in doms.allocations if _device_missing(a, snap))
    return ReconcileResult(tuple(recovered), tuple(leaks), fixed, lost)


def _device_missing(a: Allocation, snap: HostSnapshot) -> bool:
    if a.mode == "mdev":
        return a.uuid not in snap.mdevs
    if a.mode == "vf":
        vf = snap.vendor_vfs.get(a.address or "")
        return vf is None or f"nvidia-{vf.current_type}" != a.type_id
    return (a.address or "") not in snap.functions


# -- mdevctl -------------------------------------------------------------------------------------------------------


def mdevctl_export(
    root: str, *, connect: str | None = None, domain_xml_dir: str | None = None, from_host: bool = False
) -> list[tuple[mdevctl.Definition, bool]]:
    """Write an mdevctl definition (start=auto) for every mdev the domains own, or with `from_host` for every
    mdev that exists now. Returns each definition and whether its file changed."""
    from vgpuadm.api import discover

    snap = discover(root)
    if from_host:
        defs = [mdevctl.definition(m.parent, m.uuid, m.type_id, (m.vgpu_params or "").strip() or None)
                for m in snap.mdevs.values()]  # fmt: skip
    else:
        if domain_xml_dir:
            allocs = read_domain_files(domain_xml_dir).allocations
        else:
            with open_virt(root, connect, snap.simulated) as virt:
                allocs = read_domains(virt).allocations
        defs = [mdevctl.definition(a.parent, a.uuid, a.type_id, a.params)
                for a in allocs if a.mode == "mdev" and a.parent and a.uuid and a.type_id]  # fmt: skip
    defs.sort(key=lambda d: (d.parent, d.uuid))
    return [(d, mdevctl.write_definition(root, d)) for d in defs]


@dataclass(frozen=True)
class ImportResult:
    plan: Plan
    applied: tuple[str, ...]
    problems: tuple[str, ...]


def mdevctl_import(root: str, *, check: bool = False, include_manual: bool = False) -> ImportResult:
    """Create the mdevs that mdevctl definitions describe and that do not exist yet (start=auto ones, or all)."""
    from vgpuadm.api import apply, discover, host_lock
    from vgpuadm.modes.mdev import MODE as MDEV

    with host_lock(root):
        snap = discover(root)
        steps: list[Step] = []
        problems: list[str] = []
        vsnap = snap
        for d in mdevctl.read_definitions(root):
            if d.start != "auto" and not include_manual:
                continue
            if d.uuid in vsnap.mdevs:
                have = vsnap.mdevs[d.uuid]
                if (have.parent, have.type_id) != (d.parent, d.mdev_type):
                    problems.append(f"{d.host_path}: {d.uuid} exists as {have.type_id} on {have.parent}")
                continue
            parent = vsnap.mdev_parents.get(d.parent)
            t = next((t for t in parent.types if t.type_id == d.mdev_type), None) if parent else None
            if t is None:
                problems.append(f"{d.host_path}: no type {d.mdev_type} on parent {d.parent}")
                continue
            other = [k for k, _ in d.attrs if k != mdevctl.PARAMS_ATTR]
            if other:
                problems.append(f"{d.host_path}: attributes {', '.join(other)} are not supported; created without them")
            steps.extend(MDEV.plan_create(vsnap, t, d.uuid, d.params or ""))
            vsnap = consume(vsnap, [Allocation("", "mdev", d.mdev_type, d.parent, d.uuid)])
        plan = Plan.of(steps, "create mdevs from mdevctl definitions")
        if check or plan.empty:
            return ImportResult(plan, tuple(plan.describe()), tuple(problems))
        result = apply(plan, root)
        return ImportResult(plan, result.applied, tuple(problems))
