"""`apply -f`: the steps that take the domains from what they own to what a plan file says. Pure.

One persistent libvirt definition per changed domain (hostdevs plus metadata): a domain that loses devices is
redefined before the kernel frees them, one that gains devices after the kernel made them (a domain that does both
is redefined twice). Order: virtio-gl taken away, those definitions, removals, parameters, creates, virtio-gl given
(the definition's <video>/<graphics> edit, no kernel change), the gaining domains' definitions. Every VM is placed
before anything runs, against a projected snapshot (capacity after the removals and the earlier VMs' creates), so
a plan that needs more than the host has fails with the host untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog import capacity
from vgpuadm.catalog.capacity import consume, release
from vgpuadm.catalog.mig import MigHost
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.model import PCI_KEY, Allocation, HostSnapshot, device_uuid
from vgpuadm.modes import passthrough as passthrough_mode
from vgpuadm.modes import virtio_gpu
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import mig as plan_mig
from vgpuadm.plan.desired import DesiredPlan, Diff, describe_allocation
from vgpuadm.plan.domains import Domains, device_keys, with_recorded
from vgpuadm.plan.guest import (
    check_display,
    define_step,
    free_slots,
    on_demand_allocations,
    on_demand_passthrough,
    passthrough_allocations,
    passthrough_functions,
    remove_steps,
    virtio_gl_allocation,
)
from vgpuadm.plan.placement import resolve_on_host
from vgpuadm.steps import Plan, Step
from vgpuadm.virt.steps import DefineDomain
from vgpuadm.virt.xml import metadata_xml, same_metadata


def _located(plan_doc: DesiredPlan, vm: str, key: str, exc: VgpuadmError) -> VgpuadmError:
    """`exc` with the place in the plan file its message is about; a plan with no lines (made from data, e.g. by
    the Ansible module for one VM) has no place to name, and keeps vgpuadm's own words."""
    line = plan_doc.vms[vm].line_of(key)
    if not line:
        return exc
    exc.message = f"{plan_doc.source}:{line}: vms.{vm}.{key}: {exc.message}"  # the hint and its blockers stay
    exc.args = (exc.message,)
    return exc


def resolve_types(plan_doc: DesiredPlan, snap: HostSnapshot, allocations: Sequence[Allocation]) -> dict[str, str]:

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
            out[spec.type] = resolve_on_host(snap, types, spec.type)[0].type_id
        except VgpuadmError as exc:
            raise _located(plan_doc, vm, "type", exc) from None
    return out


