"""The one registry of GPU sharing modes: each mode is one file (mdev, vf_vgpu, passthrough, sriov, vf_pool, virtio_gpu) implementing
modes/base.py's Mode; `for_layout` maps a discovered layout to its mode, `for_name` the mode an allocation records
("mdev", "vf", "pci", "pool", "virtio-gl"). A new sharing mode is one new file plus its line in MODES."""

from vgpuadm.errors import UsageError
from vgpuadm.model import Layout
from vgpuadm.modes import mdev, passthrough, sriov, vf_pool, vf_vgpu, virtio_gpu
from vgpuadm.modes.base import Mode

MODES: tuple[Mode, ...] = (mdev.MODE, vf_vgpu.MODE, passthrough.MODE, sriov.MODE, vf_pool.MODE, virtio_gpu.MODE)
_BY_LAYOUT: dict[Layout, Mode] = {layout: m for m in MODES for layout in m.layouts}
_BY_NAME: dict[str, Mode] = {m.name: m for m in MODES}


def for_layout(layout: Layout | str) -> Mode:
    """The mode that handles devices of `layout`."""
    try:
        return _BY_LAYOUT[Layout(layout)]
    except (KeyError, ValueError):
        raise UsageError(
            f'No mode handles layout "{layout}"', f"layouts: {', '.join(m.value for m in Layout)}"
        ) from None


def for_name(name: str) -> Mode:
    """The mode recorded as Allocation.mode ("mdev", "vf", "pci", "pool", "virtio-gl")."""
    mode = _BY_NAME.get(name)
    if mode is None:
        raise UsageError(f'Unknown device mode "{name}"', "modes: mdev, vf, pci, pool, virtio-gl")
    return mode


__all__ = ["MODES", "Mode", "for_layout", "for_name"]
