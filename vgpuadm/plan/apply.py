"""`apply -f`: the steps that take the domains from what they own to what a plan file says. Pure.

One persistent libvirt definition per changed domain (hostdevs plus metadata): a domain that loses devices is
redefined before the kernel frees them, one that gains devices after the kernel made them (a domain that does both
is redefined twice). Order: virtio-gl taken away, those definitions, removals, parameters, creates, virtio-gl given
(the definition's <video>/<graphics> edit, no kernel change), the gaining domains' definitions. Every VM is placed
before anything runs, against a projected snapshot (capacity after the removals and the earlier VMs' creates), so
a plan that needs more than the host has fails with the host untouched. Each VM's devices are planned by the one
guest planner (plan/guest.py give_vgpus, give_passthrough, give_virtio_gl), as `create` and `passthrough` plan them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Sequence

from vgpuadm import modes
from vgpuadm.catalog import capacity
from vgpuadm.catalog.capacity import consume, release
from vgpuadm.catalog.mig import MigHost
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, UsageError, VgpuadmError
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan.desired import DesiredPlan, Diff, describe_allocation
from vgpuadm.plan.devices import resolve_on_host
from vgpuadm.plan.domains import Domains, with_recorded
from vgpuadm.plan.guest import (
    Target,
    define_step,
    give_passthrough,
    give_vgpus,
    give_virtio_gl,
    pci_taken,
    remove_steps,
)
from vgpuadm.steps import Plan, Step
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
    mig: MigHost = device_plans.NO_MIG,
) -> Plan:  # fmt: skip
    """Steps for a diff: the losing domains' definitions and the removals first (then the GPU instances vgpuadm made
    for the removed vGPUs), then parameters, then the creates (each MIG-backed vGPU after what it needs: MIG mode on,
    its GPU instance; plan/devices.py) and the gaining domains' definitions. Placement runs for every VM before anything
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
    released, mig = device_plans.mig_release(snap, mig, d.removes)
    vsnap = with_recorded(release(snap, d.removes), doms, besides=d.removes)
    idle = capacity.idle(snap)
    taken = pci_taken(doms.users(), d.removes)
    virtio_on: list[Step] = []
    for add in d.adds:
        vm, spec = add.vm, add.spec
        target = Target(vm, doms.uuids[vm], doms.xml.get(vm, "<domain/>"), owned.setdefault(vm, []))
        if add.virtio_gl:
            try:
                given = give_virtio_gl(snap, target, spec.virtio_gl_gpu)
            except VgpuadmError as exc:
                raise _located(plan_doc, vm, "virtio_gl", exc) from None
        elif add.address:
            try:
                given = give_passthrough(vsnap, target, add.address, taken, force=spec.force, on_demand=spec.on_demand)
            except VgpuadmError as exc:
                raise _located(plan_doc, vm, "passthrough", exc) from None
            taken.update((a.address or "", vm) for a in given.added)
        else:
            hints = {"gpu": spec.gpu, "policy": spec.policy, "numa": spec.numa}
            ramfb = {"ramfb": "on"} if spec.display.enabled and spec.display.ramfb else {}
            display = ({"display": "on" if spec.display.enabled else "off", **ramfb} if spec.on_demand
                       else {"display": "on", **ramfb} if spec.display.enabled else {})  # fmt: skip
            [given], mig = give_vgpus(
                vsnap, [(target, add.count)], add.type_id or "", hints=hints, params=spec.params, display=display,
                taken=taken, have=[a.uuid or a.address or "" for a in target.owned if a.type_id == add.type_id],
                on_demand=spec.on_demand, idle=idle, mig=mig, turn_off="set display: {enabled: false}", gone=d.removes,
                at=functools.partial(_at, plan_doc, vm, "count" if "count" in spec.key_lines else "type"),
            )  # fmt: skip
            if not spec.on_demand:
                vsnap = consume(vsnap, given.added)
        steps.extend(given.steps)
        virtio_on.extend(given.edits)
        if given.hostdevs:
            attach.setdefault(vm, []).extend(given.hostdevs)
        target.owned.extend(given.added)
        changed.add(vm)
    first: list[Step] = []  # one definition per domain that loses devices, before the kernel frees them
    last: list[Step] = []  # one per domain that gains devices, after the kernel made them
    for vm in sorted(changed):
        final = sorted(owned.get(vm, []), key=lambda a: a.slot)
        previous = doms.metadata.get(vm, "")
        define = functools.partial(define_step, vm, (), host=doms.host_key, label=describe_allocation)
        if vm in attach:
            middle = sorted(between.get(vm, []), key=lambda a: a.slot)
            if vm in detach:
                first.append(define(middle, previous=previous, detach=detach[vm]))
                previous = metadata_xml(middle, doms.host_key) if middle else ""
            last.append(define(final, previous=previous, attach=attach[vm]))
        elif vm in detach or not same_metadata(previous or None, metadata_xml(final, doms.host_key) if final else None):
            first.append(define(final, previous=previous, detach=detach.get(vm, [])))
    steps = [*virtio_off, *first, *remove_steps(snap, list(d.removes), drivers), *released, *steps, *virtio_on, *last]
    summary = f"apply {plan_doc.source}: +{d.instances_needed} −{len(d.removes)} ~{len(d.set_params)}"
    return Plan.of(steps, summary)


@contextlib.contextmanager
def _at(plan_doc: DesiredPlan, vm: str, key: str, phase: str) -> Iterator[None]:
    """A phase of the guest planner (give_vgpus) for `vm`, its errors located at the plan file's line: placement's
    and MIG's at the VM's `count` (else `type`), the display check's at `display`."""
    kinds: tuple[type[VgpuadmError], ...] = {
        "placement": (CapacityError, NotFoundError, ConflictError),
        "mig": (CapacityError, NotFoundError, ConflictError, UsageError),
    }.get(phase, (VgpuadmError,))
    try:
        yield
    except kinds as exc:
        raise _located(plan_doc, vm, "display" if phase == "display" else key, exc) from None
