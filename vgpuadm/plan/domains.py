"""What the domains of this host own and reference: the one reading of ownership every verb plans against. Pure.

Built once per verb (ops/session.py reads libvirt, io/domainxml.py reads saved XML files). A domain whose vgpuadm
metadata names another host (another simulated root on a shared libvirtd) is not this host's and is left out
entirely: its devices are neither owned here nor restored here. A domain with no vgpuadm metadata still counts
for the devices its bare `<hostdev>` elements reference: placement never hands those out again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from vgpuadm import modes
from vgpuadm.catalog.capacity import consume
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.virt import xml as domxml


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    uuid: str
    xml: str
    running: bool
    metadata: str  # the vgpuadm metadata element as libvirt returns it ("" = none)
    allocations: tuple[Allocation, ...]
    hostdevs: tuple[domxml.HostdevRef, ...]
    host: str | None  # the host its vgpuadm metadata names
    changed: str | None  # when vgpuadm last changed its devices (UTC), None when not recorded

    @classmethod
    def read(cls, name: str, uuid: str, text: str, running: bool, metadata: str) -> Domain:
        doc = domxml.parse_domain(text)  # once, for the four readings
        return cls(name, uuid, text, running, metadata, tuple(domxml.parse_allocations(doc)),
                   tuple(domxml.parse_hostdevs(doc)), domxml.metadata_host(doc),
                   domxml.metadata_changed(doc, domain=name))  # fmt: skip

    def references(self) -> list[tuple[str, str]]:
        """The devices this domain references: its hostdevs (any, vgpuadm's or not), then its recorded ones."""
        return [(ref.kind, ref.key) for ref in self.hostdevs] + self.recorded()

    def recorded(self) -> list[tuple[str, str]]:
        """The devices this domain's vgpuadm metadata records (restore, apply and destroy manage those)."""
        return [k for a in self.allocations for k in device_keys(a)]

    def unrecorded(self) -> list[tuple[str, str]]:
        """The devices this domain's XML references that its vgpuadm metadata does not record (attached by hand,
        by virt-manager or for mdevctl): the domain owns them all the same; `vgpuadm adopt` records them."""
        recorded = set(self.recorded())
        return [key for key in dict.fromkeys(self.references()) if key not in recorded]


@dataclass(frozen=True, slots=True)
class Domains:
    """Every domain of this host, by name."""

    host_key: str
    by_name: dict[str, Domain] = field(default_factory=dict)

    @classmethod
    def of(cls, host_key: str, entries: Iterable[tuple[str, str, str, bool, str]]) -> Domains:
        """From (name, uuid, persistent XML, running, metadata element) per domain; other hosts' are dropped."""
        return cls.mine(host_key, (Domain.read(*entry) for entry in entries))

    @classmethod
    def mine(cls, host_key: str, domains: Iterable[Domain]) -> Domains:
        """This host's domains among `domains`."""
        return cls(host_key, {d.name: d for d in domains if d.host in (None, host_key)})

    @property
    def allocations(self) -> list[Allocation]:
        return [a for d in self.by_name.values() for a in d.allocations]

    @property
    def running(self) -> frozenset[str]:
        return frozenset(n for n, d in self.by_name.items() if d.running)

    @property
    def uuids(self) -> dict[str, str]:
        return {n: d.uuid for n, d in self.by_name.items()}

    @property
    def xml(self) -> dict[str, str]:
        return {n: d.xml for n, d in self.by_name.items()}

    @property
    def metadata(self) -> dict[str, str]:
        return {n: d.metadata for n, d in self.by_name.items()}

    def users(self, *, besides: str | None = None) -> dict[tuple[str, str], str]:
        """(kind, key) of every device a domain references (its hostdevs and its recorded allocations, existing
        now or not) → the first such domain; `besides` leaves one domain out."""
        out: dict[tuple[str, str], str] = {}
        for name, d in sorted(self.by_name.items()):
            if name != besides:
                for key in d.references():
                    out.setdefault(key, name)
        return out

    def claims(self) -> dict[tuple[str, str], list[str]]:
        """Every device a domain references → every domain that does, by name. More than one is a double claim
        (a VM copied with `virsh dumpxml | virsh define` or virt-clone): only one of them can start at a time."""
        out: dict[tuple[str, str], list[str]] = {}
        for name, d in sorted(self.by_name.items()):
            for key in dict.fromkeys(d.references()):  # each once per domain
                out.setdefault(key, []).append(name)
        return out

    def unrecorded(self) -> set[tuple[str, str]]:
        """Every device a domain references that no domain's vgpuadm metadata records: owned (users() names its
        domain) but not managed by vgpuadm until `vgpuadm adopt` records it."""
        recorded = {key for d in self.by_name.values() for key in d.recorded()}
        return {key for key in self.users() if key not in recorded}

    def only(self, names: Collection[str] | None) -> Domains:
        """These domains with only the named ones (all when `names` is None)."""
        if names is None:
            return self
        return Domains(self.host_key, {n: d for n, d in self.by_name.items() if n in names})

    def owned(self) -> set[str]:
        """Every device id (mdev UUID, PCI address) any domain references."""
        return {key for _, key in self.users()}

    def owner_of(self, device_id: str) -> str | None:
        """The domain that references device `device_id` (an mdev UUID or a PCI address), if any."""
        key = device_id.lower()
        for (_, k), name in self.users().items():
            if k == key:
                return name
        return None


def with_recorded(snap: HostSnapshot, domains: Domains, *, besides: Collection[Allocation] = ()) -> HostSnapshot:
    """`snap` with every device the domains record but the kernel lacks now (after a reboot, before `restore`)
    counted as existing, so that placement never hands out what `restore` will bring back; `besides` are left
    out (allocations a plan removes). On-demand requests are not counted: they take room only while their domain
    runs (the hook makes them then, and the kernel shows them)."""
    missing = [a for a in missing_recorded(snap, domains) if a not in besides]
    if not missing:
        return snap
    held = {key: a.domain for a in missing if (key := a.uuid or a.address)}
    return dataclasses.replace(consume(snap, missing), reserved={**snap.reserved, **held})


def missing_recorded(snap: HostSnapshot, domains: Domains) -> list[Allocation]:
    """The devices the domains record that the host lacks now (after a reboot, before `restore`); on-demand
    requests are not missing while their domain is off (the hook makes them at start)."""
    return [a for a in domains.allocations if not a.on_demand and modes.of(a).missing(snap, a)]


def device_keys(a: Allocation) -> list[tuple[str, str]]:
    """The (kind, key) references an allocation stands for, as parse_hostdevs names them."""
    key = modes.key(a)
    return [key] if key is not None else []
