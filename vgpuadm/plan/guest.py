"""The guest planners: give a domain devices (`create`), take them back (`destroy`), pass a whole GPU through and
release it. Pure: a snapshot, the domain's XML and the other domains' references in; one Plan out per domain —
kernel steps and ONE persistent libvirt definition (hostdevs plus metadata; before the kernel frees devices, after it
creates them) — so it succeeds or rolls back whole.

What a domain owns is read from its vgpuadm <metadata> (vgpuadm.virt.xml.parse_allocations): the same create twice
makes nothing new, and mdev UUIDs derive from (host, domain UUID, slot) so they are stable across re-creation.

This is the one guest planner: `create`, `passthrough` and `apply -f` (so the Ansible module) give a domain (Target)
devices through the same paths — give_vgpus, give_passthrough, give_virtio_gl, each returning per device what it
adds (Given) with the same conflict input (pci_taken), MIG path (plan/devices.mig_for_vgpus) and display check — and every
definition is ONE DefineDomain built by define_step (grow for a verb's domain; plan/apply.py orders a plan file's).
Each verb's change of one domain — given devices, or devices taken back by `destroy`, `release` and a
`create --total` below what it owns — is one plan_domain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog import capacity
from vgpuadm.catalog.mig import MigHost
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, UsageError
from vgpuadm.model import (
    MDEV_KEY,
    PCI_KEY,
    Allocation,
    DeviceMode,
    HostSnapshot,
    device_key,
    device_uuid,
    join_params,
    mdev_key,
    normalise_params,
    pci_address,
)
from vgpuadm.modes import passthrough as passthrough_mode
from vgpuadm.modes import virtio_gpu
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan.devices import check_count, check_host_count, place, resolve_on_host
from vgpuadm.plan.domains import Domains
from vgpuadm.steps import DefineDomain, Plan, Step
from vgpuadm.virt import xml

Users = dict[tuple[str, str], str]


def define_step(
    domain: str,
    before: Sequence[Allocation],
    after: Sequence[Allocation],
    host: str,
    previous_host: str | None = None,
    *,
    previous_changed: str | None = None,
    attach: Sequence[Allocation] = (),
    detach: Sequence[tuple[Allocation, str]] = (),
    previous: str | None = None,
    label: Callable[[Allocation], str] = modes.describe,
) -> DefineDomain:
    """The domain's whole change as one persistent definition — the one place a DefineDomain is built: `attach`
    hot-plugged/added, `detach` (allocation, its hostdev as attached now) taken out, and the metadata going from
    `before` (last changed at `previous_changed`, which an undo puts back; or the metadata element `previous` as
    it stands) to `after`. `label` names the devices in the step's description."""
    if previous is None:
        previous = xml.metadata_xml(before, previous_host or host, previous_changed) if before else ""
    return DefineDomain(
        domain,
        "".join(modes.hostdev_xml(a) for a in attach),
        "".join(hostdev for _, hostdev in detach),
        xml.metadata_xml(after, host) if after else "",
        previous,
        len(after),
        attached=", ".join(label(a) for a in attach),
        detached=", ".join(label(a) for a, _ in detach),
    )


def redefine_step(
    domain: str,
    before: Sequence[Allocation],
    after: Sequence[Allocation],
    host: str,
    domain_xml: str,
    *,
    attach: Sequence[Allocation] = (),
    detach: Sequence[tuple[Allocation, str]] = (),
) -> DefineDomain:
    """define_step for a domain whose current XML is at hand: the host and change time its metadata records now are
    what an undo puts back."""
    doc = xml.parse_domain(domain_xml)
    return define_step(domain, before, after, host, xml.metadata_host(doc),
                       previous_changed=xml.metadata_changed(doc), attach=attach, detach=detach)  # fmt: skip


def free_slots(used: Collection[int], n: int) -> list[int]:
    """The `n` lowest metadata slot numbers not in `used`."""
    out: list[int] = []
    slot = 0
    while len(out) < n:
        if slot not in used:
            out.append(slot)
        slot += 1
    return out


def _params(params: Sequence[str]) -> str:
    """--param values (each `k=v`, or a whole list in either form) as the canonical `k=v, k=v` that is written to
    vgpu_params and recorded in the domain's metadata."""
    for p in params:
        if "=" not in p or not p.split("=", 1)[0]:
            raise UsageError(f"--param {p!r} is not key=value", "write --param frame_rate_limiter=0")
    return normalise_params(join_params(params))


