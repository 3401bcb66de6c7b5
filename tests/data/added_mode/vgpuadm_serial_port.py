"""A test-only sharing mode, "serial": a serial card of the kernel's mtty sample driver given to a guest as a device
of its own kind, not as a vGPU. The one file of tests/libvirt/test_a_new_mode_is_one_file.py's new mode (its one
line is the entry point that test installs).

The device kind is made up; what it makes and frees on the host is not: an mdev of one of mtty's types (mtty-1, one
port; mtty-2, two), which the simulated kernel already models (vgpuadm/sim, the independent oracle: it knows nothing
of this mode). So the mode claims mtty's types (`claims`) although their layout (A: mdev on a parent) is the mdev
mode's, and reuses that mode's mechanics by inheritance; what is its own: its name (recorded in the domain's
metadata), how it describes itself, that a serial card never has a display, that no vendor driver must be bound
for it to come back after a reboot, and the hostdev it renders."""

from __future__ import annotations

from typing import ClassVar

from vgpuadm.model import Allocation, Layout, VgpuType
from vgpuadm.modes.mdev import MdevMode
from vgpuadm.virt import xml

NAME = "serial"


class SerialPortMode(MdevMode):
    name: ClassVar[str] = NAME
    layouts: ClassVar[tuple[Layout, ...]] = ()  # no layout of its own: it claims types of the mdev layout
    needs_vendor_driver: ClassVar[bool] = False  # mtty's parent is a virtual device, bound to no PCI driver

    def claims(self, t: VgpuType) -> bool:
        return t.type_id.startswith("mtty-")

    def describe(self, a: Allocation) -> str:
        return f"serial port {a.uuid} ({a.type_id})"

    def device_label(self, a: Allocation) -> str | None:
        return f"serial port {a.uuid}"

    def display(self, a: Allocation) -> tuple[bool, bool]:
        return False, False  # a serial card has no display, whatever was asked

    def plan_line(self, a: Allocation) -> str:
        return f"serial port {a.uuid} ({a.type_id})"

    def hostdev_xml(self, a: Allocation) -> str:
        return xml.mdev_hostdev(xml.require(a, a.uuid, "UUID"), display=False, ramfb=False,
                                guest_address=xml.guest_address(a))  # fmt: skip


MODE = SerialPortMode()
