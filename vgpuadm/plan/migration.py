"""`vgpuadm migrate check`: whether each device of a VM can move to a target host live, only with the VM stopped
(cold), or not at all, and why. Each mode answers for its devices (Mode.live_move, Mode.room_on) against the target's
inventory (catalog/migration.py TargetHost); the devices of one VM are counted against each other on the target.
And the plans of a move on each host (`migrate prepare|run|abort`, below), cold or live. Pure."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog.migration import POSTCOPY, GpuDriver, TargetHost, compared, driver_rule
from vgpuadm.errors import ConflictError
from vgpuadm.model import MIGRATION, Allocation, HostSnapshot, moving
from vgpuadm.plan import guest
from vgpuadm.steps import DefineDomain, DomainDefinition, Plan, Step
from vgpuadm.virt import xml

SCHEMA = "vgpuadm-migrate-check/1"
MOVES = ("live", "cold", "no")  # best first
NOT_COMPARED = (
    "not compared (the driver of this host or of the target does not report them): the GPUs' ECC settings and the "
    "host driver releases, which NVIDIA requires to match for a live move"
)


@dataclass(frozen=True)
class DeviceMove:
    """How one recorded device moves: `move` live | cold | no, `reasons` why not live (cold) or not at all (no),
    `target_gpu` the target GPU it would be made on (None: nothing to make there)."""

    device: str
    what: str
    mode: str
    type_id: str | None
    move: str
    target_gpu: str | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class MoveCheck:
    domain: str
    running: bool | None
    offline: bool
    target: str
    devices: tuple[DeviceMove, ...]
    notes: tuple[str, ...]

    @property
    def move(self) -> str:
        """How the whole VM moves: as its least movable device (live when it has none)."""
        return max((d.move for d in self.devices), key=MOVES.index, default="live")

    @property
    def ok(self) -> bool:
        """The VM can move the way asked: live while it runs (unless --offline), else cold."""
        return self.move == "live" or (self.move == "cold" and (self.offline or self.running is False))

    def to_json(self) -> dict[str, Any]:
        """The `migrate check --json` document (vgpuadm/schemas/migrate-check.schema.json)."""
        return {
            "schema": SCHEMA,
            "domain": self.domain,
            "running": self.running,
            "offline": self.offline,
            "target": self.target,
            "move": self.move,
            "ok": self.ok,
            "devices": [
                {"device": d.device, "what": d.what, "mode": d.mode, "type_id": d.type_id, "move": d.move,
                 "target_gpu": d.target_gpu, "reasons": list(d.reasons)}
                for d in self.devices
            ],
            "notes": list(self.notes),
        }  # fmt: skip


def check(
    snap: HostSnapshot,
    domain: str,
    running: bool | None,
    allocations: Iterable[Allocation],
    target: TargetHost,
    *,
    postcopy: bool = False,
    offline: bool = False,
    drivers: Mapping[str, GpuDriver] | None = None,
) -> MoveCheck:
    """Each of `domain`'s recorded devices against the target: a device the target has no room for cannot move; one
    its mode cannot move live (or a board pair, GPUs whose drivers differ, or post-copy for a VFIO device) moves only
    cold. `drivers`: what this host's driver reports per physical GPU (GpuDriver)."""
    taken: Counter[str] = Counter()
    out: list[DeviceMove] = []
    reasons: tuple[str, ...]
    uncompared = False
    for a in sorted(allocations, key=lambda a: (a.slot is None, a.slot or 0)):
        mode = modes.for_name(a.mode)
        landing = mode.room_on(snap, target, a, taken)
        if landing.why_not is not None:
            move, reasons = "no", (landing.why_not,)
        else:
            if landing.take is not None:
                taken[landing.take] += 1
            vfio = POSTCOPY if postcopy and mode.hostdev else None
            source = (drivers or {}).get(snap.physical_gpu(mode.host_device(a) or ""))
            there = target.gpus.get(landing.gpu) if landing.gpu else None
            reasons = tuple(r for r in (mode.live_move(a), landing.not_live, driver_rule(source, there), vfio) if r)
            move = "cold" if reasons else "live"
            uncompared |= move == "live" and landing.gpu is not None and not compared(source, there)
        out.append(DeviceMove(mode.handle(a) or mode.describe(a), mode.describe(a), a.mode, a.type_id, move,
                              landing.gpu, reasons))  # fmt: skip
    notes = (NOT_COMPARED,) if uncompared else ()
    return MoveCheck(domain, running, offline, target.name, tuple(out), notes)


