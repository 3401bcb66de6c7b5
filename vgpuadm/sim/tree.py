"""Writes a byte-exact sysfs tree under a root: newline-terminated attributes and relative symlinks, as the kernel
lays them out (shared/docs/vgpu-sysfs.md §8). Profiles (sim/profiles.py) and the simulated kernel (sim/kernel.py)
both build through this one class, so a device made at build time and one made by a write look the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from vgpuadm.host.sysfs import SIM_MARKER

PCI_DEVICES = "/sys/bus/pci/devices"
PCI_DRIVERS = "/sys/bus/pci/drivers"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
MDEV_BUS = "/sys/class/mdev_bus"
MDEV_DEVICES = "/sys/bus/mdev/devices"


@dataclass
class MdevTypeSpec:
    """One mdev type directory. `name`/`description` None means the driver has no such file (mtty)."""

    type_id: str
    name: str | None
    description: str | None
    available: int
    device_api: str = "vfio-pci"


@dataclass
class PciSpec:
    """One PCI function to lay down. `parent` is the host path of the upstream device dir."""

    address: str
    parent: str
    vendor: str
    device: str
    class_code: str
    driver: str | None = None
    iommu_group: int | None = None
    numa_node: int = -1
    subsystem: tuple[str, str] | None = None
    boot_vga: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    bridge: bool = False


class TreeBuilder:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    # -- primitives -------------------------------------------------------------------------------------------
    def real(self, host_path: str) -> str:
        return self.root + host_path

    def mkdir(self, host_path: str) -> None:
        os.makedirs(self.real(host_path), exist_ok=True)

    def attr(self, host_path: str, value: str | int, mode: int = 0o644) -> None:
        """A kernel attribute: its text always ends with one newline."""
        path = self.real(host_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"{value}\n")
        os.chmod(path, mode)

    def wo(self, host_path: str) -> None:
        """A write-only trigger (create, remove, bind): empty, mode 0200."""
        path = self.real(host_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        os.chmod(path, 0o200)

    def link(self, host_link: str, host_target: str) -> None:
        """A relative symlink, so the tree stays valid wherever the root is moved."""
        link = self.real(host_link)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        rel = os.path.relpath(self.real(host_target), os.path.dirname(link))
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(rel, link)

    def unlink(self, host_link: str) -> None:
        if os.path.lexists(self.real(host_link)):
            os.unlink(self.real(host_link))

    # -- kernel objects ---------------------------------------------------------------------------------------
    def driver(self, name: str) -> None:
        d = f"{PCI_DRIVERS}/{name}"
        for trigger in ("bind", "unbind", "new_id", "remove_id"):
            self.wo(f"{d}/{trigger}")

    def bus(self) -> None:
        self.mkdir(PCI_DEVICES)
        self.wo("/sys/bus/pci/drivers_probe")
        self.wo("/sys/bus/pci/rescan")
        self.mkdir(IOMMU_GROUPS)

    def iommu_member(self, group: int, dev: str, name: str) -> None:
        self.mkdir(f"{IOMMU_GROUPS}/{group}/devices")
        self.link(f"{IOMMU_GROUPS}/{group}/devices/{name}", dev)
        self.link(f"{dev}/iommu_group", f"{IOMMU_GROUPS}/{group}")
        self.mkdir("/dev/vfio")

    def bind(self, dev: str, name: str, driver: str) -> None:
        self.driver(driver)
        self.link(f"{dev}/driver", f"{PCI_DRIVERS}/{driver}")
        self.link(f"{PCI_DRIVERS}/{driver}/{name}", dev)

    def unbind(self, dev: str, name: str, driver: str) -> None:
        self.unlink(f"{dev}/driver")
        self.unlink(f"{PCI_DRIVERS}/{driver}/{name}")

    def pci(self, spec: PciSpec) -> str:
        """Lay down one PCI function; returns its device dir (host path)."""
        dev = f"{spec.parent}/{spec.address}"
        self.attr(f"{dev}/vendor", spec.vendor, 0o444)
        self.attr(f"{dev}/device", spec.device, 0o444)
        self.attr(f"{dev}/class", spec.class_code, 0o444)
        sub = spec.subsystem or ("0x0000", "0x0000")
        self.attr(f"{dev}/subsystem_vendor", sub[0], 0o444)
        self.attr(f"{dev}/subsystem_device", sub[1], 0o444)
        self.attr(f"{dev}/numa_node", spec.numa_node)
        self.attr(f"{dev}/driver_override", "(null)")
        self.attr(f"{dev}/reset_method", "flr")
        if spec.boot_vga is not None:
            self.attr(f"{dev}/boot_vga", spec.boot_vga, 0o444)
        for key, value in spec.extra.items():
            self.attr(f"{dev}/{key}", value)
        if spec.bridge:
            self.mkdir(f"{dev}/pci_bus")
        self.link(f"{PCI_DEVICES}/{spec.address}", dev)
        if spec.driver:
            self.bind(dev, spec.address, spec.driver)
        if spec.iommu_group is not None:
            self.iommu_member(spec.iommu_group, dev, spec.address)
        return dev

    def mdev_parent(self, dev: str, name: str, types: list[MdevTypeSpec]) -> None:
        self.link(f"{MDEV_BUS}/{name}", dev)
        self.mkdir(MDEV_DEVICES)
        for t in types:
            d = f"{dev}/mdev_supported_types/{t.type_id}"
            if t.name is not None:
                self.attr(f"{d}/name", t.name, 0o444)
            if t.description is not None:
                self.attr(f"{d}/description", t.description, 0o444)
            self.attr(f"{d}/available_instances", t.available, 0o444)
            self.attr(f"{d}/device_api", t.device_api, 0o444)
            self.wo(f"{d}/create")
            self.mkdir(f"{d}/devices")

    def creatable(self, dev: str, types: list[tuple[int, str]]) -> None:
        """Layout C: the driver prints `ID    : vGPU Name` then `%-5d : name` lines."""
        lines = ["ID    : vGPU Name"] + [f"{num:<5d} : {name}" for num, name in types]
        path = self.real(f"{dev}/nvidia/creatable_vgpu_types")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(path, 0o444)

    def marker(self, model: Mapping[str, object]) -> None:
        """The simulation marker: says the root is simulated and holds the hardware model the kernel obeys."""
        with open(os.path.join(self.root, SIM_MARKER), "w") as f:
            json.dump(model, f, indent=1, sort_keys=True)
            f.write("\n")
