"""On-demand devices: what libvirt's qemu hook (`vgpuadm hook run`) makes when a domain starts and removes when it
stops. Pure: a snapshot and the domain XML libvirt passed on stdin in, one Plan out.

The request is what `create --on-demand` / `passthrough --on-demand` recorded in the domain's vgpuadm metadata:
an mdev's type, deterministic UUID, params and placement hints (placed at start by the same planner and capacity
model as `create`), a layout C VF to type, or a GPU whose IOMMU group goes to vfio-pci.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from vgpuadm import modes
from vgpuadm.catalog.capacity import consume, release
from vgpuadm.errors import ConflictError, VgpuadmError
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan.guest import remove_steps
from vgpuadm.steps import Plan, Step
from vgpuadm.virt import xml


def requests(domain_xml: str, host_key: str) -> tuple[str, list[Allocation]]:
    """The domain's name and its on-demand allocations; none when its vgpuadm metadata names another host (a
    libvirtd shared by several simulated roots)."""
    doc = xml.parse_domain(domain_xml)
    name = doc.findtext("name") or ""
    if xml.metadata_host(doc) not in (None, host_key):
        return name, []
    return name, [a for a in xml.parse_allocations(doc) if a.on_demand]


def plan_start(snap: HostSnapshot, domain_xml: str) -> Plan:
    """Make the domain's on-demand devices that do not exist: mdevs placed by their hints (grouped, so that one
    domain's devices count against each other), layout C VFs typed, passed-through GPUs bound to vfio-pci."""
    name, wanted = requests(domain_xml, snap.host_key)
    steps, _view = start_steps(snap, name, wanted)
    return Plan.of(steps, f"make the on-demand devices of domain {name}")


def start_steps(snap: HostSnapshot, name: str, wanted: Sequence[Allocation]) -> tuple[list[Step], HostSnapshot]:
    """The steps that make `wanted` (one domain's on-demand allocations) and the snapshot as it is once they ran."""
    view = snap
    steps: list[Step] = []
    groups: dict[tuple[str, str, str, str, str], list[Allocation]] = {}
    for a in wanted:
        if modes.of(a).placed_at_start and a.uuid:
            have = snap.mdevs.get(a.uuid)
            if have is not None:
                if have.type_id != a.type_id:
                    raise ConflictError(f"domain {name}: mdev {a.uuid} exists with type {have.type_id}, not "
                                        f"{a.type_id}", f"remove it (vgpuadm mdev remove {a.uuid}) and start again")  # fmt: skip
                continue
            key = (a.type_id or "", a.extra.get("gpu", ""), a.extra.get("policy", "pack"), a.extra.get("numa", ""),
                   a.params or "")  # fmt: skip
            groups.setdefault(key, []).append(a)
    for (type_id, gpu, policy, numa, params), group in groups.items():
        made, _summary = device_plans.plan_devices(view, type_id, len(group), gpu=gpu or None, policy=policy,
                                                   numa=int(numa) if numa else None, params=params,
                                                   uuids=[a.uuid or "" for a in group])  # fmt: skip
        steps += [s for m in made for s in m.steps]
        parents = {m.uuid: m.parent for m in made if m.uuid}
        view = consume(view, [dataclasses.replace(a, parent=parents.get(a.uuid or "")) for a in group])
    for a in wanted:
        mode = modes.of(a)  # a vGPU on the device the allocation names (a layout C VF): typed at start
        if mode.needs_vendor_driver and not mode.placed_at_start and a.address and a.type_id:
            kernel, _vf = device_plans.plan_vf_type(view, a.type_id, a.address, params=a.params or "")
            steps += kernel.steps
            view = consume(view, [a])
    gpus: list[tuple[str, bool]] = []
    for a in wanted:
        owner = a.parent or a.address
        if modes.of(a).whole_gpu and owner and owner not in [g for g, _ in gpus]:
            gpus.append((owner, a.extra.get("force") == "yes"))
    for gpu, force in gpus:
        steps += device_plans.plan_vfio_bind(view, gpu, force).steps
    return steps, view


def overcommit(snap: HostSnapshot, allocations: Sequence[Allocation], autostart: Collection[str]) -> list[str]:
    """One warning per domain that autostarts whose on-demand request would not fit when they all start at boot (in
    name order), the devices that are not on demand staying where they are. `snap` counts those (with_recorded).
    Requests of domains started by hand may add up to more than the host: that is what on-demand is for."""
    wanted = [a for a in allocations if a.on_demand and a.domain in autostart]
    made = [a for a in wanted if not modes.of(a).whole_gpu and not modes.of(a).missing(snap, a)]
    view = release(snap, made) if made else snap
    by_domain: dict[str, list[Allocation]] = {}
    for a in wanted:
        by_domain.setdefault(a.domain, []).append(a)
    out: list[str] = []
    bound: dict[str, str] = {}
    for name, mine in sorted(by_domain.items()):
        try:
            for a in mine:
                gpu = a.parent or a.address or ""
                if modes.of(a).whole_gpu and bound.setdefault(gpu, name) != name:
                    raise ConflictError(f"{gpu} is also an on-demand passthrough of domain {bound[gpu]}")
            _steps, view = start_steps(view, name, mine)
        except VgpuadmError as exc:
            need = ", ".join(f"{n} × {t}" for t, n in sorted(demand(mine).items()))
            out.append(f"domain {name}: its on-demand request ({need}) would not fit when every domain that autostarts "
                       f"starts at boot: {exc.message}")  # fmt: skip
    return out


def plan_stop(snap: HostSnapshot, domain_xml: str, drivers: Mapping[str, str]) -> Plan:
    """Remove the domain's on-demand devices that exist (mdevs, VF types) and give its on-demand GPUs back to the
    drivers `vfio bind` remembered."""
    name, wanted = requests(domain_xml, snap.host_key)
    return Plan.of(remove_steps(snap, wanted, dict(drivers)), f"free the on-demand devices of domain {name}")


def demand(allocations: Sequence[Allocation]) -> dict[str, int]:
    """How many devices the on-demand requests need, by type (passthrough: `pci`), when all their domains run."""
    out: dict[str, int] = {}
    for a in allocations:
        if a.on_demand:
            key = a.type_id or "pci"
            out[key] = out.get(key, 0) + 1
    return out