# -- moving it (`vgpuadm migrate prepare|run|abort`): each host through its own planner ------------------------------
# The source marks the domain's devices outgoing; the target defines the domain without them (`portable_xml`), makes
# its own devices of the same type (`request`: the source's mdev UUIDs where they are free there) and records them
# incoming; the source undefines the domain and frees its devices; the target drops the mark. Each host's part is
# one journaled plan under its own lock, and the mark in each host's metadata says where a move that stopped
# half-way stands (`show`, `inventory`): `migrate run` again goes on from there, `migrate abort` goes back.
# A live move (the domain runs) is the same but for the middle: instead of the source undefining the domain, libvirt
# moves the running guest onto the target's inactive definition (same name and UUID), given `destination_xml` for
# its live and persistent definitions; the source then frees its devices (`freeing_plan`).

INCOMING = "incoming"
OUTGOING = "outgoing"
MAX_DEVICES = 64  # devices one moved domain may ask the target for


def marked(allocations: Iterable[Allocation], state: str | None) -> list[Allocation]:
    """The allocations recording `state` (incoming, outgoing; None: no move)."""
    out = []
    for a in allocations:
        extra = {k: v for k, v in a.extra.items() if k != MIGRATION}
        out.append(dataclasses.replace(a, extra={**extra, MIGRATION: state} if state else extra))
    return out


@dataclass(frozen=True)
class Request:
    """What the target's `vgpuadm migrate incoming` is asked to make for the domain: `count` devices of `type_id`,
    taking the source's mdev `uuids` where they are free there, with its vgpu_params and display."""

    count: int
    type_id: str
    uuids: tuple[str, ...] = ()
    params: str | None = None
    display: bool = False
    ramfb: bool = False

    def argv(self, vm: str) -> list[str]:
        """The target's command line (after `vgpuadm`)."""
        out = ["migrate", "incoming", "--vm", vm, "--type", self.type_id, "--count", str(self.count), "--json"]
        for u in self.uuids:
            out += ["--uuid", u]
        if self.params:
            out += ["--param", self.params]
        return out + ["--display", "on" if self.display else "off"] + (["--ramfb"] if self.ramfb else [])


def request(domain: str, allocations: Sequence[Allocation]) -> Request:
    """The target's part of moving `domain`'s recorded devices; ConflictError when a device's mode does not move
    (Mode.move_refusal) or the devices differ (one type, vgpu_params and display for all: one create there)."""
    if not allocations:
        raise ConflictError(f"domain {domain} records no vgpuadm device: nothing of vgpuadm's to move",
                            "move it with libvirt (virsh migrate --offline --persistent --undefinesource)")  # fmt: skip
    if any(a.on_demand for a in allocations):
        raise ConflictError(f"domain {domain} has devices made on demand (when it starts): vgpuadm does not move "
                            "those yet", "record them on the target by hand (vgpuadm create --on-demand there)")  # fmt: skip
    for a in allocations:
        why = modes.of(a).move_refusal(a)
        if why is not None:
            raise ConflictError(f"domain {domain}: {why}", "see `vgpuadm migrate check` for each device")
    first = allocations[0]
    shape = {(a.mode, a.type_id, a.params, modes.of(a).display(a)) for a in allocations}
    if len(shape) > 1 or not first.type_id or len(allocations) > MAX_DEVICES:
        raise ConflictError(f"domain {domain}'s devices differ in type, vgpu_params or display: vgpuadm moves a "
                            "domain whose devices are alike", "move the others' devices by hand")  # fmt: skip
    display, ramfb = modes.of(first).display(first)
    uuids = tuple(a.uuid for a in sorted(allocations, key=lambda a: a.slot) if a.uuid)
    return Request(len(allocations), first.type_id, uuids, first.params, display, ramfb)


def portable_xml(domain_xml: str, allocations: Iterable[Allocation]) -> str:
    """The domain's definition without the hostdevs its vgpuadm metadata records and without that metadata: what
    the target defines before it gives the domain its own devices."""
    hostdevs = "".join(modes.hostdev_xml(a) for a in allocations if modes.of(a).hostdev)
    return xml.redefine(domain_xml, remove=hostdevs, element="")


