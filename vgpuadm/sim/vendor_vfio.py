"""Simulated NVIDIA vendor-specific VFIO (layout C, reference §3.3, §3.4, §8.5): `nvidia/current_vgpu_type` and
the equal-size narrowing of every VF's `creatable_vgpu_types`.

Equal-size mode: with no vGPU on the PF every free VF lists all types; after the first, free VFs list only the
types of the same framebuffer size whose max_instance is not yet reached (header only once it is). A VF that holds
a vGPU lists the header only — nothing more can be created on it [I].

Heterogeneous mode on (sim/hetero.py): a free VF lists every time-sliced type with a free supported placement,
whatever sizes run; the type write places the vGPU (EINVAL when its placement cannot be had).
"""

from __future__ import annotations

import errno as errno_mod
from typing import Any

from vgpuadm.sim import hetero, mig, migmodel, usage
from vgpuadm.sim.mdevs import size_key
from vgpuadm.sim.state import SimHost, fail, kstrtol


def _types(host: SimHost, pf: str) -> list[list[Any]]:
    info = host.model["vendor_vfio"].get(pf) or {}
    return list(info.get("types") or host.model["sriov"][pf]["vf_types"])


def _key(t: list[Any]) -> tuple[int, bool]:
    return size_key({"name": t[1], "fb_mib": t[2]})


def _vf_dirs(host: SimHost, pf: str) -> list[str]:
    """VFs of `pf` that exist and carry the nvidia attribute group (bound to nvidia)."""
    info = host.model["sriov"][pf]
    dirs = [f"{info['parent_dir']}/{vf}" for vf in info["vfs"]]
    return [d for d in dirs if host.exists(f"{d}/nvidia/current_vgpu_type")]


def recompute(host: SimHost, pf: str) -> None:
    """Every VF's creatable list. With MIG on, a free VF lists every MIG-backed type whatever instances exist (a
    write without a free matching instance fails with EIO); with MIG off, the time-sliced types by equal size."""
    state = mig.state_of_pf(host, pf)
    types = [t for t in _types(host, pf) if migmodel.offered(state, int(t[0]))]
    by_id = {int(t[0]): t for t in types}
    vfs = _vf_dirs(host, pf)
    current = {d: int(host.read(f"{d}/nvidia/current_vgpu_type") or 0) for d in vfs}
    running = [by_id[c] for c in current.values() if c in by_id]
    for d in vfs:
        if current[d]:
            listed: list[list[Any]] = []
        elif hetero.enabled(hetero.state_of(host, pf)):
            listed = [t for t in types if hetero.creatable_ids(host, pf, int(t[0]), int(t[2]))]
        elif not running or migmodel.enabled(state):
            listed = types
        else:
            key = _key(running[0])
            listed = [t for t in types if _key(t) == key and len(running) < int(t[3])]
        lines = ["ID    : vGPU Name"] + [f"{int(t[0]):<5d} : {t[1]}" for t in listed]
        if host.read(f"{d}/nvidia/creatable_vgpu_types") != "\n".join(lines):
            host.tree.creatable(d, [(int(t[0]), str(t[1])) for t in listed])


def set_current_type(host: SimHost, path: str, data: bytes) -> None:
    """`echo ID > <VF>/nvidia/current_vgpu_type` (path canonical): kstrtol base 10; EPERM when a type is set and
    another non-zero id is written, or 0 is written with none set; EINVAL for an id this VF cannot create now."""
    value = kstrtol(data, 10)
    vf_dir = path.rsplit("/nvidia/", 1)[0]
    current = int(host.read(path) or 0)
    if (value != 0 and current != 0) or (value == 0 and current == 0):
        fail(errno_mod.EPERM)
    pf = host.link_name(f"{vf_dir}/physfn")
    if pf is None or pf not in host.model["sriov"]:
        fail(errno_mod.ENODEV)
    if value != 0:
        text = host.read(f"{vf_dir}/nvidia/creatable_vgpu_types") or ""
        ids = {int(line.split(":")[0]) for line in text.splitlines()[1:] if line.split(":")[0].strip().isdigit()}
        if value not in ids:
            fail(errno_mod.EINVAL)
    if value != 0:
        hetero.place(host, pf, vf_dir, value)  # EINVAL when its placement cannot be had (nothing changed yet)
    state = mig.state_of_pf(host, pf)
    if value != 0 and migmodel.is_mig_type(state, value):
        gi = mig.bind(host, pf, value, vf_dir)  # EIO when no matching instance is free
        host.set_attr(f"{vf_dir}/nvidia/gpu_instance_id", gi)
    host.tree.attr(path, value)
    if value == 0:
        host.set_attr(f"{vf_dir}/nvidia/vgpu_params", "", 0o644)  # the vGPU's parameters go with it [I]
        hetero.cleared(host, vf_dir)
        usage.forget(host, [vf_dir])
        mig.unbind(host, vf_dir)
        # reading gpu_instance_id without a vGPU fails with ENXIO (reference §3.3); a simulated file cannot fail a
        # read, so it is absent instead
        host.tree.unlink(f"{vf_dir}/nvidia/gpu_instance_id")
    recompute(host, pf)


# nvidia-vgpu-vfio.c vgpu_params_store: `if (count > VGPU_CONFIG_PARAMS_MAX_LENGTH) return -E2BIG;` with
# `#define VGPU_CONFIG_PARAMS_MAX_LENGTH 1024` (nvidia-vgpu-vfio.h of the vGPU host driver; the same 1024 in the
# open RM's vgpu_mgr.h and in the upstream nvidia-vgpu-vfio RFC): a write of up to 1024 bytes is taken.
PARAMS_MAX_WRITE = 1024


def set_params(host: SimHost, path: str, data: bytes) -> None:
    """`nvidia/vgpu_params` (VF or mdev), as vgpu_params_store does: E2BIG for a write longer than 1024 bytes;
    EPERM while a guest holds the vGPU open (usage_count != 0, see sim/usage.py). Otherwise the text is kept
    exactly as written (the driver does not parse it; its snprintf dropping the last byte is not modelled)."""
    if len(data) > PARAMS_MAX_WRITE:
        fail(errno_mod.E2BIG)
    if usage.is_in_use(host, path.rsplit("/nvidia/", 1)[0]):
        fail(errno_mod.EPERM)
    host.tree.raw(path, data, 0o644)
