"""`vgpuadm inventory`: one host's report (snapshot + this host's domains, from libvirt or saved XML); the fleet
merge of many hosts' reports is ops/fleet.py's. The rows and the capacity figures are report/inventory.py's (pure)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from vgpuadm import modes
from vgpuadm.errors import ConflictError, LibvirtError, LibvirtMissingError, VgpuadmError
from vgpuadm.executor import pending_error, read_journal
from vgpuadm.host import mig as host_mig
from vgpuadm.host import nvidia_smi
from vgpuadm.io.domainxml import read_domain_dir
from vgpuadm.model import Allocation, HostSnapshot
from vgpuadm.ops.exporter import read_driver
from vgpuadm.ops.fleet import timestamp
from vgpuadm.ops.session import Session
from vgpuadm.plan.domains import Domains
from vgpuadm.report.inventory import inventory as build_inventory
from vgpuadm.report.listing import vm_rows, vm_view
from vgpuadm.report.mig import gpu_occupancy, instance_rows, made_by
from vgpuadm.report.usage import join, usage_now


def inventory(
    root: str | None = None,
    *,
    connect: str | None = None,
    domains_xml: str | None = None,
    use_libvirt: bool = True,
    host: str | None = None,
    domains: Sequence[str] | None = None,
    usage: bool = False,
) -> dict[str, Any]:
    """The host's inventory document (vgpuadm-inventory/1). Ownership comes from saved domain XML when given,
    else from this host's libvirt domains (only the named `domains` when given) unless use_libvirt is False (then
    it is reported as unknown, never as leaks). `usage`: each device a guest runs on also gets `now`, what the
    driver reports it uses (usage_by_device; asked for, as the Cockpit page does: the figures change from one read
    to the next, where the rest of the document changes only with the host)."""
    with Session.read(root, connect) as s:
        snap = s.snap
        found: Domains | None = None
        running: frozenset[str] | None = None
        source = "none"
        saved: list[str] | None = None  # the domains read from --domain-xml-dir
        if domains_xml is not None:
            found = read_domain_dir(domains_xml, snap.host_key, option="--domain-xml-dir")
            source = f"domains-xml:{os.path.abspath(domains_xml)}"
            saved = sorted(found.by_name)
        warnings: list[str] = []
        if domains_xml is None and use_libvirt:
            try:
                found = s.domains().only(None if domains is None else set(domains))
                running = s.domains().running
                source = f"libvirt:{s.uri}"
            except LibvirtMissingError as exc:  # the rest of the host can still be read
                warnings.append(f"owners unknown: {exc.message}; {exc.hint}")
        mig, driver = _driver_state(s, found, warnings)
        doc = build_inventory(snap, found, host=host or s.root.hostname(), generated_at=timestamp(), source=source,
                              running=running, mig=mig, driver=driver)  # fmt: skip
        if usage and found is not None and doc["devices"]:
            now = usage_by_device(s, found)
            for row in doc["devices"]:
                figures = now.get((row["domain"] if row["owned"] else "", row["id"]))
                if figures is not None:
                    row["now"] = figures
        doc["warnings"] += warnings
        if saved is not None and doc["summary"]["unowned"]:
            doc["warnings"].append(_saved_only(saved, domains_xml or "", doc["summary"]["unowned"]))
        pending: VgpuadmError | None
        try:
            pending = pending_error() if read_journal(s.root.path) is not None else None
        except VgpuadmError as exc:  # unreadable or not a journal: still a change nobody finished
            pending = exc
        if pending is not None:
            doc["warnings"].append(f"{pending.message}: {pending.hint}")
        return doc


def _saved_only(saved: list[str], directory: str, unowned: int) -> str:
    """Ownership from saved XML knows only the domains saved there: say how many were read before the devices no
    saved domain owns are taken for leaks (a domain not saved there owns its devices all the same)."""
    n = len(saved)
    names = f" ({', '.join(saved[:3])}{', …' if n > 3 else ''})" if saved else ""
    it = "it" if unowned == 1 else "them"
    return (f"ownership read from {n} domain{'' if n == 1 else 's'} saved in {directory}{names}: {unowned} "
            f"device{'' if unowned == 1 else 's'} no saved domain owns {'is' if unowned == 1 else 'are'} shown as "
            f"{'a leak' if unowned == 1 else 'leaks'}, though a domain not saved there may own {it}; save every "
            "domain of the host (`virsh dumpxml DOMAIN`) for a complete answer")  # fmt: skip


def _driver_state(
    s: Session, found: Domains | None, warnings: list[str]
) -> tuple[dict[str, dict[str, Any]] | None, dict[str, dict[str, str]]]:
    """What the NVIDIA driver reports (nothing on hosts without NVIDIA GPUs or nvidia-smi): GPU-instance occupancy
    per MIG-capable GPU, and per GPU its ECC mode and the driver's release (what a live migration needs equal on
    both hosts). Owners (the domain scan's users(), as every reader) and who vgpuadm made an instance for come from
    `found` (unknown, null, when it is None)."""
    if not any(fn.vendor_id == "0x10de" for fn in s.snap.functions.values()) or nvidia_smi.locate(s.root) is None:
        return None, {}
    try:
        reported = host_mig.read(s.root)
    except VgpuadmError as exc:
        warnings.append(f"MIG state not read: {exc.message}")
        return None, {}
    driver = {g.address: {k: v for k, v in (("ecc", g.ecc), ("driver_version", g.driver_version)) if v is not None}
              for g in reported}  # fmt: skip
    gpus = [g for g in reported if g.mig_capable]
    owners = made = None
    if found is not None:
        owners = {key: name for (_, key), name in found.users().items()}
        made = made_by(found.allocations, s.snap.physical_gpu)
    rows = instance_rows(gpus, owners, made)
    return {g.address: gpu_occupancy(g, rows) for g in gpus}, driver


def device_users(
    root: str | None, *, connect: str | None = None
) -> tuple[HostSnapshot, dict[tuple[str, str], str] | None, str | None]:
    """The snapshot and who references each device ((kind, key) → domain, the Session's one domain scan), or None
    and the reason when libvirt cannot be reached (no daemon, no permission, no libvirt-python)."""
    with Session.read(root, connect) as s:
        snap = s.snap
        try:
            return snap, s.domains().users(), None
        except (LibvirtError, ConflictError) as exc:
            return snap, None, exc.message


def domain_allocations(root: str | None, vm: str, *, connect: str | None = None) -> list[Allocation]:
    """What domain `vm` owns, from its vgpuadm metadata (NotFoundError when there is no such domain)."""
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return []
        return list(d.allocations)


def vms(root: str | None, *, connect: str | None = None) -> list[dict[str, Any]]:
    """This host's domains, their state and the devices each records (`vgpuadm vms`)."""
    with Session.read(root, connect) as s:
        return vm_rows(s.domains())


def show_vm(root: str | None, vm: str, *, connect: str | None = None) -> dict[str, Any]:
    """`vgpuadm show --vm NAME`: the domain's devices and where they are (report/listing.vm_view); NotFoundError
    when libvirt has no such domain."""
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return vm_view(s.snap, vm, None, None, (), None, modes.of)
        view = vm_view(s.snap, d.name, d.uuid, d.running, d.allocations, d.changed, modes.of)
        if view["devices"]:
            now = usage_by_device(s, s.domains().only({d.name}))
            for device in view["devices"]:
                figures = now.get((d.name, device["id"] or ""))
                if figures is not None:
                    device["now"] = figures
        return view


def usage_by_device(s: Session, domains: Domains) -> dict[tuple[str, str], dict[str, Any]]:
    """(domain, device id) → what the driver reports the device uses now (`now`: report/usage.usage_now), from the
    exporter's join (report/usage.join: each mode finds its device's record; domain "" for a device no domain
    records). `show --vm` and the inventory (the Cockpit page's table) read it. Empty where the host has no
    nvidia-smi or it fails: they answer without it."""
    if nvidia_smi.locate(s.root) is None:
        return {}
    try:
        driver = read_driver(s)
    except VgpuadmError:
        return {}
    if driver is None:
        return {}
    now: dict[tuple[str, str], dict[str, Any]] = {}
    for row in join(s.snap, domains, driver):
        if row.record is not None and row.labels[2]:
            now.setdefault((row.labels[0], row.labels[2]), usage_now(row.record))
    return now
