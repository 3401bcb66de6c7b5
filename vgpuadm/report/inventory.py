"""The inventory of one host: who owns which vGPU, what is free, and how many more of each type fit where. Pure.

`inventory(snapshot, domains, host=…, generated_at=…)` returns the versioned document that every renderer
(table, JSON, CSV, Prometheus, HTML) and the fleet merge read; its shape is vgpuadm/schemas/inventory-v1.schema.json.

Capacity follows the sharing rules of shared/docs/vgpu-sysfs.md, and never exceeds what the kernel itself reports
(`available_instances`), so a driver that reads 0 everywhere (§2.4) is believed:
- layout A, NVIDIA: one type per physical GPU — a GPU running nvidia-64 has 0 room for nvidia-63 (§2.4);
- layouts B and C: one vGPU per VF and one framebuffer *size* per physical GPU (equal-size mode, §3.2, §3.4);
- other mdev drivers (GVT-g, mtty…): the kernel's `available_instances`, since their types share one budget.
Layout C publishes no per-type maximum; discovery takes it from NVIDIA's tables (vgpuadm/catalog/boards.py), so a
free count is min(free VFs whose creatable list offers the type, maximum − running vGPUs) as on layout B. For a
board not in the tables it is what the creatable lists still offer (one per free VF), bounded by the memory only
while the GPU is idle (its largest type spans it).
`stranded` counts instances of a type that the free framebuffer of a GPU could hold but that GPU's lock (another
type, or another size) forbids — the fleet report's fragmentation.
Ownership is the domain scan's one answer (plan/domains.Domains.users(), as `devices`, `doctor` and `reconcile`
read it): a device a domain's XML references is that domain's, whether vgpuadm recorded it in the domain's metadata
or not (attached by hand, by virt-manager, for mdevctl); a device row says `recorded: false` for the latter (`vgpuadm
adopt` records them). `domains=None` means ownership is unknown (no libvirt, no saved domain XML): devices are then
neither owned nor leaked, rather than all reported as leaks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from vgpuadm import modes
from vgpuadm.catalog.capacity import (
    GpuRoom,
    fragmentation,
    gpu_rooms,
    gpu_rule,
    stranded_framebuffer,
    vf_type_name,
    whole_gpu_room,
)
from vgpuadm.model import (
    INVENTORY_SCHEMA,
    PCI_KEY,
    Allocation,
    HostSnapshot,
    Layout,
    VgpuType,
    describe_nvidia_name,
    type_id_order,
)
from vgpuadm.plan.domains import Domains

SCHEMA = INVENTORY_SCHEMA


@dataclass
class _Device:
    kind: str  # mdev | vf | pci | pool
    id: str
    uuid: str | None
    parent: str
    gpu: str
    layout: str
    type_id: str | None
    name: str | None
    framebuffer_mib: int | None
    iommu_group: int | None
    vgpu_params: str | None


@dataclass
class _Gpu:
    """One physical GPU (or a non-PCI mdev parent such as mtty) and everything that runs on it."""

    address: str
    layout: str
    rule: str  # one-type | one-size | mixed-size | kernel | whole
    vfs: int = 0  # enabled VFs: at most one vGPU each on layouts B and C
    types: dict[str, list[VgpuType]] = field(default_factory=dict)  # type_id → one entry per parent offering it
    devices: list[_Device] = field(default_factory=list)


def inventory(
    snap: HostSnapshot,
    domains: Domains | None,
    *,
    host: str,
    generated_at: str,
    source: str = "",
    running: Collection[str] | None = None,
    mig: dict[str, dict[str, Any]] | None = None,
    driver: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The inventory document of one host (schema vgpuadm-inventory/1). `running`: the domains that run (None:
    not known, e.g. from saved XML); a device is then held by a running domain or reserved by a stopped one.
    `mig`: per MIG-capable GPU its GPU-instance occupancy (report/mig.gpu_occupancy), shown as the row's `mig`.
    `driver`: per GPU what its driver reports of it (`ecc`, `driver_version`), added to the GPU's row."""
    warnings = list(snap.warnings)
    gpus = _physical_gpus(snap)
    allocations = domains.allocations if domains is not None else None
    devices = _devices(snap, gpus, _passed_through(domains))
    requests = [a for a in allocations or [] if a.on_demand]
    owners, unrecorded, missing = _owners(devices, domains, warnings)
    missing = [m for m in missing if not m["on_demand"]]
    for m in missing:
        del m["on_demand"]
    # the capacity model's one answer; what domains record but the host lacks now is reserved for them
    awaiting = [a for a in allocations or [] if not a.on_demand and modes.of(a).missing(snap, a)]
    rooms = gpu_rooms(snap, awaiting, mig_off=[a for a, m in (mig or {}).items() if m.get("mode") == "Disabled"])
    type_rows = _type_rows(gpus, rooms)
    gpu_rows = [_gpu_row(snap, g, owners, rooms[g.address]) for g in gpus.values()]
    for row in gpu_rows:
        if mig and row["address"] in mig:
            row["mig"] = mig[row["address"]]
        row.update((driver or {}).get(row["address"], {}))
    device_rows = [_device_row(snap, d, owners, unrecorded, allocations is not None) for d in devices]
    moving = {modes.of(a).device_id(a): a.moving for a in allocations or [] if a.moving}
    for row in device_rows:
        if row["id"] in moving:  # a move to or from another host stopped half-way (vgpuadm migrate)
            row["moving"] = moving[row["id"]]
    for row in device_rows:
        row["held"] = None if running is None or row["domain"] is None else (
            "running" if row["domain"] in running else "stopped")  # fmt: skip
    known = allocations is not None
    summary = _summary(gpu_rows, type_rows, device_rows, missing, known)
    summary["held_running"] = sum(1 for d in device_rows if d["held"] == "running") if running is not None else None
    summary["reserved_stopped"] = sum(1 for d in device_rows if d["held"] == "stopped") if running is not None else None
    summary["on_demand_requests"] = len(requests)
    return {
        "schema": SCHEMA,
        "host": host,
        "generated_at": generated_at,
        "simulated": snap.simulated,
        "ownership_source": source or ("none" if not known else "libvirt"),
        "summary": summary,
        "gpus": gpu_rows,
        "functions": _function_rows(snap, devices),
        "types": type_rows,
        "devices": device_rows,
        "missing": missing,
        "on_demand": _on_demand(requests, owners, type_rows, running),
        "warnings": warnings,
    }