def check_display(domain_xml: str | Any, added: Sequence[Allocation], *, turn_off: str) -> None:
    """Refuse, while planning, to attach an mdev with display on to a domain whose persistent XML has no <graphics>
    element: libvirt would refuse the attach only after the kernel steps ran. Likewise more than one vGPU with
    ramfb on (libvirt refuses that definition: "Only one vgpu device can have 'ramfb' enabled"). The one check
    `create` and `apply -f` share; `turn_off` is how the user's own verb turns the display off."""
    name = xml.domain_identity(domain_xml)[0]
    if any(modes.of(a).display(a)[0] for a in added) and not xml.has_graphics(domain_xml):
        raise UsageError(
            f"domain {name} has no <graphics> device, which a vGPU with display on needs",
            f"add one (virsh edit {name}, then <graphics type='vnc'/> or <graphics type='spice'/> under <devices>), "
            f"or {turn_off}",
        )
    ramfb = sum(1 for a in added if modes.of(a).display(a)[1])
    if ramfb and ramfb + xml.count_ramfb(domain_xml) > 1:
        raise UsageError(
            f"domain {name} would have {ramfb + xml.count_ramfb(domain_xml)} vGPUs with ramfb on; libvirt allows one",
            "give ramfb to one vGPU of the domain (one device with ramfb, the others without)",
        )


# -- create ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainPlan:
    """One domain's part of a create: its own plan, the devices it adds and everything it owns afterwards."""

    name: str
    plan: Plan
    added: list[Allocation]
    after: list[Allocation]
    removed: list[Allocation] = field(default_factory=list)  # --total below what it owns: the newest of the type
    warnings: list[str] = field(default_factory=list)  # accepted, but worth saying (an on-demand that cannot start)


@dataclass(frozen=True)
class Target:
    """A domain the guest planner gives devices to: its name, UUID, persistent XML, what its metadata records, and
    the host and change time that metadata names (what an undo of its definition puts back)."""

    name: str
    uuid: str
    xml: str
    owned: list[Allocation]
    host: str | None = None
    changed: str | None = None

    @functools.cached_property
    def doc(self) -> Any:
        """The persistent XML parsed once, for every reading of it while planning (never edited)."""
        return xml.parse_domain(self.xml)

    @classmethod
    def read(cls, domain_xml: str) -> Target:
        doc = xml.parse_domain(domain_xml)  # once, for the readings
        name = doc.findtext("name") or ""
        t = cls(name, doc.findtext("uuid") or "", domain_xml, xml.parse_allocations(doc), xml.metadata_host(doc),
                xml.metadata_changed(doc, domain=name))  # fmt: skip
        t.__dict__["doc"] = doc  # what `doc` would parse again (cached_property keeps its value there)
        return t


@dataclass
class Given:
    """What the guest planner gives one domain, per device: each device's allocation (in its own metadata slot),
    the kernel steps that make the devices (MIG's prerequisites first), the definition edits of a device that is
    no <hostdev> (virtio-gl's <video>), and what is worth saying."""

    added: list[Allocation] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    edits: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def hostdevs(self) -> list[Allocation]:
        """The devices the domain's definition gets a <hostdev> for."""
        return [a for a in self.added if modes.of(a).hostdev]


def pci_taken(users: Users | None, gone: Collection[Allocation] = ()) -> dict[str, str]:
    """PCI address → the domain that references it, less the devices the plan takes away: the one conflict input of
    every verb that gives a domain devices (`create`, `passthrough`, `apply -f`). The domains being planned count
    too: a VF a domain's on-demand request names, or a function it holds, is never handed out again."""
    gone_keys = {k for a in gone for k in [modes.key(a)] if k is not None}
    return {
        key: name for (kind, key), name in (users or {}).items() if kind == PCI_KEY and (kind, key) not in gone_keys
    }


def _located(at: Callable[[str], AbstractContextManager[None]] | None, phase: str) -> AbstractContextManager[None]:
    return at(phase) if at is not None else contextlib.nullcontext()


