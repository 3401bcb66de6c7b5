"""Read commands: `vgpuadm gpus`, `vgpuadm types`, `vgpuadm devices` — rich tables, or JSON with --json.

These functions take plain arguments so that the fast path (cli/fast.py) runs them without importing typer."""

from __future__ import annotations

from vgpuadm import api
from vgpuadm.cli.console import Console
from vgpuadm.model import HostSnapshot
from vgpuadm.report.cells import OWNER_UNKNOWN, UNOWNED, numa_cell
from vgpuadm.report.listing import (
    add_owners,
    device_rows,
    filter_device_rows,
    gpu_rows,
    normalize_address,
    now_line,
    type_rows,
)

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from typing import Any


def _snapshot(
    console: Console, root: str | None, types: bool = True, names: bool = False, details: bool = True
) -> HostSnapshot:
    # Read-only: the plain Sysfs of the root, without the simulated kernel (only writes need it).
    snap = api.read_host(api.HostRoot(root).sysfs(), types=types, names=names, details=details)
    for w in snap.warnings:
        console.warn(w)
    return snap


def gpus(console: Console, root: str | None, as_json: bool) -> None:
    snap = _snapshot(console, root, types=False, names=not as_json)
    rows = gpu_rows(snap)
    if as_json:
        console.json(rows)
        return
    console.table(
        "GPUs",
        ["address", "vendor:device", "model", "driver", "layout", "IOMMU group", "NUMA", "VFs"],
        [
            (
                r["address"],
                f"{r['vendor_id'][2:]}:{r['device_id'][2:]}",
                snap.models.get(r["address"]),
                r["driver"],
                r["layout"],
                r["iommu_group"],
                numa_cell(r["numa_node"]),
                f"{r['sriov_num_vfs']}/{r['sriov_total_vfs']}" if r["sriov_total_vfs"] is not None else None,
            )
            for r in rows
        ],
        keep=("address",),
        optional=("model",),
        empty="no GPU found: see `vgpuadm doctor`",
    )


def types(
    console: Console,
    root: str | None,
    gpu: str | None,
    available: bool,
    as_json: bool,
    type_: str | None = None,
    per_vf: bool = False,
) -> None:
    snap = _snapshot(console, root, names=not as_json, details=False)  # no type row shows NUMA, subsystem ids …
    rows = type_rows(snap, gpu, available, type_)
    if gpu is not None and not rows and not type_rows(snap, gpu):
        address = normalize_address(gpu)
        if address in snap.functions:  # a GPU that lists nothing: say why (vfio-pci, no driver, no VFs …)
            fn = snap.functions[address]
            model = snap.models.get(address) or api.model_names(snap.root, {(fn.vendor_id, fn.device_id)}).get(
                (fn.vendor_id, fn.device_id)
            )
            reason, hint = api.why_no_types(snap, address)
            label = f"{address} ({model})" if model else address
            console.warn(f"GPU {label} offers no vGPU types: {reason}; {hint}")
    if as_json:
        console.json(rows)
        return
    if not per_vf:
        _type_summary(console, snap, rows, _no_types(gpu, available, type_))
        return
    console.table(
        "vGPU types",
        ["parent", "model", "layout", "type", "name", "available", "driver max", "framebuffer MiB"],
        [
            (r["parent"], snap.models.get(r["parent"]) or snap.models.get(snap.physical_gpu(r["parent"])),
             r["layout"], r["type_id"], r["name"], r["available_instances"], r["max_instances"],
             r["framebuffer_mib"])
            for r in rows
        ],
        keep=("parent",),
        optional=("model",),
        empty=_no_types(gpu, available, type_),
    )  # fmt: skip


def _type_summary(console: Console, snap: HostSnapshot, rows: list[dict[str, Any]], empty: str) -> None:
    """One row per GPU and type: a GPU's VFs (layouts B, C, VF pools) all list the same types, so per VF an H200
    is 144 identical rows. `fits now` is the capacity model's count for the GPU (fits_on_gpu: what `inventory`
    and `create` give), `max per GPU` the most the GPU holds (the driver's max bounded by its VFs)."""
    summary: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    for r in rows:
        gpu = snap.physical_gpu(r["parent"])
        first, vfs = summary.get((gpu, r["type_id"]), (r, 0))
        summary[(gpu, r["type_id"])] = (first, vfs + (r["parent"] != gpu))
    table = [(gpu, snap.models.get(gpu), r["layout"], r["type_id"], r["name"], r["fits_on_gpu"], r["max_on_gpu"],
              r["framebuffer_mib"], vfs or None) for (gpu, _), (r, vfs) in summary.items()]  # fmt: skip
    console.table(
        "vGPU types per GPU (--per-vf: one row per VF)",
        ["GPU", "model", "layout", "type", "name", "fits now", "max per GPU", "framebuffer MiB", "on VFs"],
        table,
        optional=("model", "on VFs"),
        empty=empty,
    )