def _on_demand(
    requests: list[Allocation], owners: dict[str, str], type_rows: list[dict[str, Any]], running: Collection[str] | None
) -> dict[str, Any]:
    """The on-demand requests (made by the qemu hook while their domain runs) and what they need if all run at once,
    per type against the host's maximum for it (null when unknown)."""
    rows = [
        {
            "domain": a.domain,
            "mode": a.mode,
            "type_id": a.type_id,
            "uuid": a.uuid,
            "address": a.address,
            "exists": (a.uuid or a.address) in owners,
            "running": None if running is None else a.domain in running,
        }
        for a in sorted(requests, key=lambda a: (a.domain, a.slot))
    ]
    host_max = {t["type_id"]: t["max"] for t in type_rows}
    free = {t["type_id"]: t["free"] for t in type_rows}
    need = ondemand_need(requests)
    return {
        "requests": rows,
        "needed": [
            {"type_id": t, "devices": n, "host_max": host_max.get(t), "free": free.get(t)}
            for t, n in sorted(need.items())
        ],
    }


def ondemand_need(requests: Collection[Allocation]) -> dict[str, int]:
    """Devices the on-demand requests need by type (`pci` for passed-through functions) if every domain runs."""
    return dict(Counter(a.type_id or "pci" for a in requests if a.on_demand))


# -- gathering ------------------------------------------------------------------------------------------------


def _physical_gpus(snap: HostSnapshot) -> dict[str, _Gpu]:
    gpus: dict[str, _Gpu] = {}
    for fn in snap.gpus:
        if fn.is_vf:
            continue
        layout = snap.layouts.get(fn.address, Layout.PASSTHROUGH)  # a PF of layout B/C carries its VFs' layout
        gpus[fn.address] = _Gpu(fn.address, layout.value, _rule(layout, fn.address, snap), len(fn.virtfns))
    for name, parent in sorted(snap.mdev_parents.items()):
        g = snap.physical_gpu(name)
        if g not in gpus:  # non-PCI parents (mtty) stand for themselves
            gpus[g] = _Gpu(g, parent.layout.value, _rule(parent.layout, g, snap))
    for t in snap.types():
        gpus[snap.physical_gpu(t.parent)].types.setdefault(t.type_id, []).append(t)
    return dict(sorted(gpus.items()))


