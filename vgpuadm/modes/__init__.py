"""One module per GPU sharing mode (mdev, vendor-VFIO VF, passthrough, SR-IOV), each validate/plan/hostdev.

`for_layout(layout)` / `for_name(name)` (modes/base.py) return the mode object for a device."""

from vgpuadm.modes.base import Mode, for_layout, for_name

__all__ = ["Mode", "for_layout", "for_name"]
