"""Rows for the read commands (`vgpuadm gpus|types|devices|vms|show`), shaped as their JSON schemas in vgpuadm/schemas."""

from __future__ import annotations

from vgpuadm.catalog.rooms import gpu_rooms
from vgpuadm.errors import NotFoundError
from vgpuadm.model import (
    Allocation,
    HostSnapshot,
    Layout,
    VgpuType,
    device_key,
    mdev_key,
    mig_profile_name,
    moving,
    pci_address,
    pci_key,
)

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from vgpuadm.modes import Mode
    from vgpuadm.plan.domains import Domains


def gpu_rows(snap: HostSnapshot) -> list[dict[str, Any]]:
    rows = []
    for fn in snap.gpus:
        group = snap.iommu_groups.get(fn.iommu_group, ()) if fn.iommu_group is not None else ()
        rows.append(
            {
                "address": fn.address,
                "vendor_id": fn.vendor_id,
                "device_id": fn.device_id,
                "subsystem_vendor_id": fn.subsystem_vendor_id,
                "subsystem_device_id": fn.subsystem_device_id,
                "class": fn.class_code,
                "driver": fn.driver,
                "iommu_group": fn.iommu_group,
                "iommu_group_members": list(group),
                "numa_node": fn.numa_node,
                "boot_vga": fn.boot_vga,
                "layout": snap.layouts.get(fn.address, Layout.PASSTHROUGH).value,
                "sriov_total_vfs": fn.sriov_total_vfs,
                "sriov_num_vfs": fn.sriov_num_vfs,
                "physfn": fn.physfn,
                "virtfns": list(fn.virtfns),
            }
        )
    return rows


def type_row(t: VgpuType, fits_on_gpu: int, max_on_gpu: int | None) -> dict[str, Any]:
    """One parent's type: the kernel's own count for this parent (`available_instances`, what real hosts are
    checked against) and the capacity model's for the parent's physical GPU (`fits_on_gpu`: what `inventory` and
    `create` count, with the GPU's rules — one type or size per GPU, its maximum — and what runs on it), and the
    GPU's maximum of it (`max_on_gpu`: the driver's `max_instances` bounded by one vGPU per VF)."""
    return {
        "parent": t.parent,
        "layout": t.layout._value_,  # as .value, without enum's Python-level property (2,560 rows on big hosts)
        "type_id": t.type_id,
        "name": t.name,
        "profile": t.profile,
        "available_instances": t.available_instances,
        "fits_on_gpu": fits_on_gpu,
        "max_instances": t.max_instances,
        "max_on_gpu": max_on_gpu,
        "framebuffer_mib": t.framebuffer_mib,
        "device_api": t.device_api,
        "description": t.description,
        "attributes": dict(t.attributes),
        # the GPU-instance profile a MIG-backed type needs (H200X-1-18C → 1g.18gb); None for time-sliced types
        "mig_profile": mig_profile_name(t.name) if "mig_slices" in t.attributes else None,
    }


def type_rows(
    snap: HostSnapshot, gpu: str | None = None, available: bool = False, type_: str | None = None
) -> list[dict[str, Any]]:
    types = all_types = snap.types()
    if gpu is not None:
        gpu = normalize_address(gpu)
        known = {t.parent for t in types} | set(snap.functions)
        if gpu not in known:
            raise NotFoundError(
                f"No GPU or mdev parent {gpu} on this host", snap.skipped(gpu, "run `vgpuadm gpus` to list them")
            )
        # A PF also stands for its VFs: `--gpu <PF>` lists the types of every VF on it.
        types = [t for t in types if t.parent == gpu or snap.physical_gpu(t.parent) == gpu]
    rooms = gpu_rooms(snap, types=all_types)
    fits = {(g, tid): (room.free, room.max) for g, r in rooms.items() for tid, (_, room) in r.rooms.items()}
    gpu_of = {parent: snap.physical_gpu(parent) for parent in {t.parent for t in types}}

    def fits_on(t: VgpuType) -> tuple[int, int | None]:
        """(how many more fit on the parent's GPU, the GPU's maximum of the type)."""
        return fits.get((gpu_of[t.parent], t.type_id), (0, t.max_instances))

    if available:  # what fits now: the parent takes one and its GPU's rules let one more of the type in
        types = [t for t in types if t.available_instances > 0 and fits_on(t)[0] > 0]
    if type_ is not None:
        wanted = type_.strip().lower()
        types = [t for t in types if wanted in _type_names(t.type_id, t.name, t.profile)]
    # fits_on inlined: one call less per row (20,480 rows on a 1,024-VF host)
    return [type_row(t, *fits.get((gpu_of[t.parent], t.type_id), (0, t.max_instances))) for t in types]