def _rule(layout: Layout, gpu: str, snap: HostSnapshot) -> str:
    return gpu_rule(snap, layout, gpu)


def _devices(snap: HostSnapshot, gpus: dict[str, _Gpu], passed_through: set[str]) -> list[_Device]:
    """mdevs, typed vendor-VFIO VFs, and whole functions on vfio-pci or named by a domain's passthrough."""
    out: list[_Device] = []
    for m in sorted(snap.mdevs.values(), key=lambda m: (m.parent, m.uuid)):
        g = snap.physical_gpu(m.parent)
        t = _offered(gpus.get(g), m.type_id)
        parent = snap.mdev_parents.get(m.parent)
        layout = (parent.layout if parent else Layout.MDEV_PF).value
        out.append(
            _Device(
                "mdev",
                m.uuid,
                m.uuid,
                m.parent,
                g,
                layout,
                m.type_id,
                t.name if t else None,
                t.framebuffer_mib if t else None,
                m.iommu_group,
                m.vgpu_params,
            )
        )
    for vf in sorted(snap.vendor_vfs.values(), key=lambda v: v.address):
        if not vf.in_use:
            continue
        g = snap.physical_gpu(vf.address)
        name = vf_type_name(snap, vf.physfn, vf.address, vf.current_type)
        fb = describe_nvidia_name(name).framebuffer_mib if name else None
        fn = snap.functions.get(vf.address)
        out.append(
            _Device(
                "vf",
                vf.address,
                None,
                vf.address,
                g,
                Layout.VENDOR_VFIO.value,
                vf.current_type_id,
                name,
                fb,
                fn.iommu_group if fn else None,
                vf.vgpu_params,
            )
        )
    pool_vfs: set[str] = set()
    for pool in snap.vf_pools.values():  # a VF pool's VFs in use: one instance of the pool's type each
        t = pool.offered[0] if pool.offered else None
        for addr in pool.vfs[: pool.num_vfs]:
            fn = snap.functions.get(addr)
            if fn is None or addr in pool.free or t is None:
                continue
            pool_vfs.add(addr)
            out.append(_Device("pool", addr, None, addr, pool.pf, Layout.VF_POOL.value, t.type_id, t.name,
                               t.framebuffer_mib, fn.iommu_group, None))  # fmt: skip
    for addr, fn in snap.functions.items():
        if addr in pool_vfs:
            continue
        if (fn.driver == "vfio-pci" or addr in passed_through) and addr not in snap.vendor_vfs:
            g = snap.physical_gpu(addr)
            if g not in gpus:  # a companion function (HD audio 65:00.1) belongs to the GPU in its slot
                g = next((a for a in gpus if a.rsplit(".", 1)[0] == fn.slot), g)
            out.append(
                _Device("pci", addr, None, addr, g, Layout.PASSTHROUGH.value, None, None, None, fn.iommu_group, None)
            )
    for d in out:
        if d.gpu in gpus:
            gpus[d.gpu].devices.append(d)
    return out


def _offered(gpu: _Gpu | None, type_id: str) -> VgpuType | None:
    entries = gpu.types.get(type_id) if gpu else None
    return entries[0] if entries else None


def _passed_through(domains: Domains | None) -> set[str]:
    """The PCI functions the domains give whole to a guest (recorded passthrough, or a bare PCI <hostdev>): listed
    as devices even while not bound to vfio-pci (a managed hostdev of a stopped domain)."""
    if domains is None:
        return set()
    recorded = {a.address for a in domains.allocations if modes.of(a).whole_gpu and a.address}
    return recorded | {key for kind, key in domains.unrecorded() if kind == PCI_KEY}


def _owners(
    devices: list[_Device], domains: Domains | None, warnings: list[str]
) -> tuple[dict[str, str], set[str], list[dict[str, Any]]]:
    """Device id → owning domain (Domains.users(): the domain whose XML references it), the ids no domain's
    vgpuadm metadata records, and the allocations whose device does not exist (restore needed)."""
    missing: list[dict[str, Any]] = []
    if domains is None:
        return {}, set(), missing
    ids = {d.id for d in devices}
    owners = {key: name for (_, key), name in domains.users().items() if key in ids}
    unrecorded = {key for _, key in domains.unrecorded() if key in ids}
    for (_, key), names in sorted(domains.claims().items()):
        if key in ids and len(names) > 1:
            warnings.append(
                f"{key} is claimed by {len(names)} domains ({', '.join(names)}); only one of them can start"
            )
    for a in domains.allocations:
        mode = modes.of(a)
        if mode.paravirtual:  # nothing on the host to own or to miss
            continue
        device = mode.device_id(a)
        if device is None or device not in ids:
            missing.append(
                {
                    "on_demand": a.on_demand,
                    "domain": a.domain,
                    "mode": a.mode,
                    "type_id": a.type_id,
                    "parent": a.parent,
                    "uuid": a.uuid,
                    "address": a.address,
                }
            )
    return owners, unrecorded, missing


