"""Rows of `vgpuadm mig status|profiles|instances --json` (schemas mig-status, mig-profiles, mig-instances). Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vgpuadm.catalog.mig import MigGpu
from vgpuadm.model import Allocation


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


Made = dict[tuple[str, int, int], str]  # (GPU, profile id, start) → the VM vgpuadm made the instance for


def made_by(allocations: list[Allocation], physical_gpu: Callable[[str], str]) -> Made:
    """The GPU instances vgpuadm made, from the domains' metadata (`mig_instance` = profile id:start)."""
    return {k: a.domain for k, a in _made(allocations, physical_gpu).items()}


def _made(allocations: list[Allocation], physical_gpu: Callable[[str], str]) -> dict[tuple[str, int, int], Allocation]:
    out: dict[tuple[str, int, int], Allocation] = {}
    for a in allocations:
        pid, _, start = a.extra.get("mig_instance", "").partition(":")
        if pid.isdecimal() and start.isdecimal():
            out.setdefault((physical_gpu(a.address or a.parent or ""), int(pid), int(start)), a)
    return out


def instance_rows(
    gpus: list[MigGpu],
    owners: dict[str, str] | None = None,
    made: Made | None = None,
) -> list[dict[str, Any]]:
    """`owners` maps a vGPU device (VF address, mdev UUID) to the VM owning it; an instance's owner is its first user's VM.
    `state`: used (a vGPU runs on it), free, or by-hand (free and no VM's metadata says vgpuadm made it); `made_for`:
    the VM vgpuadm made it for (None: made by hand, or ownership unknown when `made` is None)."""
    rows = []
    for g in gpus:
        for i in g.instances:
            key = (g.address, i.profile_id, i.start)
            made_for = (made or {}).get(key)
            users = i.users
            state = "used" if users else "free" if made_for or made is None else "by-hand"
            rows.append({"gpu_index": g.index, "address": g.address, "name": i.name, "profile_id": i.profile_id,
                         "instance_id": i.instance_id, "start": i.start, "size": i.size,
                         "owner": next((owners[u] for u in users if owners and u in owners), None),
                         "vgpus": list(users), "state": state, "made_for": made_for})  # fmt: skip
    return rows


def gpu_occupancy(g: MigGpu, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One GPU's MIG part of the inventory: its mode, instances (instance_rows) and how many are used, free or
    made by hand, and the slots still free."""
    mine = [r for r in rows if r["address"] == g.address]
    taken = {s for r in mine for s in range(r["start"], r["start"] + r["size"])}
    slots = max((s + p.size for p in g.profiles for s in p.starts), default=0)
    return {
        "mode": g.mig_current,
        "pending": g.mig_pending,
        "slots": slots,
        "slots_free": slots - len(taken),
        "used": sum(1 for r in mine if r["state"] == "used"),
        "free": sum(1 for r in mine if r["state"] != "used"),
        "by_hand": sum(1 for r in mine if r["state"] == "by-hand"),
        "instances": [{k: r[k] for k in ("name", "profile_id", "instance_id", "start", "size", "state", "owner",
                                          "made_for", "vgpus")} for r in mine],
    }  # fmt: skip
