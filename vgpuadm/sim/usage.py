"""Simulated vGPU usage (the driver's `usage_count`): which vGPUs a guest holds open.

NVIDIA's vgpu-vfio module counts opens of a vGPU (mdev, or layout C VF) in `vgpu_dev->usage_count`; QEMU holds it
open while the guest runs. The count is not a sysfs file, so the simulation keeps it in the marker's model:
`vgpu_in_use` lists the canonical host paths of the device directories in use. Nothing in the simulation opens
devices, so tests (or another process) mark one with `set_in_use(root, "/sys/bus/mdev/devices/<uuid>")` or
`set_in_use(root, "/sys/bus/pci/devices/<VF>")`, and `set_in_use(..., False)` to release it. While in use, a
write to its `nvidia/vgpu_params` fails with EPERM (sim/vendor_vfio.py). Removing the device or a reboot forgets it.
"""

from __future__ import annotations

import os

from vgpuadm.sim.state import SimHost, load_model, require_simulated, root_lock

KEY = "vgpu_in_use"


def set_in_use(root: str, device_path: str, in_use: bool = True) -> None:
    """Mark the vGPU at host path `device_path` (its device directory, links allowed) as open by a guest or not."""
    require_simulated(root)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        dev = host.resolve(device_path.rstrip("/"))
        if not os.path.isdir(host.real(dev)):
            raise FileNotFoundError(device_path)
        users = set(host.model.get(KEY) or ())
        users = users | {dev} if in_use else users - {dev}
        host.model[KEY] = sorted(users)
        host.tree.marker(host.model)


def is_in_use(host: SimHost, device_dir: str) -> bool:
    """`device_dir` is canonical (the kernel handlers get canonical paths)."""
    return device_dir in (host.model.get(KEY) or ())


def forget(host: SimHost, device_dirs: list[str] | None = None) -> None:
    """The devices (all when None) are gone: nothing holds them any more. Caller holds the root lock."""
    users = list(host.model.get(KEY) or ())
    kept = [] if device_dirs is None else [u for u in users if u not in device_dirs]
    if kept != users:
        host.model[KEY] = kept
        host.tree.marker(host.model)
