"""Simulated vGPU usage: which vGPUs a guest holds open (the driver's `usage_count`) and the figures the driver
reports for each running vGPU and each GPU (`nvidia-smi vgpu -q`, `nvidia-smi --query-gpu`).

NVIDIA's vgpu-vfio module counts opens of a vGPU (mdev, or layout C VF) in `vgpu_dev->usage_count`; QEMU holds it
open while the guest runs. The count is not a sysfs file, so the simulation keeps it in the marker's model:
`vgpu_in_use` lists the canonical host paths of the device directories in use. Nothing in the simulation opens
devices, so tests (or another process) mark one with `set_in_use(root, "/sys/bus/mdev/devices/<uuid>")` or
`set_in_use(root, "/sys/bus/pci/devices/<VF>")`, and `set_in_use(..., False)` to release it. While in use, a
write to its `nvidia/vgpu_params` fails with EPERM (sim/vendor_vfio.py). Removing the device or a reboot forgets it.

A guest running on a vGPU is what makes the driver list it as active, with the VM's UUID (QEMU's `-uuid`, which
libvirt sets to the domain's UUID) and its figures: `set_vgpu_usage` records them (`vgpuadm sim usage`) under
`vgpu_usage` (canonical device directory → figures) and marks the vGPU in use; `set_vgpu_usage(..., None)` stops the
guest. `gpu_usage` holds a GPU's own figures (PF address → figures). Figures are whole numbers, as the driver prints
them: MiB and percent. A host whose guests run vGPUs has the driver's nvidia-smi: setting figures installs it where
the build did not (a layout A host, whose other reads never needed it).
"""

from __future__ import annotations

import os
import re
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.model import UUID_PATTERN, is_pci_address, mdev_uuid, pci_address
from vgpuadm.sim.profiles import NVIDIA_SMI_PATH
from vgpuadm.sim.state import SimHost, load_model, require_simulated, root_lock
from vgpuadm.sim.tools import install_tool

KEY = "vgpu_in_use"
FIGURES = "vgpu_usage"
GPU_FIGURES = "gpu_usage"
LICENSES = ("Licensed", "Unlicensed (Restricted)", "Unlicensed (Unrestricted)")
PERCENT = ("gpu", "memory", "encoder", "decoder")
# The figures a running vGPU reports and their defaults (a guest that has just booted).
VGPU_DEFAULTS: dict[str, Any] = {"vm_uuid": "", "vm_name": "", "fb_used_mib": 0, "gpu": 0, "memory": 0,
                                 "encoder": 0, "decoder": 0, "license": "Licensed", "driver": "550.54.14"}  # fmt: skip
GPU_DEFAULTS: dict[str, Any] = {"gpu": 0, "memory": 0, "fb_used_mib": 0}


def set_in_use(root: str, device_path: str, in_use: bool = True) -> None:
    """Mark the vGPU at host path `device_path` (its device directory, links allowed) as open by a guest or not."""
    require_simulated(root)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        dev = _device(host, device_path)
        users = set(host.model.get(KEY) or ())
        users = users | {dev} if in_use else users - {dev}
        host.model[KEY] = sorted(users)
        host.tree.marker(host.model)


def _device(host: SimHost, device_path: str) -> str:
    """The canonical device directory of `device_path`: a host path, or a device's id (an mdev UUID, a PCI
    address)."""
    if not device_path.startswith("/"):
        device_path = (f"/sys/bus/pci/devices/{pci_address(device_path)}" if is_pci_address(device_path)
                       else f"/sys/bus/mdev/devices/{mdev_uuid(device_path, 'give an mdev UUID or a VF address')}")  # fmt: skip
    dev = host.resolve(device_path.rstrip("/"))
    if not os.path.isdir(host.real(dev)):
        raise FileNotFoundError(device_path)
    return dev