# -- capacity -------------------------------------------------------------------------------------------------


def _stranded_fb(g: GpuRoom) -> int | None:
    return stranded_framebuffer(g.rooms.values(), g.free_fb, bool(g.running))


def _locked_to(g: _Gpu) -> list[str]:
    """What a GPU is locked to by what runs on it: type ids (one-type) or framebuffer sizes (one-size); nothing in
    mixed-size mode."""
    if g.rule == "one-type":
        return sorted({d.type_id for d in g.devices if d.type_id})
    if g.rule == "one-size":
        return [f"{s} MiB" for s in sorted({d.framebuffer_mib for d in g.devices if d.framebuffer_mib})]
    return []


def _type_rows(gpus: dict[str, _Gpu], rooms: dict[str, GpuRoom]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for g in gpus.values():
        for type_id, (t, room) in rooms[g.address].rooms.items():
            used, mx, free, reason, stranded = room.used, room.max, room.free, room.reason, room.stranded
            row = rows.setdefault(type_id, _type_row(type_id, t.name, t.profile, t.layout.value, t.framebuffer_mib))
            row["used"] += used
            row["free"] += free
            row["stranded"] += stranded
            row["reserved"] += room.reserved
            row["max"] = None if mx is None or row["max"] is None else row["max"] + mx
            row["gpus"].append(
                {
                    "gpu": g.address,
                    "used": used,
                    "free": free,
                    "max": mx,
                    "stranded": stranded,
                    "reserved": room.reserved,
                    "reason": reason or None,
                }
            )
        for type_id, count in sorted(Counter(d.type_id for d in g.devices if d.type_id).items()):
            if type_id in g.types:
                continue
            # running but offered nowhere any more (a layout C VF's list drops its own type; a full GPU lists none)
            d = next(d for d in g.devices if d.type_id == type_id)
            name = d.name or type_id
            row = rows.setdefault(type_id, _type_row(type_id, name, name, d.layout, d.framebuffer_mib))
            row["used"] += count
            row["max"] = None
            row["gpus"].append({"gpu": g.address, "used": count, "free": 0, "max": None, "stranded": 0, "reserved": 0,
                                "reason": "the driver offers no more"})  # fmt: skip
    for row in rows.values():
        fb = row["framebuffer_mib"]
        if fb is not None:
            row["framebuffer_used_mib"] = row["used"] * fb
            row["framebuffer_free_mib"] = row["free"] * fb
    return sorted(rows.values(), key=lambda row: type_id_order(row["type_id"]))


def _type_row(type_id: str, name: str, profile: str, layout: str, fb: int | None) -> dict[str, Any]:
    return {
        "type_id": type_id, "name": name, "profile": profile, "layout": layout, "framebuffer_mib": fb,
        "used": 0, "free": 0, "max": 0, "stranded": 0, "reserved": 0, "framebuffer_used_mib": None, "framebuffer_free_mib": None,
        "gpus": [],
    }  # fmt: skip


# -- rows -----------------------------------------------------------------------------------------------------


def _gpu_row(snap: HostSnapshot, g: _Gpu, owners: dict[str, str], room: GpuRoom) -> dict[str, Any]:
    fn = snap.functions.get(g.address)
    total_fb, used_fb = room.total_fb, room.used_fb
    domains = sorted({owners[d.id] for d in g.devices if d.id in owners})
    vfs = [snap.functions[v] for v in (fn.virtfns if fn else ()) if v in snap.functions]
    return {
        "address": g.address,
        "kind": "pf" if fn else "virtual",
        "vendor_id": fn.vendor_id if fn else None,
        "device_id": fn.device_id if fn else None,
        "model": snap.models.get(g.address),
        "layout": g.layout,
        "rule": g.rule,
        "driver": fn.driver if fn else None,
        "numa_node": fn.numa_node if fn else None,
        "iommu_group": fn.iommu_group if fn else None,
        "vfs_enabled": len(vfs) if fn and fn.sriov_total_vfs else None,
        "vfs_total": fn.sriov_total_vfs if fn else None,
        "devices": len(g.devices),
        "running_types": sorted({d.type_id for d in g.devices if d.type_id}),
        "locked_to": _locked_to(g),
        "framebuffer_total_mib": total_fb,
        "framebuffer_used_mib": used_fb if total_fb is not None else None,
        "framebuffer_free_mib": room.free_fb,
        "framebuffer_reserved_mib": room.reserved_fb if total_fb is not None else None,
        "framebuffer_stranded_mib": _stranded_fb(room),
        "whole_gpu_free": whole_gpu_room(len(g.devices)) if g.rule == "whole" else None,
        "domains": domains,
        **_mixed_size(snap, g.address),
    }


def _mixed_size(snap: HostSnapshot, gpu: str) -> dict[str, Any]:
    """A GPU in heterogeneous mode: its free framebuffer in pieces and the largest vGPU that still fits."""
    frag = fragmentation(snap, gpu)
    if frag is None:
        return {}
    return {"mixed_size": {"free_mib": frag.free_mib, "pieces": frag.pieces, "largest_mib": frag.largest_mib,
                           "largest_type": frag.largest, "summary": frag.describe()}}  # fmt: skip


def _function_rows(snap: HostSnapshot, devices: list[_Device]) -> list[dict[str, Any]]:
    """Every GPU function (PFs and VFs) with its layout, driver, NUMA node and IOMMU group."""
    on: dict[str, list[str]] = {}
    for d in devices:
        on.setdefault(d.parent, []).append(d.id)
    return [
        {
            "address": fn.address,
            "kind": "vf" if fn.is_vf else "pf",
            "physical_gpu": snap.physical_gpu(fn.address),
            "layout": snap.layouts.get(fn.address, Layout.PASSTHROUGH).value,
            "driver": fn.driver,
            "numa_node": fn.numa_node,
            "iommu_group": fn.iommu_group,
            "devices": on.get(fn.address, []),
        }
        for fn in snap.gpus
    ]


def _device_row(
    snap: HostSnapshot, d: _Device, owners: dict[str, str], unrecorded: set[str], known: bool
) -> dict[str, Any]:
    fn = snap.functions.get(d.gpu)
    return {
        "kind": d.kind,
        "id": d.id,
        "uuid": d.uuid,
        "parent": d.parent,
        "physical_gpu": d.gpu,
        "layout": d.layout,
        "type_id": d.type_id,
        "name": d.name,
        "framebuffer_mib": d.framebuffer_mib,
        "iommu_group": d.iommu_group,
        "numa_node": fn.numa_node if fn else None,
        "vgpu_params": d.vgpu_params,
        "domain": owners.get(d.id),
        "owned": (d.id in owners) if known else None,
        "recorded": (d.id not in unrecorded) if d.id in owners else None,
    }


def _summary(
    gpus: list[dict[str, Any]],
    types: list[dict[str, Any]],
    devices: list[dict[str, Any]],
    missing: list[dict[str, Any]],
    known: bool,
) -> dict[str, Any]:
    total = sum(g["framebuffer_total_mib"] or 0 for g in gpus)
    used = sum(g["framebuffer_used_mib"] or 0 for g in gpus)
    locked_free = sum(g["framebuffer_free_mib"] or 0 for g in gpus if g["locked_to"])
    return {
        "gpus": len(gpus),
        "devices": len(devices),
        "owned": sum(1 for d in devices if d["owned"]) if known else None,
        "unowned": sum(1 for d in devices if d["owned"] is False) if known else None,
        "not_recorded": sum(1 for d in devices if d["recorded"] is False) if known else None,
        "missing": len(missing),
        "types_offered": len(types),
        "framebuffer_total_mib": total,
        "framebuffer_used_mib": used,
        "framebuffer_free_mib": sum(g["framebuffer_free_mib"] or 0 for g in gpus),
        "framebuffer_reserved_mib": sum(g["framebuffer_reserved_mib"] or 0 for g in gpus),
        "framebuffer_locked_free_mib": locked_free,
        "framebuffer_stranded_mib": sum(g["framebuffer_stranded_mib"] or 0 for g in gpus),
    }