def build_apply_plan(
    plan_doc: DesiredPlan, d: Diff, snap: HostSnapshot, doms: Domains, drivers: dict[str, str],
    mig: MigHost = plan_mig.NONE,
) -> Plan:  # fmt: skip
    """Steps for a diff: the losing domains' definitions and the removals first (then the GPU instances vgpuadm made
    for the removed vGPUs), then parameters, then the creates (each MIG-backed vGPU after what it needs: MIG mode on,
    its GPU instance; plan/mig.py) and the gaining domains' definitions. Placement runs for every VM before anything
    executes, so a plan that needs more instances than exist fails here, with the host untouched. `mig`: the MIG
    state (read when a type or a removal needs it)."""

    steps: list[Step] = []  # parameters, then creates (removals and the definitions are put around them below)
    owned: dict[str, list[Allocation]] = {}
    for a in doms.allocations:
        owned.setdefault(a.domain, []).append(a)
    changed: set[str] = set()
    detach: dict[str, list[tuple[Allocation, str]]] = {}
    attach: dict[str, list[Allocation]] = {}
    # a virtio-gl device is the domain's <video>/<graphics>, not a hostdev: its own step takes it out
    virtio_off: list[Step] = []
    for a in d.removes:
        if (off := modes.of(a).definition_step(a, False)) is not None:
            virtio_off.append(off)
        else:
            detach.setdefault(a.domain, []).append((a, modes.hostdev_as_attached(a, doms.xml.get(a.domain, ""))))
    for a in d.removes:
        owned[a.domain] = [x for x in owned[a.domain] if x is not a]
        changed.add(a.domain)
    for p in d.set_params:
        a = p.allocation
        step = modes.of(a).params_step(snap, a, p.params)
        if step is not None and not a.on_demand:  # an on-demand device gets its params when the hook makes it
            steps.append(step)
        owned[a.domain] = [dataclasses.replace(x, params=p.params or None) if x is a else x for x in owned[a.domain]]
        changed.add(a.domain)
    between = {vm: list(owned.get(vm, [])) for vm in changed}  # what each domain records before the creates
    released, mig = plan_mig.release(snap, mig, d.removes)
    vsnap = with_recorded(release(snap, d.removes), doms, besides=d.removes)
    idle = capacity.idle(snap)
    taken = doms.owned() - {k for a in d.removes for k in (a.uuid, a.address) if k}
    users = doms.users()
    gone_keys = {k for a in d.removes for k in device_keys(a)}
    taken_pci = {key: name for (kind, key), name in users.items() if kind == PCI_KEY and (kind, key) not in gone_keys}
    virtio_on: list[Step] = []
    for add in d.adds:
        vm, spec = add.vm, add.spec
        domain_uuid = doms.uuids[vm]
        mine = owned.setdefault(vm, [])
        if add.virtio_gl:
            try:
                a = virtio_gl_allocation(snap, doms.xml.get(vm, "<domain/>"), vm, domain_uuid, mine, spec.virtio_gl_gpu)
            except VgpuadmError as exc:
                raise _located(plan_doc, vm, "virtio_gl", exc) from None
            virtio_on.append(virtio_gpu.MODE.definition_step(a, True))
            mine.append(a)
            changed.add(vm)
            continue
        if add.address:
            try:
                created, bind = _passthrough(vsnap, vm, domain_uuid, add.address, mine, doms, taken, spec.force)
                if spec.on_demand:
                    passthrough_mode.MODE.validate(snap, add.address, spec.force)
                    created, bind = on_demand_passthrough(created, spec.force), []
            except VgpuadmError as exc:
                raise _located(plan_doc, vm, "passthrough", exc) from None
            steps.extend(bind)
            attach.setdefault(vm, []).extend(created)
            mine.extend(created)
            taken.update(a.address or "" for a in created)
            changed.add(vm)
            continue
        slots = free_slots({a.slot for a in mine}, add.count)
        uuids = [device_uuid(snap.machine_id, domain_uuid, s) for s in slots]
        if spec.on_demand:
            hints = {"gpu": spec.gpu, "policy": spec.policy, "numa": spec.numa}
            display = {"display": "on" if spec.display.enabled else "off",
                       **({"ramfb": "on"} if spec.display.enabled and spec.display.ramfb else {})}  # fmt: skip
            try:
                created = on_demand_allocations(idle, vm, domain_uuid, add.type_id or "", slots, uuids, hints,
                                                spec.params, display, taken_pci)  # fmt: skip
            except (CapacityError, NotFoundError, ConflictError) as exc:
                raise _located(plan_doc, vm, "count" if "count" in spec.key_lines else "type", exc) from None
            attach.setdefault(vm, []).extend(created)
            mine.extend(created)
            changed.add(vm)
            continue
        try:
            made, summary = device_plans.plan_devices(
                vsnap, add.type_id or "", add.count, gpu=spec.gpu, policy=spec.policy, numa=spec.numa,
                params=spec.params, uuids=uuids, taken=taken_pci,
                have=[a.uuid or a.address or "" for a in mine if a.type_id == add.type_id],  # count is the total
            )  # fmt: skip
        except (CapacityError, NotFoundError, ConflictError) as exc:
            key = "count" if "count" in spec.key_lines else "type"
            raise _located(plan_doc, vm, key, exc) from None
        sub = Plan.of([s for m in made for s in m.steps], summary)
        created = [m.allocation(vm, slot=slot, domain_uuid=domain_uuid, params=spec.params, display=_display(spec))
                   for m, slot in zip(made, slots, strict=False)]  # fmt: skip
        try:
            sub_steps, created, mig = plan_mig.for_vgpus(vsnap, mig, sub.steps, created)
        except (CapacityError, NotFoundError, ConflictError, UsageError) as exc:
            raise _located(plan_doc, vm, "count" if "count" in spec.key_lines else "type", exc) from None
        try:
            check_display(doms.xml.get(vm, "<domain/>"), created, turn_off="set display: {enabled: false}")
        except VgpuadmError as exc:
            raise _located(plan_doc, vm, "display", exc) from None
        steps.extend(sub_steps)
        attach.setdefault(vm, []).extend(created)
        mine.extend(created)
        vsnap = consume(vsnap, created)
        changed.add(vm)
    first: list[Step] = []  # one definition per domain that loses devices, before the kernel frees them
    last: list[Step] = []  # one per domain that gains devices, after the kernel made them
    for vm in sorted(changed):
        final = sorted(owned.get(vm, []), key=lambda a: a.slot)
        previous = doms.metadata.get(vm, "")
        if vm in attach:
            middle = sorted(between.get(vm, []), key=lambda a: a.slot)
            if vm in detach:
                first.append(_define(vm, detach[vm], [], previous, middle, doms.host_key))
                previous = metadata_xml(middle, doms.host_key) if middle else ""
            last.append(_define(vm, [], attach[vm], previous, final, doms.host_key))
        elif vm in detach or not same_metadata(previous or None, metadata_xml(final, doms.host_key) if final else None):
            first.append(_define(vm, detach.get(vm, []), [], previous, final, doms.host_key))
    steps = [*virtio_off, *first, *remove_steps(snap, list(d.removes), drivers), *released, *steps, *virtio_on, *last]
    summary = f"apply {plan_doc.source}: +{d.instances_needed} −{len(d.removes)} ~{len(d.set_params)}"
    return Plan.of(steps, summary)


def _define(
    vm: str,
    detach: list[tuple[Allocation, str]],
    attach: list[Allocation],
    previous: str,
    devices: list[Allocation],
    host: str,
) -> DefineDomain:
    return define_step(vm, (), devices, host, previous=previous, attach=attach, detach=detach,
                       label=describe_allocation)  # fmt: skip


def _passthrough(
    snap: HostSnapshot,
    vm: str,
    domain_uuid: str,
    gpu: str,
    mine: list[Allocation],
    doms: Domains,
    taken: set[str],
    force: bool = False,
) -> tuple[list[Allocation], list[Step]]:
    """Give `gpu` and the rest of its IOMMU group to `vm`: vfio-pci bind steps and one allocation per function, as
    `vgpuadm passthrough` records them (one guest slot, function numbers kept, multifunction on function 0)."""

    functions = passthrough_functions(snap, gpu)
    for f in functions:
        if f in taken:
            raise ConflictError(f"{f} is already given to another domain", "take it back from that domain first")
    created = passthrough_allocations(snap, vm, domain_uuid, doms.xml.get(vm, "<domain/>"), gpu, functions, mine)
    return created, list(device_plans.plan_vfio_bind(snap, gpu, force).steps)


def _display(spec: Any) -> dict[str, str]:
    """The display options a plan's device records (Made.allocation: only the modes that show one take them)."""
    if not spec.display.enabled:
        return {}
    return {"display": "on", **({"ramfb": "on"} if spec.display.ramfb else {})}
