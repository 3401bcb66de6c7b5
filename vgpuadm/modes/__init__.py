"""The GPU sharing modes vgpuadm ships, each one file (mdev, vf_vgpu, passthrough, sriov, mig, vf_pool, virtio_gpu)
implementing modes/base.py's Mode, put in the one registry (modes/base.py) by the `ship(...)` below; the registry's
lookups are re-exported here: `for_layout` maps a discovered layout to its mode, `for_type` a type to the mode that
makes its devices, `for_name` the mode an allocation records ("mdev", "vf", "pci", "pool", "virtio-gl").

A new sharing mode is one new file plus one line: an entry point in the `vgpuadm.modes` group (model.MODES_GROUP) of
the distribution that ships the file (another distribution, or a test: tests/libvirt/test_a_new_mode_is_one_file.py),
e.g. in its pyproject.toml (a mode vgpuadm itself ships is its entry in `ship(...)` below instead, plus, when it
records devices, its member of model.DeviceMode, which the hook's fast path reads without this registry):

    [project.entry-points."vgpuadm.modes"]
    serial = "vgpuadm_serial:MODE"

The installed distributions' entry points in that group are loaded once, when a mode is first looked up by type (or
a name or layout no built-in mode has); each names
a Mode instance whose name is the entry point's name (so that metadata recording the mode can be read before the
registry is imported: model.known_device_mode), given to `register`. Only installed distributions are read — what
is on the interpreter's sys.path when it starts, as for any import — never a module named by a vgpuadm option, an
environment variable of vgpuadm's, a plan file or domain metadata. `register` takes a mode whose name and layouts are
not taken; the mode records its devices under its name (declared to the model with what one of them holds of its
GPU: Mode.holds), and may claim types that another mode's layout offers (Mode.claims: for_type asks the added modes
first; the create planners record each device under the mode that planned it: plan/devices.plan_create's made_by).
What an added mode cannot add: a host object discovery does not read (HostSnapshot), a layout, a Holding, a Step
kind, a restore phase, a hostdev other than an mdev or a PCI one."""

from vgpuadm.modes import mdev, mig, passthrough, sriov, vf_pool, vf_vgpu, virtio_gpu
from vgpuadm.modes.base import (
    Mode,
    adopt,
    describe,
    for_layout,
    for_name,
    for_type,
    for_type_on,
    handle,
    hostdev_as_attached,
    hostdev_xml,
    key,
    of,
    register,
    ship,
)

MODES: tuple[Mode, ...] = ship(
    mdev.MODE,
    vf_vgpu.MODE,
    passthrough.MODE,
    sriov.MODE,
    mig.MODE,
    vf_pool.MODE,
    virtio_gpu.MODE,
)

__all__ = [
    "MODES",
    "Mode",
    "adopt",
    "describe",
    "for_layout",
    "for_name",
    "for_type",
    "for_type_on",
    "handle",
    "hostdev_as_attached",
    "hostdev_xml",
    "key",
    "of",
    "register",
]
