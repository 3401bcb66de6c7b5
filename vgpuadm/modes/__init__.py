"""The one registry of GPU sharing modes: each mode is one file (mdev, vf_vgpu, passthrough, sriov, mig, vf_pool, virtio_gpu) implementing
modes/base.py's Mode; `for_layout` maps a discovered layout to its mode, `for_name` the mode an allocation records
("mdev", "vf", "pci", "pool", "virtio-gl"). A new sharing mode is one new file plus its line in MODES."""

import dataclasses

from vgpuadm.errors import UsageError
from vgpuadm.model import Allocation, DeviceKey, HostSnapshot, Layout
from vgpuadm.modes import mdev, mig, passthrough, sriov, vf_pool, vf_vgpu, virtio_gpu
from vgpuadm.modes.base import Mode
from vgpuadm.virt import xml

MODES: tuple[Mode, ...] = (
    mdev.MODE,
    vf_vgpu.MODE,
    passthrough.MODE,
    sriov.MODE,
    mig.MODE,
    vf_pool.MODE,
    virtio_gpu.MODE,
)
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


def of(a: Allocation) -> Mode:
    """The mode of a recorded device: every per-device question about `a` goes to it."""
    return _BY_NAME[a.mode] if a.mode in _BY_NAME else for_name(a.mode)


def key(a: Allocation) -> DeviceKey | None:
    """The ownership key of `a`'s host device (None: nothing on the host, e.g. virtio-gl)."""
    return of(a).key(a)


def adopt(snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int) -> Allocation | None:
    """The allocation that records the device a domain's <hostdev> `ref` already gives it, from the first mode that
    knows the device on this host (None: no mode does — it is not there now, or not a GPU device)."""
    for mode in MODES:
        a = mode.adopt(snapshot, ref, domain, domain_uuid, slot)
        if a is not None:
            return a
    return None


def describe(a: Allocation) -> str:
    return of(a).describe(a)


def handle(a: Allocation) -> str:
    return of(a).handle(a)


def hostdev_xml(a: Allocation) -> str:
    return of(a).hostdev_xml(a)


def hostdev_as_attached(a: Allocation, domain_xml: str) -> str:
    """hostdev_xml(a) with the guest PCI address the domain gives the device now, so that a detach undone puts it
    back where the guest saw it (libvirt would otherwise take the next free slot, and several devices detached in
    one plan would come back in swapped places)."""
    want = key(a)
    if a.extra.get("guest_address") or not domain_xml or want is None:
        return hostdev_xml(a)
    for ref in xml.parse_hostdevs(domain_xml):
        if (ref.kind, ref.key) == want and ref.guest_address is not None:
            extra = {**a.extra, "guest_address": str(ref.guest_address)}
            if ref.guest_address.multifunction:
                extra["multifunction"] = "on"
            return hostdev_xml(dataclasses.replace(a, extra=extra))
    return hostdev_xml(a)


__all__ = [
    "MODES",
    "Mode",
    "adopt",
    "describe",
    "for_layout",
    "for_name",
    "handle",
    "hostdev_as_attached",
    "hostdev_xml",
    "key",
    "of",
]
