"""Writes a byte-exact sysfs tree under a root: newline-terminated attributes and relative symlinks, as the kernel
lays them out (shared/docs/vgpu-sysfs.md §8). Profiles (sim/profiles.py) and the simulated kernel (sim/kernel.py)
both build through this one class, so a device made at build time and one made by a write look the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
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
        _ensure_dir(self.real(host_path))

    def attr(self, host_path: str, value: str | int, mode: int = 0o644) -> None:
        """A kernel attribute: its text always ends with one newline."""
        self.raw(host_path, f"{value}\n".encode(), mode)

    def raw(self, host_path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file's bytes. Replacing an existing file never shows a concurrent reader an empty or half-written
        file: a same-length change is one in-place write, anything else goes through a temp file and a rename."""
        path = self.real(host_path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            # A new file (building, or a device appearing under the kernel lock): write it in place.
            _ensure_dir(os.path.dirname(path))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                os.write(fd, data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            return
        else:
            if stat.S_ISREG(st.st_mode) and st.st_size == len(data) and stat.S_IMODE(st.st_mode) == mode and data:
                try:
                    fd = os.open(path, os.O_WRONLY)
                except PermissionError:
                    pass
                else:
                    try:
                        os.pwrite(fd, data, 0)
                    finally:
                        os.close(fd)
                    return
        fd, tmp = tempfile.mkstemp(dir=self._tmp_dir())
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _tmp_dir(self) -> str:
        tmp_dir = os.path.join(self.root, ".sim-tmp")
        if not os.path.isdir(tmp_dir):
            os.makedirs(tmp_dir, exist_ok=True)
        return tmp_dir

    def wo(self, host_path: str) -> None:
        """A write-only trigger (create, remove, bind): empty, mode 0200."""
        path = self.real(host_path)
        if os.path.exists(path):
            return
        _ensure_dir(os.path.dirname(path))
        open(path, "w").close()
        os.chmod(path, 0o200)

    def link(self, host_link: str, host_target: str) -> None:
        """A relative symlink, so the tree stays valid wherever the root is moved."""
        link = self.real(host_link)
        _ensure_dir(os.path.dirname(link))
        rel = os.path.relpath(self.real(host_target), os.path.dirname(link))
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(rel, link)

    def unlink(self, host_link: str) -> None:
        if os.path.lexists(self.real(host_link)):
            os.unlink(self.real(host_link))

    def rmtree(self, host_path: str) -> None:
        """Remove a directory the kernel drops as a whole (an mdev, a VF, an attribute group)."""
        shutil.rmtree(self.real(host_path), ignore_errors=True)

    def rmdir(self, host_path: str) -> None:
        """Remove an empty directory (a freed IOMMU group); a no-op when it still has entries."""
        with contextlib.suppress(OSError):
            os.rmdir(self.real(host_path))

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
        self.mkdir("/dev/vfio")

    def iommu_member(self, group: int, dev: str, name: str) -> None:
        self.mkdir(f"{IOMMU_GROUPS}/{group}/devices")
        self.link(f"{IOMMU_GROUPS}/{group}/devices/{name}", dev)
        self.link(f"{dev}/iommu_group", f"{IOMMU_GROUPS}/{group}")
        self.mkdir("/dev/vfio")

    def vfio_node(self, group: int, present: bool = True) -> None:
        """`/dev/vfio/<group>`: the VFIO group char device (an empty 0600 file here), present while a member is on
        vfio-pci."""
        node = f"/dev/vfio/{group}"
        if present:
            if not os.path.exists(self.real(node)):
                self.raw(node, b"", 0o600)
        else:
            self.unlink(node)

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
        self.raw(f"{dev}/nvidia/creatable_vgpu_types", ("\n".join(lines) + "\n").encode(), 0o444)

    def marker(self, model: Mapping[str, object]) -> None:
        """The simulation marker: says the root is simulated and holds the hardware model the kernel obeys."""
        self.raw("/" + SIM_MARKER, (json.dumps(model, indent=1, sort_keys=True) + "\n").encode())


def _ensure_dir(path: str) -> None:
    """makedirs, but a stat first: most parents exist already, and a refused mkdir costs more than a stat."""
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