def give_vgpus(
    snap: HostSnapshot, targets: Sequence[tuple[Target, int]], type_id: str, *, hints: dict[str, Any], params: str,
    display: Mapping[str, str], taken: dict[str, str], have: Sequence[str], on_demand: bool, idle: HostSnapshot,
    mig: MigHost, turn_off: str, gone: Collection[Allocation] = (),
    at: Callable[[str], AbstractContextManager[None]] | None = None, chosen: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[Given], MigHost]:  # fmt: skip
    """`count` more devices of `type_id` for each target domain, in its free metadata slots: the one vGPU path of
    `create` and `apply -f`. The mdev UUIDs derive from (host, domain UUID, slot) and must be free; every device is
    placed together (they count against each other); each domain's devices get what their MIG-backed vGPUs need
    (plan/devices.mig_for_vgpus, the MIG state carried from one domain to the next) and are checked against its display.
    `on_demand`: nothing is made; each request is placed on the `idle` host (it must fit once enough others stop),
    and a VF chosen now is added to `taken`. `gone`: the devices the same plan takes away first (their UUIDs are
    free). `at(phase)` ("placement", "mig", "display") wraps each phase's errors. `chosen`: per domain, the UUIDs
    its new devices take, in slot order, instead of derived ones (a moved domain keeps its source's where free)."""
    wants: list[tuple[Target, list[int], list[str]]] = []
    with _located(at, "placement"):
        for t, count in targets:
            slots = free_slots({a.slot for a in t.owned}, max(count, 0))
            uuids = [device_uuid(snap.machine_id, t.uuid, slot) for slot in slots]
            picked = list((chosen or {}).get(t.name, ()))[: len(uuids)]
            uuids = picked + uuids[len(picked) :]
            _check_free_uuids(snap, t, uuids, {a.uuid for a in gone if a.uuid})
            wants.append((t, slots, uuids))
    out = [Given() for _ in wants]
    if not any(slots for _, slots, _ in wants):
        return out, mig
    if on_demand:
        for (t, slots, uuids), given in zip(wants, out, strict=True):
            if not slots:
                continue
            before = dict(taken)
            with _located(at, "placement"):  # placed on the idle host: it fits once enough others stop
                placed, _ = device_plans.plan_devices(idle, type_id, len(slots), gpu=hints.get("gpu"),
                                                      policy=hints.get("policy") or "pack", numa=hints.get("numa"),
                                                      params=params, uuids=uuids, taken=taken)  # fmt: skip
            for slot, dev in zip(slots, placed, strict=True):  # each as its mode records a request (Made.request)
                given.added.append(dev.request(t.name, slot=slot, domain_uuid=t.uuid, params=params, display=display,
                                               options=request_options(hints)))  # fmt: skip
                if not dev.placed_at_start:  # the device the hostdev names is chosen now: taken from here on
                    taken[dev.device] = t.name
            given.warnings = _cannot_start_now(snap, t.name, type_id, len(slots), hints, before)
            with _located(at, "display"):
                check_display(t.doc, given.added, turn_off=turn_off)
        return out, mig
    with _located(at, "placement"):
        made = iter(device_plans.plan_devices(snap, type_id, sum(len(s) for _, s, _ in wants), gpu=hints.get("gpu"),
                                              policy=hints.get("policy") or "pack", numa=hints.get("numa"),
                                              params=params, uuids=[u for _, _, us in wants for u in us], taken=taken,
                                              have=have)[0])  # fmt: skip
    for (t, slots, _uuids), given in zip(wants, out, strict=True):
        kernel: list[Step] = []
        for slot in slots:
            dev = next(made)
            kernel += dev.steps
            given.added.append(dev.allocation(t.name, slot=slot, domain_uuid=t.uuid, params=params, display=display))
        if not given.added:
            continue
        with _located(at, "mig"):
            given.steps, given.added, mig = device_plans.mig_for_vgpus(snap, mig, kernel, given.added)
        with _located(at, "display"):
            check_display(t.doc, given.added, turn_off=turn_off)
    return out, mig


