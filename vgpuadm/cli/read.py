"""Read commands: `vgpuadm gpus`, `vgpuadm types`, `vgpuadm devices` — rich tables, or JSON with --json.

These functions take plain arguments so that the fast path (cli/fast.py) runs them without importing typer."""

from __future__ import annotations

from vgpuadm.cli.console import Console
from vgpuadm.host.discover import snapshot
from vgpuadm.host.root import HostRoot
from vgpuadm.model import HostSnapshot
from vgpuadm.report.listing import device_rows, gpu_rows, type_rows


def _snapshot(console: Console, root: str | None, types: bool = True) -> HostSnapshot:
    # Read-only: the plain Sysfs of the root, without the simulated kernel (only writes need it).
    snap = snapshot(HostRoot(root).sysfs(), types=types)
    for w in snap.warnings:
        console.warn(w)
    return snap


def gpus(console: Console, root: str | None, as_json: bool) -> None:
    rows = gpu_rows(_snapshot(console, root, types=False))
    if as_json:
        console.json(rows)
        return
    console.table(
        "GPUs",
        ["address", "vendor:device", "driver", "layout", "IOMMU group", "NUMA", "VFs"],
        [
            (
                r["address"],
                f"{r['vendor_id'][2:]}:{r['device_id'][2:]}",
                r["driver"],
                r["layout"],
                r["iommu_group"],
                r["numa_node"],
                f"{r['sriov_num_vfs']}/{r['sriov_total_vfs']}" if r["sriov_total_vfs"] is not None else None,
            )
            for r in rows
        ],
    )


def types(console: Console, root: str | None, gpu: str | None, available: bool, as_json: bool) -> None:
    rows = type_rows(_snapshot(console, root), gpu, available)
    if as_json:
        console.json(rows)
        return
    console.table(
        "vGPU types",
        ["parent", "layout", "type", "name", "available", "max", "framebuffer MiB"],
        [
            (r["parent"], r["layout"], r["type_id"], r["name"], r["available_instances"], r["max_instances"],
             r["framebuffer_mib"])
            for r in rows
        ],
    )  # fmt: skip


def devices(console: Console, root: str | None, as_json: bool) -> None:
    rows = device_rows(_snapshot(console, root))
    if as_json:
        console.json(rows)
        return
    console.table(
        "vGPU devices",
        ["kind", "id", "parent", "type", "name", "IOMMU group", "vgpu_params"],
        [(r["kind"], r["id"], r["parent"], r["type_id"], r["name"], r["iommu_group"], r["vgpu_params"]) for r in rows],
    )
