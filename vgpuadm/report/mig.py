"""Rows of `vgpuadm mig status|profiles|instances --json` (schemas mig-status, mig-profiles, mig-instances). Pure."""

from __future__ import annotations

from typing import Any

from vgpuadm.catalog.mig import MigGpu


def status_rows(gpus: list[MigGpu]) -> list[dict[str, Any]]:
    return [
        {"gpu_index": g.index, "address": g.address, "product": g.product, "mig_current": g.mig_current,
         "mig_pending": g.mig_pending, "virtualization_mode": g.virtualization_mode,
         "host_vgpu_mode": g.host_vgpu_mode, "instances": len(g.instances)}
        for g in gpus
    ]  # fmt: skip


def profile_rows(gpus: list[MigGpu], gpu: str | None = None) -> list[dict[str, Any]]:
    return [
        {"gpu_index": g.index, "address": g.address, "name": p.name, "profile_id": p.profile_id, "free": p.free,
         "total": p.total, "memory_gib": p.memory_gib, "p2p": p.p2p, "sm": p.sm, "ce": p.ce, "dec": p.dec,
         "enc": p.enc, "jpeg": p.jpeg, "ofa": p.ofa, "placements": [{"start": s, "size": p.size} for s in p.starts]}
        for g in gpus if gpu in (None, g.address) for p in g.profiles
    ]  # fmt: skip


def instance_rows(gpus: list[MigGpu], owners: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`owners` maps a vGPU device (VF address) to the VM owning it; an instance's owner is its first user's VM."""
    return [
        {"gpu_index": g.index, "address": g.address, "name": i.name, "profile_id": i.profile_id,
         "instance_id": i.instance_id, "start": i.start, "size": i.size,
         "owner": next((owners[u] for u in i.users if owners and u in owners), None), "vgpus": list(i.users)}
        for g in gpus for i in g.instances
    ]  # fmt: skip