def _type_names(type_id: str, name: str | None, profile: str | None = None) -> set[str]:
    """What `--type` may say for a type: its id, its name or its profile (the name's last word), any case."""
    names = {type_id.lower()}
    if name:
        names |= {name.lower(), name.split()[-1].lower()}
    if profile:
        names.add(profile.lower())
    return names


def add_owners(rows: list[dict[str, Any]], users: dict[tuple[str, str], str] | None) -> list[dict[str, Any]]:
    """Give each device row its `owner` (the domain referencing it, else None) and `owned` (None: unknown, when
    `users` — Domains.users() of this host — could not be read)."""
    for r in rows:
        key = mdev_key(r["uuid"]) if r["uuid"] else pci_key(r["id"])  # an mdev row has its UUID, a VF row none
        owner = users.get(key) if users is not None else None
        r["owner"] = owner
        r["owned"] = None if users is None else owner is not None
    return rows


def filter_device_rows(
    rows: list[dict[str, Any]],
    *,
    vm: str | None = None,
    gpu: str | None = None,
    uuid: str | None = None,
    type_: str | None = None,
) -> list[dict[str, Any]]:
    """The rows matching every filter given: owning domain (rows need add_owners), GPU (the parent or the physical
    GPU), device id (mdev UUID or VF address) and type (id, name or profile)."""
    if vm is not None:
        rows = [r for r in rows if r.get("owner") == vm]
    if gpu is not None:
        address = normalize_address(gpu)
        rows = [r for r in rows if address in (r["parent"], r["physical_gpu"])]
    if uuid is not None:
        key = device_key(uuid)
        rows = [r for r in rows if key in (r["id"], r["uuid"])]
    if type_ is not None:
        wanted = type_.strip().lower()
        rows = [r for r in rows if wanted in _type_names(r["type_id"], r["name"])]
    return rows


def device_rows(snap: HostSnapshot) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for m in sorted(snap.mdevs.values(), key=lambda m: (m.parent, m.uuid)):
        parent = snap.mdev_parents.get(m.parent)
        rows.append(
            {
                "kind": "mdev",
                "id": m.uuid,
                "uuid": m.uuid,
                "parent": m.parent,
                "physical_gpu": snap.physical_gpu(m.parent),
                "layout": (parent.layout if parent else Layout.MDEV_PF).value,
                "type_id": m.type_id,
                "name": _type_name(snap, m.parent, m.type_id),
                "iommu_group": m.iommu_group,
                "vgpu_params": m.vgpu_params,
            }
        )
    for vf in sorted(snap.vendor_vfs.values(), key=lambda v: v.address):
        if not vf.in_use:
            continue
        fn = snap.functions.get(vf.address)
        rows.append(
            {
                "kind": "vf",
                "id": vf.address,
                "uuid": None,
                "parent": vf.address,
                "physical_gpu": snap.physical_gpu(vf.address),
                "layout": Layout.VENDOR_VFIO.value,
                "type_id": vf.current_type_id,
                "name": _vf_type_name(snap, vf.physfn, vf.current_type),
                "iommu_group": fn.iommu_group if fn else None,
                "vgpu_params": vf.vgpu_params,
            }
        )
    return rows


