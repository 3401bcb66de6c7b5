"""Give devices to guests and take them back: `create`, `destroy`, `passthrough`, `release`, each ONE plan (kernel
steps + libvirt steps + the metadata record) run by the executor, so a failed attach rolls back the device it just
made. Reached through vgpuadm.api (the CLI and the Ansible module never import this directly).

What a domain owns is read from its vgpuadm <metadata> (vgpuadm.virt.xml.parse_allocations): the same create twice
makes nothing new, and mdev UUIDs derive from (host, domain UUID, slot) so they are stable across re-creation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from vgpuadm.errors import ConflictError, NotFoundError, UsageError
from vgpuadm.identity import device_uuid, host_identity
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.steps import CreateMdev, Plan, Step
from vgpuadm.virt import xml
from vgpuadm.virt.conn import VirtConn, choose_uri
from vgpuadm.virt.steps import AttachHostdev, DetachHostdev, SetMetadata

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


def open_virt(root: str, connect: str | None, simulated: bool) -> VirtConn:
    return VirtConn(choose_uri(connect, root, simulated))


def host_key(snap: HostSnapshot) -> str:
    """Who made a domain's devices, as recorded in its metadata: the machine-id on a real host; the root on a
    simulated one (several simulated hosts may share one libvirtd, with the same PCI addresses)."""
    return f"sim:{snap.root}" if snap.simulated else host_identity(snap.root)


def _metadata_step(
    domain: str, before: Sequence[Allocation], after: Sequence[Allocation], host: str, previous_host: str | None = None
) -> SetMetadata:
    return SetMetadata(
        domain,
        xml.metadata_for_libvirt(after, host) if after else "",
        xml.metadata_for_libvirt(before, previous_host or host) if before else "",
        len(after),
    )


def free_slots(used: Collection[int], n: int) -> list[int]:
    """The `n` lowest metadata slot numbers not in `used`."""
    out: list[int] = []
    slot = 0
    while len(out) < n:
        if slot not in used:
            out.append(slot)
        slot += 1
    return out


def _what(a: Allocation) -> str:
    if a.mode == xml.MODE_MDEV:
        return f"mdev {a.uuid} ({a.type_id})"
    if a.mode == xml.MODE_VF:
        return f"VF {a.address} ({a.type_id})"
    return f"PCI function {a.address}"


def _params(params: Sequence[str]) -> str:
    for p in params:
        if "=" not in p or not p.split("=", 1)[0]:
            raise UsageError(f"--param {p!r} is not key=value", "write --param frame_rate_limiter=0")
    return " ".join(params)


def _other_users(conn: VirtConn, domain: str, host: str) -> dict[tuple[str, str], str]:
    """(kind, key) of every hostdev of every OTHER domain of this host → that domain's name. Domains whose vgpuadm
    metadata names another host (another simulated root on a shared libvirtd) do not count."""
    out: dict[tuple[str, str], str] = {}
    for name in conn.list_domains():
        if name == domain:
            continue
        try:
            dom = conn.xml(name)
        except NotFoundError:  # undefined between listing and reading (a shared libvirtd)
            continue
        if xml.metadata_host(dom) not in (None, host):
            continue
        for ref in xml.parse_hostdevs(dom):
            out.setdefault((ref.kind, ref.key), name)
    return out


@contextmanager
def _session(root: str | None, connect: str | None) -> Iterator[tuple[HostSnapshot, VirtConn]]:
    """Under the host lock: a fresh snapshot and a libvirt connection for planning and executing."""
    from vgpuadm import api

    with api.host_lock(root):
        snap = api.discover(root)
        with open_virt(snap.root, connect, snap.simulated) as conn:
            yield snap, conn


def _execute(plan: Plan, sysfs_root: str, conn: VirtConn, dry_run: bool, progress: Progress | None) -> None:
    from vgpuadm import api

    api.apply(plan, sysfs_root, dry_run=dry_run, virt=conn, progress=progress)


# -- create ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainPlan:
    """One domain's part of a create: its own plan, the devices it adds and everything it owns afterwards."""

    name: str
    plan: Plan
    added: list[Allocation]
    after: list[Allocation]


@dataclass
class _Want:
    """One domain's share of a create plan."""

    name: str
    duuid: str
    owned: list[Allocation]
    slots: list[int]
    uuids: list[str]
    prev_host: str | None
    added: list[Allocation] = field(default_factory=list)


