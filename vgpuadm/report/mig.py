"""Rows of `vgpuadm mig status|profiles|instances --json` (schemas mig-status, mig-profiles, mig-instances). Pure."""

from __future__ import annotations

from typing import Any

from vgpuadm.host.mig import MigGpu


def status_rows(gpus: list[MigGpu]) -> list[dict[str, Any]]:
    return [
        {"gpu_index": g.modes.index, "address": g.modes.address, "product": g.modes.product,
         "mig_current": g.modes.mig_current, "mig_pending": g.modes.mig_pending,
         "virtualization_mode": g.modes.virtualization_mode, "host_vgpu_mode": g.modes.host_vgpu_mode,
         "instances": len(g.instances)}
        for g in gpus
    ]  # fmt: skip


def profile_rows(gpus: list[MigGpu], gpu: str | None = None) -> list[dict[str, Any]]:
    out = []
    for g in gpus:
        if gpu not in (None, g.modes.address):
            continue
        for p in g.profiles:
            starts, size = g.placements.get(p.profile_id, ((), 0))
            out.append({
                "gpu_index": g.modes.index, "address": g.modes.address, "name": p.name, "profile_id": p.profile_id,
                "free": p.free, "total": p.total, "memory_gib": p.memory_gib, "p2p": p.p2p, "sm": p.sm, "ce": p.ce,
                "dec": p.dec, "enc": p.enc, "jpeg": p.jpeg, "ofa": p.ofa,
                "placements": [{"start": s, "size": size} for s in starts],
            })  # fmt: skip
    return out


def instance_rows(gpus: list[MigGpu], owners: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`owners` maps a VF address to the VM owning its vGPU; an instance's owner is its first user's VM."""
    out = []
    for g in gpus:
        for i in g.instances:
            users = g.users.get(i.instance_id, ())
            owner = next((owners[u] for u in users if owners and u in owners), None)
            out.append({
                "gpu_index": g.modes.index, "address": g.modes.address, "name": i.name, "profile_id": i.profile_id,
                "instance_id": i.instance_id, "start": i.start, "size": i.size, "owner": owner,
                "vgpus": list(users),
            })  # fmt: skip
    return out