def _check_free_uuids(snap: HostSnapshot, t: Target, uuids: Sequence[str], freed: Collection[str]) -> None:
    """The UUIDs of a domain's next devices are its own: no hostdev of it names one its metadata does not record,
    and no mdev of the host has one (a leak) — but for those the plan frees first (`freed`)."""
    if not uuids:
        return
    present = {(r.kind, r.key) for r in xml.parse_hostdevs(t.doc)}
    for u in (u for u in uuids if u not in freed):
        if mdev_key(u) in present:
            raise ConflictError(
                f"domain {t.name} already has a hostdev for mdev {u} that its vgpuadm metadata does not record",
                f"remove it (virsh edit {t.name}) or record it with `vgpuadm restore`",
            )
        if u in snap.mdevs:  # the slot's UUID is taken by a device no metadata records (a leak)
            raise ConflictError(f"mdev {u}, the UUID of domain {t.name}'s next device, exists and no vgpuadm "
                                "metadata records it", "`vgpuadm reconcile --fix` removes it; then run this again")  # fmt: skip


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
    taken: Users | None = None,
    on_demand: bool = False,
    mig: MigHost = device_plans.NO_MIG,
    uuids: Sequence[str] = (),
) -> list[DomainPlan]:
    """Give each domain (its XML, the total count of `type_name` it should own) what it lacks, through the one vGPU
    path (give_vgpus): every device placed together, each domain its own plan — create, attach, record — so that it
    succeeds or rolls back as a unit. `taken`: every domain's references (Domains.users). `mig`: the MIG state, read
    when the type may need it. Pure.

    `on_demand`: nothing is made now; each domain's request is recorded (type, count, hints, params) with the
    hostdev it will use — the deterministic mdev UUID, or a layout C VF chosen now — and `vgpuadm hook run` makes
    the devices when the domain starts. Each request must fit the host with no vGPU running (capacity.idle).

    `uuids`: the mdev UUIDs one domain's new devices take, in slot order, where no mdev and no domain here has them
    (a domain moved from another host keeps its hostdevs' UUIDs: `migrate incoming`); else all are derived."""

    if ramfb and not display:
        raise UsageError("--ramfb needs --display on", "ramfb shows firmware output on the vGPU's display")
    if type_name.strip().lower() == virtio_gpu.TYPE:  # no host device: a virtio <video> on a render node
        return [_plan_virtio_gl(snap, domain_xml, count, gpu) for domain_xml, count in requests]
    type_id = resolve_on_host(snap, snap.types(), type_name)[0].type_id
    targets: list[tuple[Target, int]] = []
    shrink: dict[str, DomainPlan] = {}
    check_host_count(snap, sum(count for _, count in requests), "devices")
    for domain_xml, count in requests:
        check_count(count, "devices")
        t = Target.read(domain_xml)
        if any(t.name == u.name for u, _ in targets):
            raise UsageError(f"domain {t.name} is named twice", "give each domain once, with the total it should own")
        need = count - sum(1 for a in t.owned if a.type_id == type_id)
        if need < 0:  # --total is what the domain owns afterwards: the newest devices of the type go back
            newest = sorted((a for a in t.owned if a.type_id == type_id), key=lambda a: a.slot)[need:]
            others = {k: n for k, n in (taken or {}).items() if n != t.name}
            steps, after = plan_domain(snap, t, gone=newest, others=others)
            shrink[t.name] = DomainPlan(t.name, Plan.of(steps, f"take {len(newest)} × {type_id} from domain "
                                                               f"{t.name} (it keeps {count})"), [], after, newest)  # fmt: skip
        targets.append((t, need))
    growing = any(n > 0 for _, n in targets)
    joined = _params(params) if growing else ""
    kept = [a.uuid or a.address or "" for (t, _), (_, count) in zip(targets, requests, strict=True)
            for a in sorted((a for a in t.owned if a.type_id == type_id), key=lambda a: a.slot)[:count]]  # fmt: skip
    extra = {"display": "on" if display else "off", **({"ramfb": "on"} if ramfb else {})}
    hints = {"gpu": pci_address(gpu) if gpu and growing else None, "policy": policy, "numa": numa}
    if uuids and len(targets) != 1:
        raise UsageError("given UUIDs are for one domain", "give one domain")
    used = {key for kind, key in (taken or {}) if kind == MDEV_KEY} | set(snap.mdevs)
    free = [u for u in uuids if u not in used]
    chosen = {targets[0][0].name: free if len(free) == len(uuids) else []} if uuids else None  # all or none
    given, _mig = give_vgpus(snap, targets, type_id, hints=hints, params=joined, display=extra,
                             taken=pci_taken(taken), have=kept, on_demand=on_demand, idle=capacity.idle(snap)
                             if on_demand else snap, mig=mig, turn_off="use --display off", chosen=chosen)  # fmt: skip
    out = []
    for (t, _need), g in zip(targets, given, strict=True):
        if t.name in shrink:
            out.append(shrink[t.name])
        elif not g.added:
            has = f"domain {t.name} already has {sum(1 for a in t.owned if a.type_id == type_id)} × {type_id}"
            out.append(DomainPlan(t.name, Plan.of([], has), [], t.owned))
        else:
            steps, after = plan_domain(snap, t, gain=g)
            out.append(DomainPlan(t.name, Plan.of(steps, f"record {len(g.added)} × {type_id} on demand for domain "
                                                         f"{t.name}" if on_demand else f"give domain {t.name} "
                                                         f"{len(g.added)} × {type_id}"), g.added, after,
                                  warnings=g.warnings))  # fmt: skip
    return out


