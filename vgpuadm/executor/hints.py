"""errno → the likely cause of a refused kernel write, per step kind (reference §1.3, §3.3, §5.4): the hint of
the error `execute` raises when a step fails."""

from __future__ import annotations

import errno as errno_mod

from vgpuadm.steps import (
    Bind,
    ClearVfVgpuType,
    CreateMdev,
    DriversProbe,
    RemoveMdev,
    SetNumVfs,
    SetVfPlacement,
    SetVfVgpuType,
    Step,
    Unbind,
)

_HINTS: dict[type, dict[str, str]] = {
    CreateMdev: {
        "EINVAL": "the type is incompatible with what already runs on that GPU (one type, or one framebuffer size, "
        "per physical GPU), or the NVIDIA vGPU manager (nvidia-vgpu-mgr) is not running",
        "EUSERS": "no instances of that type are left on that parent; see `vgpuadm types --available`",
        "ENOSPC": "no instances of that type are left on that parent; see `vgpuadm types --available`",
        "EEXIST": "that UUID is already used by another mdev; pass another --uuid or omit it",
        "ENODEV": "the parent driver is unregistering (driver reload?); retry once it is loaded",
    },
    RemoveMdev: {"EBUSY": "the mdev is in use by a running VM; stop the VM first"},
    SetVfVgpuType: {
        "EPERM": "the VF already runs a vGPU; clear it first with `vgpuadm vf clear`",
        "EINVAL": "the type is incompatible with what already runs on that GPU (one framebuffer size per GPU; in "
        "heterogeneous mode its placement ID overlaps a vGPU or is not one of the type's), or the NVIDIA vGPU manager "
        "is not running",
        "EIO": "a MIG-backed type needs a free matching GPU instance (`nvidia-smi mig -cgi`)",
    },
    SetVfPlacement: {
        "EBUSY": "the VF runs a vGPU; its placement is fixed until it is cleared",
        "EINVAL": "not a placement ID of this GPU (`nvidia-smi vgpu -s -v` lists the supported ones)",
    },
    ClearVfVgpuType: {
        "EPERM": "the VF runs no vGPU",
        "EBUSY": "the VF is in use by a running VM; stop the VM first",
    },
    SetNumVfs: {
        "EBUSY": "VFs are enabled; the count must go through 0 first",
        "ENOENT": "the PF has no driver that can enable VFs (NVIDIA PFs need sriov-manage)",
        "ERANGE": "more VFs than sriov_totalvfs",
    },
    Bind: {
        "EBUSY": "device busy: it already has a driver",
        "ENODEV": "the driver does not match the device (driver_override names another driver?)",
    },
    Unbind: {
        "ENODEV": "the device is not bound to that driver",
        "EBUSY": "device busy: a process (nvidia-persistenced, Xorg, CUDA) holds it",
    },
    DriversProbe: {"EBUSY": "device busy: it already has a driver"},
}


def errno_hint(step: Step, code: int | None) -> str:
    """A likely cause for `code` on `step`, "" when none is known."""
    if not code:
        return ""
    name = errno_mod.errorcode.get(code, "")
    for cls in type(step).__mro__:
        if cls in _HINTS and name in _HINTS[cls]:
            return _HINTS[cls][name]
    return ""