def incoming_plan(vm: str, portable: str, made: Plan, after: Sequence[Allocation], host: str, via: str) -> Plan:
    """The target's plan: define the domain from `portable`, then the create plan `made` with its definition
    recording the devices `after` as incoming."""
    steps: list[Step] = [DomainDefinition(vm, portable, True, via=via)]
    for s in made.steps:
        if isinstance(s, DefineDomain):
            s = dataclasses.replace(s, element=xml.metadata_xml(marked(after, INCOMING), host), previous="")
        steps.append(s)
    return Plan(tuple(steps), f"prepare domain {vm} here ({via}): {made.summary}")


def mark_plan(domain: str, owned: Sequence[Allocation], state: str | None, host: str, domain_xml: str) -> Plan:
    """Record the domain's devices as `state` (None: drop the mark); empty when they record it already."""
    if moving(owned) == state:
        return Plan((), f"domain {domain} is {state or 'not moving'} already")
    after = marked(owned, state)
    word = f"as {state}" if state else "as settled (the move is over)"
    return Plan(
        (guest.redefine_step(domain, owned, after, host, domain_xml),), f"record domain {domain}'s devices {word}"
    )


def leaving_plan(snap: HostSnapshot, domain: str, definition: str, owned: Sequence[Allocation],
                 drivers: dict[str, str], why: str, release: Sequence[Step] = ()) -> Plan:  # fmt: skip
    """Undefine the domain (`definition`: its whole persistent XML, which undo defines again), then free its devices
    on this host, then `release` (the MIG GPU instances vgpuadm made for them): the source's end of a cold move, or
    an incoming domain's abort."""
    free = freeing_plan(snap, domain, owned, drivers, why, release)
    return Plan((DomainDefinition(domain, definition, False, via=why), *free.steps),
                f"undefine domain {domain} and free its {len(owned)} device(s) here ({why})")  # fmt: skip


def destination_xml(domain_xml: str, owned: Sequence[Allocation], there: Sequence[Allocation], host: str) -> str:
    """A definition of the domain as the target runs it (its live, migratable XML) or keeps it (its persistent XML)
    after a live move: `domain_xml` with each hostdev of the source's devices `owned` replaced, in its place, by
    the hostdev of the target's device of the same slot order in `there` (the guest PCI address and alias of the
    source's kept: libvirt requires the guest to see its devices where they were), and vgpuadm's metadata as the
    target records it (`there`, incoming, host `host`). ConflictError when the target made another number of
    devices."""
    mine = sorted(owned, key=lambda a: (a.slot is None, a.slot or 0))
    theirs = sorted(there, key=lambda a: (a.slot is None, a.slot or 0))
    if len(mine) != len(theirs):
        raise ConflictError(f"the target made {len(theirs)} device(s) for the domain's {len(mine)}",
                            "undo the move (`vgpuadm migrate abort`) and check the vgpuadm version on both hosts")  # fmt: skip
    swap: dict[tuple[str, str] | None, str] = {}
    for a, b in zip(mine, theirs, strict=True):
        key = modes.key(a)
        if modes.of(a).hostdev and key is not None:
            swap[key] = modes.hostdev_xml(b)
    doc = xml.parse_domain(domain_xml)
    devices = doc.find("devices")
    for hd in devices.findall("hostdev") if devices is not None else []:
        theirs_xml = swap.get(xml.hostdev_key(hd))
        if theirs_xml is None:
            continue
        [new] = xml.hostdev_elements(theirs_xml)
        for tag in ("address", "alias"):  # the guest's side of the device: the source's
            for el in new.findall(tag):
                new.remove(el)
            for el in hd.findall(tag):
                new.append(copy.deepcopy(el))
        new.tail = hd.tail
        devices.replace(hd, new)
    return xml.redefine(doc, element=xml.metadata_xml(marked(there, INCOMING), host))


def freeing_plan(snap: HostSnapshot, domain: str, owned: Sequence[Allocation], drivers: dict[str, str], why: str,
                 release: Sequence[Step] = ()) -> Plan:  # fmt: skip
    """Free the devices of a domain that left this host live (libvirt undefined it here once the target ran it),
    then `release` (the MIG GPU instances vgpuadm made for them): the source's end of a live move."""
    steps = [*guest.remove_steps(snap, owned, drivers), *release]
    return Plan(tuple(steps), f"free domain {domain}'s {len(owned)} device(s) here ({why})")