def _no_types(gpu: str | None, available: bool, type_: str | None) -> str:
    if available:
        return "no type has a free instance now (without --available: every type, with its maximum)"
    if gpu is not None or type_ is not None:
        return "no vGPU type matches (without --gpu/--type: every type)"
    return "no GPU offers vGPU types: see `vgpuadm doctor` (and `vgpuadm gpus` for the GPUs found)"


def devices(
    console: Console,
    root: str | None,
    as_json: bool,
    *,
    connect: str | None = None,
    owners: bool | None = None,
    vm: str | None = None,
    gpu: str | None = None,
    uuid: str | None = None,
    type_: str | None = None,
) -> None:
    """`owners` (default: for the table, not for JSON) reads who owns each device from libvirt; when libvirt cannot
    be reached the owner is "owner unknown" (a warning says why), and only `--vm` fails."""
    if owners is None:
        owners = not as_json
    owners = owners or vm is not None
    if owners:
        snap, users, why = api.device_users(root, connect=connect)
        for w in snap.warnings:
            console.warn(w)
        if users is None:
            if vm is not None:
                from vgpuadm.errors import LibvirtError

                raise LibvirtError(f"cannot tell which devices {vm} owns: {why}",
                                   "check libvirt answers (virsh list --all) or pick the URI with --connect")  # fmt: skip
            console.warn(f"owners unknown: {why}")
        rows = add_owners(device_rows(snap), users)
    else:
        rows = device_rows(_snapshot(console, root))
    rows = filter_device_rows(rows, vm=vm, gpu=gpu, uuid=uuid, type_=type_)
    if as_json:
        console.json(rows)
        return
    console.table(
        "vGPU devices",
        ["id", "parent", "type", "owner", "name", "kind", "IOMMU group", "vgpu_params"],
        [
            (r["id"], r["parent"], r["type_id"], _owner(r), r["name"], r["kind"], r["iommu_group"], r["vgpu_params"])
            for r in rows
        ],
        keep=("id", "parent"),
        optional=("vgpu_params", "IOMMU group", "kind", "name"),
        empty="no device matches (without filters: every vGPU device)"
        if (vm, gpu, uuid, type_) != (None, None, None, None)
        else "no vGPU devices: give a VM one with `vgpuadm create --type T --vm NAME`",
    )


def _owner(row: dict[str, object]) -> str:
    if row["owned"] is None:
        return OWNER_UNKNOWN
    return str(row["owner"]) if row["owner"] else UNOWNED


def show(console: Console, root: str | None, vm: str, as_json: bool, connect: str | None = None) -> None:
    """`vgpuadm show --vm NAME`: one VM's devices, where they are, their params, and whether they exist now."""

    view = api.show_vm(root, vm, connect=connect)
    if as_json:
        console.json(view)
        return
    state = {True: "running", False: "shut off", None: "unknown"}[view["running"]]
    devices = view["devices"]
    console.line(f"domain {view['domain']} ({state}), uuid {view['uuid'] or '-'}: {len(devices)} vgpuadm device(s)")
    if view["changed"]:
        console.line(f"last changed by vgpuadm: {view['changed']}")
    if view.get("moving"):
        console.line(f"moving: {view['moving']} (vgpuadm migrate: `migrate run` again goes on, `migrate abort` "
                     "goes back)")  # fmt: skip
    if not devices:
        console.line(f"it owns nothing vgpuadm made; give it one: vgpuadm create --type T --vm {vm}")
        return
    console.table(
        f"devices of {view['domain']}",
        ["slot", "id", "mode", "type", "name", "GPU", "model", "params", "on demand", "present"],
        [
            (d["slot"], d["id"], d["mode"], d["type_id"], d["name"], d["physical_gpu"], d["model"], d["params"],
             "yes" if d["on_demand"] else "no", _presence(d))
            for d in devices
        ],
        keep=("id", "GPU"),
        optional=("params", "model", "name", "on demand", "mode"),
    )  # fmt: skip
    options = [f"slot {d['slot']}: " + ", ".join(f"{k}={v}" for k, v in d["options"].items())
               for d in devices if d["options"]]  # fmt: skip
    for line in options:
        console.line(f"options {line}")
    for d in devices:
        if "now" in d:  # the driver reports a guest running on it
            console.line(f"now slot {d['slot']}: {now_line(d['now'])}")


def _presence(device: dict[str, object]) -> str:
    if device["present"]:
        return "yes"
    return "no (made when the VM starts)" if device["on_demand"] else "MISSING (vgpuadm restore)"