def request_options(hints: dict[str, Any]) -> dict[str, str]:
    """The metadata options that record an on-demand request and its placement hints (gpu, policy, numa)."""
    out = {"on_demand": "yes", "policy": str(hints.get("policy") or "pack")}
    if hints.get("gpu"):
        out["gpu"] = str(hints["gpu"])
    if hints.get("numa") is not None:
        out["numa"] = str(hints["numa"])
    return out


def _cannot_start_now(
    snap: HostSnapshot, vm: str, type_id: str, count: int, hints: dict[str, Any], taken: dict[str, str]
) -> list[str]:
    """An on-demand request fits the idle host (else it is refused); whether it fits now, as `create` would place
    it: when not, why (the domain would fail to start until the devices in its way are gone)."""
    try:
        place(snap, type_id, count, gpu=hints.get("gpu"), policy=hints.get("policy") or "pack",
              numa=hints.get("numa"), taken=taken)  # fmt: skip
    except CapacityError as exc:
        return [f"recorded {count} × {type_id} on demand for domain {vm}, but it cannot start now (fits now: 0): "
                f"{exc.message}"]  # fmt: skip
    return []


def give_virtio_gl(snap: HostSnapshot, t: Target, gpu: str | None) -> Given:
    """A virtio-gl device for domain `t`: the render node of `gpu` (canonical; else the lowest), the edit of the
    domain's <video>/<graphics> (SetVirtioGl), its record in the first free slot with the video model its <video>
    had (put back when it goes). The one virtio-gl path of `create` and `apply -f`."""
    node, gpu_address = virtio_gpu.MODE.pick(snap, gpu)
    path = virtio_gpu.render_path(node)
    previous = xml.with_virtio_gl(t.xml, path)[1]
    [slot] = free_slots({a.slot for a in t.owned}, 1)
    a = Allocation(t.name, DeviceMode.VIRTIO_GL, virtio_gpu.TYPE, gpu_address or None, domain_uuid=t.uuid, slot=slot,
                   extra={"rendernode": path, "graphics": "egl-headless", "previous_video": previous})  # fmt: skip
    return Given([a], edits=[step] if (step := virtio_gpu.MODE.definition_step(a, True)) is not None else [])


def _plan_virtio_gl(snap: HostSnapshot, domain_xml: str, count: int, gpu: str | None) -> DomainPlan:
    """create --type virtio-gl: one domain's virtio-gpu (give_virtio_gl). Pure."""
    check_count(count, "devices")
    if count != 1:
        raise UsageError(f"--count {count}: a domain has one virtio-gpu", "omit --count for --type virtio-gl")
    t = Target.read(domain_xml)
    if any(modes.of(a) is virtio_gpu.MODE for a in t.owned):
        return DomainPlan(t.name, Plan.of([], f"domain {t.name} already has a virtio-gpu"), [], t.owned)
    g = give_virtio_gl(snap, t, pci_address(gpu) if gpu else None)
    steps, after = plan_domain(snap, t, gain=g)
    return DomainPlan(t.name, Plan.of(steps, f"give domain {t.name} a virtio-gpu on {g.added[0].extra['rendernode']}"),
                      g.added, after)  # fmt: skip


