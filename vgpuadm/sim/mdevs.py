"""Simulated mdev core and vendor drivers: `create` and `remove` with the kernel's effects and errno, and the
`available_instances` arithmetic of every rule (reference §1.2, §1.3, §2.4, §3.2, §4.1, §4.4, §8.1).

Rules (marker `rule` per parent):
- nvidia-one-type (layout A, pre-Ampere): with k mdevs of type T, T reads max−k and every other type 0; NVIDIA
  refuses with EINVAL [O mdevctl #115].
- nvidia-one-size (layout B): one framebuffer size per physical GPU (the A2 recording); each VF hosts one mdev;
  a size's types stay creatable while fewer than their max_instance vGPUs run on the GPU [I arithmetic].
- pool: types draw on one budget (mtty ports, mdpy count, mbochs MiB, GVT-g aperture); available = free // cost
  (the minimum over resources for GVT-g); exhaustion gives the pool's errno (ENOSPC, EUSERS for mdpy).
"""

from __future__ import annotations

import errno as errno_mod
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vgpuadm.model import describe_nvidia_name
from vgpuadm.sim import mig, migmodel
from vgpuadm.sim import usage as vgpu_usage
from vgpuadm.sim.state import MdevRecord, SimHost, fail, kstrtoul
from vgpuadm.sim.tree import IOMMU_GROUPS, MDEV_BUS, MDEV_DEVICES

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def size_key(type_info: dict[str, Any]) -> tuple[int, bool]:
    """Framebuffer size and MIG-backed-ness: equal-size mode groups types by this [I for the MIG part]."""
    return int(type_info.get("fb_mib") or 0), _is_mig(str(type_info.get("name") or ""))


@lru_cache(maxsize=4096)
def _is_mig(name: str) -> bool:
    return describe_nvidia_name(name).slices is not None


def domain(host: SimHost, parent: str) -> list[str]:
    """The parents whose counts change when `parent` gains or loses an mdev."""
    info = host.parent_info(parent)
    if info is None:
        return []
    if info["rule"] == "nvidia-one-size":
        gpu = info["physical_gpu"]
        return [n for n in host.parent_names() if (host.parent_info(n) or {}).get("physical_gpu") == gpu]
    if info["rule"] == "pool":
        return [n for n in host.parent_names() if (host.parent_info(n) or {}).get("pool") == info["pool"]]
    return [parent]


@dataclass(frozen=True)
class Usage:
    """What a list of mdevs uses: types per parent, running type models per physical GPU, budget per pool."""

    by_parent: dict[str, list[str]]
    by_gpu: dict[str, list[dict[str, Any]]]
    by_pool: dict[str, dict[str, int]]


def usage(host: SimHost, mdevs: dict[str, MdevRecord]) -> Usage:
    by_parent: dict[str, list[str]] = {}
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    by_pool: dict[str, dict[str, int]] = {}
    for m in mdevs.values():
        by_parent.setdefault(m.parent, []).append(m.type_id)
        info = host.parent_info(m.parent)
        if info is None or m.type_id not in info["types"]:
            continue
        t = info["types"][m.type_id]
        by_gpu.setdefault(info["physical_gpu"], []).append(t)
        if info.get("pool"):
            used = by_pool.setdefault(info["pool"], {})
            for key, amount in t["cost"].items() if isinstance(t["cost"], dict) else [("", t["cost"])]:
                used[key] = used.get(key, 0) + int(amount)
    return Usage(by_parent, by_gpu, by_pool)