def _checked(figures: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`figures` over `defaults`, each checked: what a test gives the simulated driver is what it prints."""
    out = {**defaults}
    for key, value in figures.items():
        if key not in defaults:
            raise UsageError(f"unknown usage figure {key!r}", f"figures: {', '.join(defaults)}")
        if isinstance(defaults[key], int) and not (isinstance(value, int) and 0 <= value <= (100 if key in PERCENT
                                                                                                 else 1 << 30)):  # fmt: skip
            raise UsageError(f"{key}={value!r}", "percentages are 0-100, memory a whole number of MiB")
        out[key] = value
    if out.get("license", LICENSES[0]) not in LICENSES:
        raise UsageError(f"license {out['license']!r}", f"one of: {', '.join(LICENSES)}")
    if out.get("vm_uuid") and not re.fullmatch(UUID_PATTERN, str(out["vm_uuid"])):
        raise UsageError(f"VM UUID {out['vm_uuid']!r}", "give the domain's UUID (virsh domuuid DOMAIN)")
    return out


def set_vgpu_usage(root: str, device_path: str, figures: dict[str, Any] | None) -> None:
    """A guest runs on the vGPU at `device_path` (an mdev or a layout C VF running a type) with these `figures`
    (VGPU_DEFAULTS' keys; `vm_uuid` is required): the driver lists it as active and it is in use. None: the guest
    stopped (the vGPU is neither active nor in use)."""
    require_simulated(root)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        try:
            dev = _device(host, device_path)
        except FileNotFoundError:
            raise UsageError(f"no device {device_path} on {root}", "give an existing mdev UUID or VF address") from None
        usage = dict(host.model.get(FIGURES) or {})
        users = set(host.model.get(KEY) or ())
        if figures is None:
            usage.pop(dev, None)
            users.discard(dev)
        else:
            checked = _checked(figures, VGPU_DEFAULTS)
            if not checked["vm_uuid"]:
                raise UsageError(f"{device_path}: no VM UUID", "a running vGPU belongs to a VM: give --vm-uuid")
            usage[dev] = checked
            users.add(dev)
        host.model[FIGURES] = usage
        host.model[KEY] = sorted(users)
        host.tree.marker(host.model)
        _driver_tool(root)


def set_gpu_usage(root: str, gpu: str, figures: dict[str, Any]) -> None:
    """The figures GPU `gpu` (its PF's PCI address, 0000:18:00.0) reports (GPU_DEFAULTS' keys)."""
    require_simulated(root)
    gpu = pci_address(gpu)
    with root_lock(root):
        host = SimHost(root, load_model(root))
        if not os.path.isdir(host.real(f"/sys/bus/pci/devices/{gpu}")):
            raise UsageError(f"no PCI device {gpu} on {root}", "give a GPU's address, e.g. 0000:01:00.0")
        gpus = dict(host.model.get(GPU_FIGURES) or {})
        gpus[gpu] = _checked(figures, GPU_DEFAULTS)
        host.model[GPU_FIGURES] = gpus
        host.tree.marker(host.model)
        _driver_tool(root)


def _driver_tool(root: str) -> None:
    if not os.path.exists(os.path.join(root, NVIDIA_SMI_PATH)):
        install_tool(root, "/" + NVIDIA_SMI_PATH, "vgpuadm.sim.nvidia_smi",
                     "nvidia-smi on a simulated host (installed by `vgpuadm sim usage`): vgpu -q, --query-gpu, …")  # fmt: skip


def is_in_use(host: SimHost, device_dir: str) -> bool:
    """`device_dir` is canonical (the kernel handlers get canonical paths)."""
    return device_dir in (host.model.get(KEY) or ())


def forget(host: SimHost, device_dirs: list[str] | None = None) -> None:
    """The devices (all when None) are gone: nothing holds them any more, no guest runs on them. Caller holds the
    root lock."""
    users = list(host.model.get(KEY) or ())
    kept = [] if device_dirs is None else [u for u in users if u not in device_dirs]
    usage = dict(host.model.get(FIGURES) or {})
    kept_usage = {} if device_dirs is None else {d: f for d, f in usage.items() if d not in device_dirs}
    if kept != users or kept_usage != usage:
        host.model[KEY] = kept
        host.model[FIGURES] = kept_usage
        host.tree.marker(host.model)