def plan_create(
    snap: HostSnapshot, domain_xml: str, type_name: str, count: int = 1, **options: Any
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Plan `count` devices of `type_name` for one domain (count is the total the domain should own of that type).
    Returns the plan, the new allocations and everything the domain owns afterwards. Pure."""
    [one] = plan_create_many(snap, [(domain_xml, count)], type_name, **options)
    return one.plan, one.added, one.after


def remove_steps(snap: HostSnapshot, gone: Sequence[Allocation], drivers: dict[str, str]) -> list[Step]:
    """Kernel steps that free the devices, each from its mode: remove mdevs, clear VFs, give passed-through GPUs
    back to their drivers (`drivers`: the ones `vfio bind` remembered; a GPU's functions are given back once)."""
    steps: list[Step] = []
    for a in gone:
        steps += [s for s in modes.for_name(a.mode).plan_free(snap, a, drivers) if s not in steps]
    return steps


def plan_destroy(
    snap: HostSnapshot,
    domain_xml: str,
    others: Users,
    *,
    uuid: str | None,
    all_: bool,
    drivers: dict[str, str] | None = None,
    forget: bool = False,
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Detach and free the selected devices of the domain; refuses devices another domain references. Pure.
    `forget`: only drop the domain's claim (its hostdev and its record) and leave the device alone — for a copy of
    a VM that claims its original's device."""
    t = Target.read(domain_xml)
    name, owned = t.name, t.owned
    if all_ and uuid is not None:
        raise UsageError("give one of --uuid U or --all, not both", f"vgpuadm destroy --vm {name} --all")
    groups = _device_groups(owned)
    if all_ or (uuid is None and len(groups) <= 1):  # one device (or a whole passed-through GPU) needs no --uuid
        gone = list(owned)
    elif uuid is None:
        listed = ", ".join(key for key, _ in groups)
        raise UsageError(
            f"domain {name} owns {len(groups)} vgpuadm devices ({listed}); say which one",
            f"vgpuadm destroy --vm {name} --uuid {groups[0][0]}, or vgpuadm destroy --vm {name} --all",
        )
    else:
        key = device_key(uuid or "")
        chosen = next((g for handle, g in groups
                       if key == handle or any(key in ((a.uuid or "").lower(), (a.address or "").lower()) for a in g)),
                      None)  # fmt: skip
        if chosen is None:
            raise NotFoundError(
                f"domain {name} owns no vgpuadm device {uuid}",
                f"list what it owns with `vgpuadm devices` or `virsh metadata {name} {xml.NS}`",
            )
        gone = chosen  # a passed-through GPU goes as a whole (GPU + audio …): one handle
    if forget:
        steps, after = plan_domain(snap, t, gone=gone, free=False)
        steps, bare = _forget_copied_hostdevs(
            snap, domain_xml, owned, steps, others, device_key(uuid) if uuid else None
        )
        return Plan.of(steps, f"forget {len(gone) + bare} device(s) domain {name} claims"), gone, after
    steps, after = plan_domain(snap, t, gone=gone, others=others, drivers=drivers)
    return Plan.of(steps, f"take {len(gone)} device(s) from domain {name}"), gone, after


def _forget_copied_hostdevs(
    snap: HostSnapshot, domain_xml: str, owned: Sequence[Allocation], steps: list[Step], others: Users,
    only: str | None,
) -> tuple[list[Step], int]:  # fmt: skip
    """`destroy --forget` on a copy whose claim is a bare <hostdev> (a VM given its device by hand, then copied with
    `virsh dumpxml | virsh define`): the hostdevs it does not record that another domain claims too (only the one
    `only` names, when given) go out of its definition in the same DefineDomain; the device stays. Returns the steps
    and how many hostdevs go."""
    name = xml.domain_identity(domain_xml)[0]
    recorded = {k for a in owned if (k := modes.key(a)) is not None}
    keys = [(r.kind, r.key) for r in xml.parse_hostdevs(domain_xml)]
    bare = [k for k in dict.fromkeys(keys) if k not in recorded and k in others and only in (None, k[1])]
    if not bare:
        return steps, 0
    hostdevs = "".join(xml.hostdev_as_defined(domain_xml, k) for k in bare)
    labels = ", ".join(f"{kind} {ident}" for kind, ident in bare)
    define = next((s for s in steps if isinstance(s, DefineDomain)), None)
    if define is None:
        define = redefine_step(name, owned, owned, snap.host_key, domain_xml)
        steps = [*steps, define]
    joined = dataclasses.replace(define, detach=define.detach + hostdevs,
                                 detached=", ".join(x for x in (define.detached, labels) if x))  # fmt: skip
    return [joined if s is define else s for s in steps], len(bare)


def plan_domain(
    snap: HostSnapshot, t: Target, *, gain: Given | None = None, gone: Sequence[Allocation] = (),
    others: Users | None = None, drivers: dict[str, str] | None = None, free: bool = True,
) -> tuple[list[Step], list[Allocation]]:  # fmt: skip
    """The one change of one domain's devices every guest verb plans, and what it owns afterwards: what a give_*
    planner chose for it (`gain`) or the devices it loses (`gone`, refused for one another domain also references:
    `others`). In order: the edits of devices that are no <hostdev> (virtio-gl's <video>), the kernel steps that make
    the new devices, then ONE DefineDomain — hostdevs attached, the lost ones detached (and out of the running guest),
    everything the domain owns recorded — then, with `free`, the kernel steps that free the lost devices."""
    gain = gain or Given()
    for a in gone:
        ref = modes.key(a)
        if ref is not None and ref in (others or {}):
            other = (others or {})[ref]
            raise ConflictError(
                f"{modes.describe(a)} is also used by domain {other}",
                f"if one of {t.name} and {other} is a copy of the other, drop the copy's claim with "
                f"`vgpuadm destroy --vm COPY --forget` (the device and the other VM stay as they are)",
            )
    present = {(r.kind, r.key) for r in xml.parse_hostdevs(t.doc)} if gone else set()
    detach = [(a, modes.hostdev_as_attached(a, t.xml)) for a in gone if modes.key(a) in present]
    after = sorted([*(a for a in t.owned if a not in gone), *gain.added], key=lambda a: a.slot)
    steps: list[Step] = [s for a in gone if (s := modes.of(a).definition_step(a, False)) is not None]
    steps += [*gain.steps, *gain.edits]
    if gone or gain.added:
        steps.append(define_step(t.name, t.owned, after, snap.host_key, t.host, previous_changed=t.changed,
                                 attach=gain.hostdevs, detach=detach))  # fmt: skip
    if free:
        steps += remove_steps(snap, gone, drivers or {})
    return steps, after


def _device_groups(owned: Sequence[Allocation]) -> list[tuple[str, list[Allocation]]]:
    """The domain's devices as `destroy --uuid` names them: an mdev by UUID, a VF by address, a passed-through GPU
    (with the rest of its IOMMU group) by the GPU's address."""
    groups: dict[str, list[Allocation]] = {}
    for a in owned:
        groups.setdefault(modes.handle(a), []).append(a)
    return list(groups.items())


def passthrough_functions(snap: HostSnapshot, gpu: str) -> list[str]:
    """The PCI functions that go to a guest with `gpu`: the GPU and the rest of its IOMMU group."""

    return [m.address for m in passthrough_mode.MODE.endpoints(snap, gpu)]


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
    running: bool = False,
) -> list[Allocation]:
    """One allocation per function of a passed-through GPU: one free guest PCI slot, the host function numbers
    kept, multifunction on function 0 when there are several, each in its own free metadata slot. Pure.
    `running`: the device is hot-plugged, so libvirt picks its guest address (a slot on the root bus cannot be
    hot-plugged on q35), and a multifunction slot — which libvirt cannot hot-plug — is refused."""
    if running and len(functions) > 1:
        raise ConflictError(
            f"domain {vm} is running: {gpu}'s {len(functions)} functions go into one multifunction guest slot, "
            "which libvirt cannot hot-plug",
            f"shut it down (virsh shutdown {vm}) and run the command again",
        )
    base = None if running else xml.free_guest_slot(domain_xml)
    slots = free_slots({a.slot for a in owned}, len(functions))
    out = []
    for i, (f, slot) in enumerate(zip(functions, slots, strict=True)):
        extra = {"managed": "yes", "host_driver": snap.functions[f].driver or ""}
        if base is not None:
            extra["guest_address"] = str(xml.PciAddress(0, 0, base.slot, i))
        if i == 0 and len(functions) > 1:
            extra["multifunction"] = "on"
        if rom_file and i == 0:
            extra["rom_file"] = rom_file
        out.append(
            Allocation(vm, DeviceMode.PCI, None, gpu, address=f, domain_uuid=domain_uuid, slot=slot, extra=extra)
        )
    return out


def give_passthrough(
    snap: HostSnapshot, t: Target, gpu: str, taken: Mapping[str, str], *, force: bool = False,
    rom_file: str | None = None, on_demand: bool = False, running: bool = False,
) -> Given:  # fmt: skip
    """`gpu` (canonical) and the rest of its IOMMU group for domain `t`: the one passthrough path of `passthrough`
    and `apply -f`. Refused when a function is in `taken` (pci_taken); the vfio-pci bind steps and one allocation
    per function (passthrough_allocations). `on_demand`: bind nothing now; the hostdevs are managed='no' and
    `vgpuadm hook run` binds the group when the domain starts and gives it back when it stops."""
    functions = passthrough_functions(snap, gpu)
    for f in functions:
        if f in taken:
            raise ConflictError(
                f"{f} is already given to domain {taken[f]}",
                f"take it back first: `vgpuadm destroy --vm {taken[f]} --uuid {gpu}` or `vgpuadm release --gpu {gpu}`",
            )
    if on_demand:
        passthrough_mode.MODE.validate(snap, gpu, force)
        steps: list[Step] = []
    else:
        steps = list(passthrough_mode.MODE.plan_bind(snap, gpu, force))
    added = passthrough_allocations(snap, t.name, t.uuid, t.xml, gpu, functions, t.owned, rom_file=rom_file,
                                    running=running and not on_demand)  # fmt: skip
    if on_demand:  # recorded as a request: managed='no' (the hook binds the group)
        wanted = {"managed": "no", "on_demand": "yes", **({"force": "yes"} if force else {})}
        added = [dataclasses.replace(a, extra={**a.extra, **wanted}) for a in added]
    return Given(added, steps)


def plan_passthrough(
    snap: HostSnapshot,
    domain_xml: str,
    gpu: str,
    users: Users,
    *,
    force: bool = False,
    rom_file: str | None = None,
    on_demand: bool = False,
    running: bool = False,
) -> tuple[Plan, list[Allocation], list[Allocation]]:
    """Bind the GPU's whole IOMMU group to vfio-pci and attach its functions as one guest slot (hot-plugged when the
    domain is `running`), through give_passthrough; `users`: every domain's references (Domains.users). Pure."""

    gpu = pci_address(gpu)
    t = Target.read(domain_xml)
    if set(passthrough_functions(snap, gpu)) <= {a.address for a in t.owned if modes.of(a).whole_gpu}:
        return Plan.of([], f"domain {t.name} already has {gpu}"), [], t.owned
    g = give_passthrough(snap, t, gpu, pci_taken(users), force=force, rom_file=rom_file, on_demand=on_demand,
                         running=running)  # fmt: skip
    steps, after = plan_domain(snap, t, gain=g)
    return Plan.of(steps, f"pass {gpu} ({len(g.added)} function(s)) through to domain {t.name}"), g.added, after


def plan_release(snap: HostSnapshot, domains: Domains, gpu: str, drivers: dict[str, str]) -> tuple[Plan, list[str],
                                                                                                   list[Allocation]]:  # fmt: skip
    """Take passed-through `gpu` back from whichever domains hold it and give it back to its host drivers. Returns
    the plan, the holders and the allocations they lose. Pure."""
    steps: list[Step] = []
    holders: list[str] = []
    gone: list[Allocation] = []
    for name, d in sorted(domains.by_name.items()):
        mine = [a for a in d.allocations if modes.of(a).whole_gpu and modes.handle(a) == gpu]
        if mine:
            holders.append(name)
            steps += plan_domain(snap, Target(name, d.uuid, d.xml, list(d.allocations), d.host, d.changed), gone=mine,
                                 free=False)[0]  # fmt: skip
            gone += mine
    steps += passthrough_mode.MODE.plan_restore(snap, gpu, drivers)  # `gpu` is canonical (ops/guest.release)
    return Plan.of(steps, f"release {gpu} from {', '.join(holders) or 'no domain'}"), holders, gone


# -- adopt -----------------------------------------------------------------------------------------------------------


def plan_adopt(snap: HostSnapshot, domains: Domains, name: str) -> tuple[Plan, list[Allocation], list[Allocation],
                                                                         list[str]]:  # fmt: skip
    """Record in domain `name`'s vgpuadm metadata the devices its XML already gives it but no record names
    (attached by hand, by virt-manager, or made by mdevctl), each as its mode would have recorded it, read from the
    host now — so that restore, apply and destroy manage them from then on. Nothing is attached or made: the one
    step rewrites the metadata. Refuses (ConflictError) a device another domain also claims. Returns the plan, the
    allocations added, all the domain records afterwards, and one line per hostdev no mode knows on this host (not
    there now, or not a GPU device), which stays as it is. Pure."""
    d = domains.by_name[name]
    owned = list(d.allocations)
    recorded = set(d.recorded())
    others = domains.users(besides=name)
    used = {a.slot for a in owned}
    added: list[Allocation] = []
    skipped: list[str] = []
    for ref in dict.fromkeys(d.hostdevs):
        key = (ref.kind, ref.key)
        if key in recorded:
            continue
        if key in others:
            raise _claimed_elsewhere(name, others[key], key)
        slot = free_slots(used, 1)[0]
        a = modes.adopt(snap, ref, name, d.uuid, slot)
        if a is None:
            skipped.append(f"{ref.kind} {ref.key}: no vGPU or GPU function vgpuadm can identify on this host now")
            continue
        used.add(slot)
        added.append(a)
    after = sorted([*owned, *added], key=lambda a: a.slot)
    if not added:
        return Plan.of([], f"domain {name} has no device to adopt"), [], after, skipped
    step = redefine_step(name, owned, after, snap.host_key, d.xml)
    return Plan.of([step], f"record {len(added)} device(s) domain {name} already has"), added, after, skipped


def _claimed_elsewhere(name: str, other: str, key: tuple[str, str]) -> ConflictError:
    """The refusal of a device two domains claim: it names both and how to drop the claim of whichever is a copy
    (never of "the original": which one that is, only the user knows)."""
    kind, ident = key
    return ConflictError(
        f"cannot adopt {kind} {ident} for domain {name}: domain {other} claims it too",
        f"a device belongs to one VM: on whichever of {name} and {other} is a copy, run `vgpuadm destroy --vm COPY "
        "--forget` (drops the copy's claim; the device and the VM it belongs to stay as they are), then adopt again",
    )