def available(host: SimHost, parent: str, type_id: str, used: Usage) -> int:
    info = host.parent_info(parent)
    if info is None or type_id not in info["types"]:
        return 0
    t = info["types"][type_id]
    rule = info["rule"]
    mine = used.by_parent.get(parent, [])
    if rule == "nvidia-one-type":
        if any(other != type_id for other in mine):
            return 0
        return max(int(t["max"]) - len(mine), 0)
    if rule == "nvidia-one-size":
        if mine:
            return 0
        state = mig.state_of_pf(host, info["physical_gpu"])
        if not migmodel.offered(state, type_id):
            return 0
        if migmodel.is_mig_type(state, type_id):  # listed while a matching instance is free (reference §3.5)
            return 1 if state is not None and migmodel.free_instance(state, type_id) else 0
        running = used.by_gpu.get(info["physical_gpu"], [])
        if any(size_key(r) != size_key(t) for r in running):
            return 0
        return 1 if len(running) < int(t["max"]) else 0
    # pool
    pool = host.model["pools"][info["pool"]]
    spent = used.by_pool.get(info["pool"], {})
    cost = t["cost"]
    if isinstance(cost, dict):
        return min((int(pool["capacity"][k]) - spent.get(k, 0)) // int(c) for k, c in cost.items())
    return max((int(pool["capacity"]) - spent.get("", 0)) // int(cost), 0)


def recompute(
    host: SimHost,
    parents: list[str],
    mdevs: dict[str, MdevRecord] | None = None,
    before: dict[str, MdevRecord] | None = None,
) -> None:
    """Rewrite every changed available_instances of these parents (registered ones only). With `before` (the mdev
    list the tree currently shows counts for) only values that differ are written, without reading the files."""
    now = usage(host, host.mdevs() if mdevs is None else mdevs)
    then = usage(host, before) if before is not None else None
    for name in parents:
        info = host.parent_info(name)
        if info is None or not host.exists(f"{info['path']}/mdev_supported_types"):
            continue
        for type_id in info["types"]:
            value = available(host, name, type_id, now)
            path = f"{info['path']}/mdev_supported_types/{type_id}/available_instances"
            if then is None or mig.state_of_pf(host, info.get("physical_gpu")):  # instances are not in `then`
                host.set_attr(path, value)
            elif available(host, name, type_id, then) != value:
                host.tree.raw(path, f"{value}\n".encode(), 0o444)


def create(host: SimHost, create_path: str, data: bytes) -> None:
    """`echo UUID > <parent>/mdev_supported_types/<type>/create` (create_path is canonical)."""
    # mdev_sysfs.c create_store: the buffer is 36 bytes or 37 (the 37th is not looked at, normally "\n").
    if len(data) not in (36, 37) or not _UUID.match(data[:36].decode("ascii", errors="replace")):
        fail(errno_mod.EINVAL)
    uuid = data[:36].decode().lower()  # the kernel names the device with %pUl
    type_dir = os.path.dirname(create_path)
    type_id = os.path.basename(type_dir)
    dev = os.path.dirname(os.path.dirname(type_dir))
    parent = os.path.basename(dev)
    info = host.parent_info(parent)
    if info is None or type_id not in info["types"]:
        fail(errno_mod.ENODEV)
    mdevs = host.mdevs()
    if uuid in mdevs:
        fail(errno_mod.EEXIST)
    if available(host, parent, type_id, usage(host, mdevs)) <= 0:
        if info["rule"] == "pool":
            fail(getattr(errno_mod, host.model["pools"][info["pool"]]["errno"]))
        fail(errno_mod.EINVAL)
    tree = host.tree
    path = f"{dev}/{uuid}"
    if migmodel.is_mig_type(mig.state_of_pf(host, info["physical_gpu"]), type_id):
        mig.bind(host, info["physical_gpu"], type_id, path)
    tree.mkdir(path)
    tree.link(f"{path}/mdev_type", type_dir)
    tree.wo(f"{path}/remove")
    group = host.free_group()
    tree.iommu_member(group, path, uuid)
    if type_id.startswith("nvidia-"):
        tree.attr(f"{path}/nvidia/vgpu_params", "")
    tree.link(f"{type_dir}/devices/{uuid}", path)
    tree.vfio_node(group)
    tree.link(f"{MDEV_DEVICES}/{uuid}", path)  # last: discovery lists mdevs from here
    after = {**mdevs, uuid: MdevRecord(uuid, parent, type_id, path)}
    recompute(host, domain(host, parent), after, before=mdevs)


def remove_store(host: SimHost, remove_path: str, data: bytes) -> None:
    """`echo 1 > <mdev>/remove`: kstrtoul base 0; 0 is accepted and does nothing."""
    if kstrtoul(data, 0) == 0:
        return
    mdev_dir = os.path.dirname(remove_path)
    parent, uuid = os.path.basename(os.path.dirname(mdev_dir)), os.path.basename(mdev_dir)
    before = host.mdevs()
    drop(host, uuid, mdev_dir)
    after = {u: m for u, m in before.items() if u != uuid}
    recompute(host, domain(host, parent), after, before=before)


def drop(host: SimHost, uuid: str, path: str) -> None:
    """Destroy one mdev and everything that points at it (no count updates; callers recompute)."""
    tree = host.tree
    tree.unlink(f"{MDEV_DEVICES}/{uuid}")
    type_id = host.link_name(f"{path}/mdev_type")
    if type_id:
        tree.unlink(f"{os.path.dirname(path)}/mdev_supported_types/{type_id}/devices/{uuid}")
    group = host.group_of(path)
    if group is not None:
        tree.vfio_node(group, present=False)
        tree.unlink(f"{IOMMU_GROUPS}/{group}/devices/{uuid}")
        tree.rmdir(f"{IOMMU_GROUPS}/{group}/devices")
        tree.rmdir(f"{IOMMU_GROUPS}/{group}")
    canonical = host.resolve(path)
    tree.rmtree(path)
    vgpu_usage.forget(host, [canonical])  # a removed vGPU is held by nobody
    mig.unbind(host, canonical)  # and its GPU instance is free again


def unregister_parent(host: SimHost, name: str, dev: str) -> None:
    """The parent's driver unbinds: its mdevs go, then its types and its mdev_bus entry."""
    for m in host.mdevs().values():
        if m.parent == name and os.path.dirname(m.path) == dev:
            drop(host, m.uuid, m.path)
    host.tree.rmtree(f"{dev}/mdev_supported_types")
    host.tree.unlink(f"{MDEV_BUS}/{name}")


def register_parent(host: SimHost, name: str) -> None:
    """A PF's mdev driver binds: its types appear (layout A; VFs go through profiles.add_vf_driver_attrs)."""
    info = host.model["mdev_parents"].get(name)
    if info is None:
        return
    types = {tid: {**t, "available": 0} for tid, t in info["types"].items()}
    host.builder.mdev_parent(info["path"], name, info["rule"], types, info["pool"], info["physical_gpu"])