def plan_create_many(
    snap: HostSnapshot,
    requests: Sequence[tuple[str, int]],
    type_name: str,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
    display: bool = False,
    ramfb: bool = False,
    params: Sequence[str] = (),
) -> list[DomainPlan]:
    """Give each domain (its XML, the total count of `type_name` it should own) what it lacks. Every device is
    placed together (so the instances count against each other); each domain gets its own plan — create, attach,
    record — so that it succeeds or rolls back as a unit. Pure."""
    from vgpuadm import api
    from vgpuadm.naming import resolve_type

    if ramfb and not display:
        raise UsageError("--ramfb needs --display on", "ramfb shows firmware output on the vGPU's display")
    type_id = resolve_type(snap.types(), type_name)[0].type_id
    host_id = host_identity(snap.root)
    wants: list[_Want] = []
    seen: set[str] = set()
    for domain_xml, count in requests:
        if count < 1:
            raise UsageError(f"--count must be at least 1, not {count}", "ask for one or more devices")
        name, duuid = xml.domain_identity(domain_xml)
        if name in seen:
            raise UsageError(f"domain {name} is named twice", "give each domain once, with the total it should own")
        seen.add(name)
        owned = xml.parse_allocations(domain_xml)
        need = count - sum(1 for a in owned if a.type_id == type_id)
        slots = free_slots({a.slot for a in owned}, max(need, 0))
        w = _Want(name, duuid, owned, slots, [device_uuid(host_id, duuid, slot) for slot in slots],
                  xml.metadata_host(domain_xml))  # fmt: skip
        present = {(r.kind, r.key) for r in xml.parse_hostdevs(domain_xml)}
        for u in w.uuids:
            if ("mdev", u) in present:
                raise ConflictError(
                    f"domain {name} already has a hostdev for mdev {u} that its vgpuadm metadata does not record",
                    f"remove it (virsh edit {name}) or record it with `vgpuadm restore`",
                )
        wants.append(w)
    total = sum(len(w.slots) for w in wants)
    if total == 0:
        return [
            DomainPlan(w.name, Plan.of([], f"domain {w.name} already has "
                                           f"{sum(1 for a in w.owned if a.type_id == type_id)} × {type_id}"),
                       [], w.owned)
            for w in wants
        ]  # fmt: skip
    joined = _params(params)
    kernel, ids = api.plan_create(snap, type_id, total, gpu=gpu, policy=policy, numa=numa, params=joined,
                                  uuids=[u for w in wants for u in w.uuids])  # fmt: skip
    by_device: dict[str, list[Step]] = {}
    for s in kernel.steps:
        key = getattr(s, "uuid", None) or getattr(s, "id", None) or getattr(s, "vf", None)
        by_device.setdefault(str(key), []).append(s)
    parents = {s.uuid: s.parent for s in kernel.steps if isinstance(s, CreateMdev)}
    extra = {"display": "on" if display else "off", **({"ramfb": "on"} if ramfb else {})}
    devices = iter(ids)
    out = []
    for w in wants:
        kernel_steps: list[Step] = []
        attach: list[Step] = []
        for slot in w.slots:
            dev = next(devices)
            kernel_steps += by_device.pop(dev, [])
            if dev in parents:
                a = Allocation(w.name, xml.MODE_MDEV, type_id, parents[dev], uuid=dev, params=joined or None,
                               domain_uuid=w.duuid, slot=slot, extra=dict(extra))  # fmt: skip
            else:  # layout C: the device is the VF itself
                a = Allocation(w.name, xml.MODE_VF, type_id, dev, address=dev, params=joined or None,
                               domain_uuid=w.duuid, slot=slot)  # fmt: skip
            w.added.append(a)
            attach.append(AttachHostdev(w.name, xml.hostdev_for(a), _what(a)))
        after = sorted([*w.owned, *w.added], key=lambda a: a.slot)
        meta = _metadata_step(w.name, w.owned, after, host_key(snap), w.prev_host)
        steps = [*kernel_steps, *attach, meta] if w.added else []
        summary = (
            f"give domain {w.name} {len(w.added)} × {type_id}"
            if w.added
            else f"domain {w.name} already has {sum(1 for a in w.owned if a.type_id == type_id)} × {type_id}"
        )
        out.append(DomainPlan(w.name, Plan.of(steps, summary), w.added, after))  # fmt: skip
    if by_device:  # every kernel step belongs to exactly one new device
        raise UsageError(f"unassigned create steps {sorted(by_device)}", "this is a bug in vgpuadm; report it")
    return out