def _type_name(snap: HostSnapshot, parent: str, type_id: str) -> str | None:
    p = snap.mdev_parents.get(parent)
    for t in p.types if p else ():
        if t.type_id == type_id:
            return t.name
    return None


def _vf_type_name(snap: HostSnapshot, physfn: str | None, type_num: int) -> str | None:
    """A running VF's own list no longer shows its type; its siblings' lists (or its own history) do."""
    for vf in snap.vendor_vfs.values():
        if vf.physfn == physfn:
            for num, name in vf.creatable:
                if num == type_num:
                    return name
    return None


def normalize_address(addr: str) -> str:
    """Accept 01:00.0 as 0000:01:00.0; lower-case hex (the one grammar: vgpuadm.model.pci_address)."""
    return pci_address(addr)


def vm_rows(domains: Domains) -> list[dict[str, Any]]:
    """`vgpuadm vms` (schemas/vms.schema.json): each of this host's domains with its state and the devices its
    vgpuadm metadata records."""
    return [
        {
            "name": name,
            "uuid": d.uuid,
            "state": "running" if d.running else "shut off",
            "devices": [
                {"mode": str(a.mode), "type_id": a.type_id, "parent": a.parent, "uuid": a.uuid, "address": a.address}
                for a in d.allocations
            ],
        }
        for name, d in sorted(domains.by_name.items())
    ]


def vm_view(
    snap: HostSnapshot,
    name: str,
    uuid: str | None,
    running: bool | None,
    allocations: Iterable[Allocation],
    changed: str | None,
    mode_of: Callable[[Allocation], Mode],
) -> dict[str, Any]:
    """`vgpuadm show --vm NAME` (schemas/show.schema.json): what the domain owns as its vgpuadm metadata records
    it, where each device is (parent, physical GPU and its model), its vgpu_params and options, whether it exists
    on the host now, whether it is made on demand (at VM start) or kept, and when vgpuadm last changed them.
    `mode_of` is the registry's modes.of, passed in: this module, on the fast path of the device lists, does not
    import the modes (nor the steps and libvirt XML they import)."""
    devices = []
    allocations = list(allocations)
    for a in sorted(allocations, key=lambda a: a.slot):
        mode = mode_of(a)
        where = a.parent or a.address
        gpu = snap.physical_gpu(where) if where else None
        devices.append(
            {
                "slot": a.slot,
                "mode": str(a.mode),
                "id": mode.device_id(a),
                "type_id": a.type_id,
                "name": _allocation_type_name(snap, a),
                "parent": a.parent,
                "physical_gpu": gpu,
                "model": snap.models.get(gpu) if gpu else None,
                "params": a.params,
                "options": dict(sorted((k, v) for k, v in a.extra.items() if k != "on_demand")),
                "on_demand": a.on_demand,
                "present": mode.present(snap, a),
            }
        )
    view = {"domain": name, "uuid": uuid, "running": running, "changed": changed, "devices": devices}
    state = moving(allocations)
    return {**view, "moving": state} if state else view


def now_line(now: dict[str, Any]) -> str:
    """A device's `now` (show --vm: the driver's figures, report/usage.py) as `31 % GPU, 3.1 of 4 GiB` (`GPU n/a`:
    no utilization, as on a GPU with MIG on)."""
    gpu = "GPU n/a" if now["gpu_percent"] is None else f"{now['gpu_percent']} % GPU"
    used, total = now["fb_used_mib"], now["fb_total_mib"]
    if used is None or total is None:
        return gpu
    return f"{gpu}, {round(used / 1024, 1):g} of {round(total / 1024, 1):g} GiB"


def _allocation_type_name(snap: HostSnapshot, a: Allocation) -> str | None:
    if not a.type_id:
        return None
    for t in snap.types():
        if t.type_id == a.type_id:
            return t.name
    return None
