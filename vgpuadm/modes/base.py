"""The small interface every GPU sharing mode implements, and the registry mapping a layout to its mode.

A mode validates a request against a HostSnapshot, plans Steps (pure: it never reads the host) and says what the
libvirt hostdev needs (`hostdev_spec`): mdev → {"mode": "mdev", "uuid"}; vendor-VFIO VF → {"mode": "vf", "address",
"managed": "no"}; passthrough → {"mode": "pci", "functions": [...], "managed": "yes"}.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from vgpuadm.errors import UsageError
from vgpuadm.model import HostSnapshot, Layout

HostdevSpec = dict[str, Any]


class Mode(ABC):
    """One GPU sharing mode. `name` is what Allocation.mode records ("mdev", "vf", "pci")."""

    name: ClassVar[str]
    layouts: ClassVar[tuple[Layout, ...]]

    @abstractmethod
    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        """Raise a VgpuadmError when `device_id` cannot be used in this mode on this host."""

    @abstractmethod
    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        """What the libvirt hostdev template needs for `device_id` (an mdev UUID, a VF or GPU address)."""


_MODES: dict[Layout, Mode] = {}


M = TypeVar("M", bound=Mode)


def register_mode(mode: M) -> M:
    for layout in mode.layouts:
        _MODES[layout] = mode
    return mode


def for_layout(layout: Layout | str) -> Mode:
    """The mode that handles devices of `layout`."""
    from vgpuadm.modes import mdev, passthrough, sriov, vf_vgpu  # noqa: F401  (registration side effects)

    try:
        return _MODES[Layout(layout)]
    except (KeyError, ValueError):
        raise UsageError(
            f'No mode handles layout "{layout}"', f"layouts: {', '.join(m.value for m in Layout)}"
        ) from None


def for_name(name: str) -> Mode:
    """The mode recorded as Allocation.mode ("mdev", "vf", "pci")."""
    from vgpuadm.modes import mdev, passthrough, sriov, vf_vgpu  # noqa: F401

    for mode in _MODES.values():
        if mode.name == name:
            return mode
    raise UsageError(f'Unknown device mode "{name}"', "modes: mdev, vf, pci")