def plan_create(
    snap: HostSnapshot, domain_xml: str, type_name: str, count: int = 1, **options: Any
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Plan `count` devices of `type_name` for one domain (count is the total the domain should own of that type).
    Returns the plan, the new allocations and everything the domain owns afterwards. Pure."""
    [one] = plan_create_many(snap, [(domain_xml, count)], type_name, **options)
    return one.plan, one.added, one.after


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
    from vgpuadm.errors import VgpuadmError

    with _session(root, connect) as (snap, conn):
        xmls = [(conn.xml(vm), count) for vm, count in requests]
        plans = plan_create_many(snap, xmls, type_name, **options)
        done: list[str] = []
        for p in plans:
            try:
                _execute(p.plan, snap.root, conn, dry_run, progress)
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
            GuestResult(p.name, conn.uri, p.plan, dry_run, p.after, p.added,
                        hostdevs=[xml.hostdev_for(a) for a in p.added], message=p.plan.summary)
            for p in plans
        ]  # fmt: skip


# -- destroy ---------------------------------------------------------------------------------------------------------


def remove_steps(snap: HostSnapshot, gone: Sequence[Allocation]) -> list[Step]:
    """Kernel steps that free the devices: remove mdevs, clear VFs, give passed-through GPUs back to their drivers."""
    from vgpuadm import api

    steps: list[Step] = []
    restored: set[str] = set()
    for a in gone:
        if a.mode == xml.MODE_MDEV and a.uuid and a.uuid in snap.mdevs:
            steps += api.plan_remove(snap, a.uuid).steps
        elif a.mode == xml.MODE_VF and a.address in snap.vendor_vfs and snap.vendor_vfs[a.address].in_use:
            steps += api.plan_vf_clear(snap, a.address).steps
        elif a.mode == xml.MODE_PCI and a.address:
            gpu = a.parent or a.address
            if gpu not in restored and gpu in snap.functions:
                restored.add(gpu)
                steps += api.plan_vfio_restore(snap, gpu).steps
    return steps


def plan_destroy(
    snap: HostSnapshot, domain_xml: str, others: dict[tuple[str, str], str], *, uuid: str | None, all_: bool
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Detach and free the selected devices of the domain; refuses devices another domain references. Pure."""
    name, _ = xml.domain_identity(domain_xml)
    owned = xml.parse_allocations(domain_xml)
    if all_ == (uuid is not None):
        raise UsageError("give exactly one of --uuid U or --all", "vgpuadm destroy --vm web01 --all")
    if all_:
        gone = list(owned)
    else:
        key = (uuid or "").lower()
        gone = [a for a in owned if key in ((a.uuid or "").lower(), (a.address or "").lower())]
        if not gone:
            raise NotFoundError(
                f"domain {name} owns no vgpuadm device {uuid}",
                f"list what it owns with `vgpuadm devices` or `virsh metadata {name} {xml.NS}`",
            )
        if gone[0].mode == xml.MODE_PCI:  # a passed-through GPU goes as a whole (GPU + audio …)
            gpu = gone[0].parent or gone[0].address
            gone = [a for a in owned if a.mode == xml.MODE_PCI and (a.parent or a.address) == gpu]
    for a in gone:
        ref = ("mdev", (a.uuid or "").lower()) if a.mode == xml.MODE_MDEV else ("pci", a.address or "")
        if ref in others:
            raise ConflictError(
                f"{_what(a)} is also used by domain {others[ref]}",
                f"detach it from {others[ref]} first, e.g. `vgpuadm destroy --vm {others[ref]} --all`",
            )
    present = {(r.kind, r.key) for r in xml.parse_hostdevs(domain_xml)}
    steps: list[Step] = []
    for a in gone:
        hostdev = xml.hostdev_for(a)
        ref = ("mdev", (a.uuid or "").lower()) if a.mode == xml.MODE_MDEV else ("pci", a.address or "")
        if ref in present:
            steps.append(DetachHostdev(name, hostdev, _what(a)))
    steps += remove_steps(snap, gone)
    after = [a for a in owned if a not in gone]
    if gone:
        steps.append(_metadata_step(name, owned, after, host_key(snap), xml.metadata_host(domain_xml)))
    return Plan.of(steps, f"take {len(gone)} device(s) from domain {name}"), gone, after


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
    with _session(root, connect) as (snap, conn):
        dom = conn.xml(vm)
        plan, gone, after = plan_destroy(snap, dom, _other_users(conn, vm, host_key(snap)), uuid=uuid, all_=all_)
        _execute(plan, snap.root, conn, dry_run, progress)
        return GuestResult(
            vm, conn.uri, plan, dry_run, after, removed=gone, hostdevs=[xml.hostdev_for(a) for a in gone],
            message=plan.summary if gone else f"domain {vm} owns no vgpuadm devices",
        )  # fmt: skip


# -- passthrough / release -------------------------------------------------------------------------------------------


def passthrough_functions(snap: HostSnapshot, gpu: str) -> list[str]:
    """The PCI functions that go to a guest with `gpu`: the GPU and the rest of its IOMMU group."""
    from vgpuadm.modes import passthrough

    return [m.address for m in passthrough.MODE.endpoints(snap, gpu)]


def passthrough_allocations(
    snap: HostSnapshot,
    vm: str,
    domain_uuid: str,
    domain_xml: str,
    gpu: str,
    functions: Sequence[str],
    owned: Sequence[Allocation],
    *,
    rom_file: str | None = None,
) -> list[Allocation]:
    """One allocation per function of a passed-through GPU: one free guest PCI slot, the host function numbers
    kept, multifunction on function 0 when there are several, each in its own free metadata slot. Pure."""
    base = xml.free_guest_slot(domain_xml)
    slots = free_slots({a.slot for a in owned}, len(functions))
    out = []
    for i, (f, slot) in enumerate(zip(functions, slots, strict=True)):
        extra = {
            "managed": "yes",
            "guest_address": str(xml.PciAddress(0, 0, base.slot, i)),
            "host_driver": snap.functions[f].driver or "",
        }
        if i == 0 and len(functions) > 1:
            extra["multifunction"] = "on"
        if rom_file and i == 0:
            extra["rom_file"] = rom_file
        out.append(Allocation(vm, xml.MODE_PCI, None, gpu, address=f, domain_uuid=domain_uuid, slot=slot, extra=extra))
    return out


def plan_passthrough(
    snap: HostSnapshot,
    domain_xml: str,
    gpu: str,
    others: dict[tuple[str, str], str],
    *,
    force: bool = False,
    rom_file: str | None = None,
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Bind the GPU's whole IOMMU group to vfio-pci and attach its functions as one guest slot. Pure."""
    from vgpuadm import api

    gpu = str(xml.PciAddress.parse(gpu))
    name, duuid = xml.domain_identity(domain_xml)
    owned = xml.parse_allocations(domain_xml)
    functions = passthrough_functions(snap, gpu)
    mine = {a.address for a in owned if a.mode == xml.MODE_PCI}
    if set(functions) <= mine:
        return Plan.of([], f"domain {name} already has {gpu}"), [], owned
    for f in functions:
        if ("pci", f) in others:
            raise ConflictError(
                f"{f} is already given to domain {others[('pci', f)]}",
                f"take it back first: `vgpuadm destroy --vm {others[('pci', f)]} --uuid {gpu}` or `vgpuadm release "
                f"--gpu {gpu}`",
            )
    steps: list[Step] = list(api.plan_vfio_bind(snap, gpu, force).steps)
    added = passthrough_allocations(snap, name, duuid, domain_xml, gpu, functions, owned, rom_file=rom_file)
    steps += [AttachHostdev(name, xml.hostdev_for(a), _what(a)) for a in added]
    after = sorted([*owned, *added], key=lambda a: a.slot)
    steps.append(_metadata_step(name, owned, after, host_key(snap), xml.metadata_host(domain_xml)))
    return Plan.of(steps, f"pass {gpu} ({len(functions)} function(s)) through to domain {name}"), added, after


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
) -> GuestResult:
    with _session(root, connect) as (snap, conn):
        dom = conn.xml(vm)
        plan, added, after = plan_passthrough(snap, dom, gpu, _other_users(conn, vm, host_key(snap)), force=force,
                                              rom_file=rom_file)  # fmt: skip
        _execute(plan, snap.root, conn, dry_run, progress)
        return GuestResult(vm, conn.uri, plan, dry_run, after, added,
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
    from vgpuadm import api

    gpu = str(xml.PciAddress.parse(gpu))
    with api.host_lock(root):
        snap = api.discover(root)
        if gpu not in snap.functions:
            raise NotFoundError(f"No PCI function {gpu} on this host", "run `vgpuadm gpus` to list GPUs")
        with open_virt(snap.root, connect, snap.simulated) as conn:
            steps: list[Step] = []
            holders: list[str] = []
            gone: list[Allocation] = []
            host = host_key(snap)
            for name in conn.list_domains():
                try:
                    dom = conn.xml(name)
                except NotFoundError:  # undefined between listing and reading (a shared libvirtd)
                    continue
                if xml.metadata_host(dom) not in (None, host):
                    continue  # another (simulated) host's domain on a shared libvirtd
                owned = xml.parse_allocations(dom)
                mine = [a for a in owned if a.mode == xml.MODE_PCI and (a.parent or a.address) == gpu]
                if not mine:
                    continue
                holders.append(name)
                present = {(r.kind, r.key) for r in xml.parse_hostdevs(dom)}
                steps += [DetachHostdev(name, xml.hostdev_for(a), _what(a)) for a in mine
                          if ("pci", a.address) in present]  # fmt: skip
                steps.append(
                    _metadata_step(name, owned, [a for a in owned if a not in mine], host, xml.metadata_host(dom))
                )
                gone += mine
            steps += api.plan_vfio_restore(snap, gpu).steps
            holder = ", ".join(holders) or "no domain"
            plan = Plan.of(steps, f"release {gpu} from {holder}")
            _execute(plan, snap.root, conn, dry_run, progress)
            return GuestResult(holder, conn.uri, plan, dry_run, [], removed=gone,
                               hostdevs=[xml.hostdev_for(a) for a in gone], message=plan.summary)  # fmt: skip
