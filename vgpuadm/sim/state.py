"""The simulated kernel's view of one host root: the hardware model from the marker, the tree builder, the per-root
lock, and small readers of the tree (which is the runtime state: nothing runtime lives anywhere else).

Also the kernel's string parsers (kstrtoul/kstrtol/kstrtobool) and `fail(errno)`, shared by the write handlers.
"""

from __future__ import annotations

import errno as errno_mod
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from vgpuadm.errors import UsageError
from vgpuadm.host.root import FileLock
from vgpuadm.host.sysfs import SIM_MARKER
from vgpuadm.sim.profiles import SRIOV_CONFIGURE_DRIVERS, HostBuilder, check_model
from vgpuadm.sim.tree import IOMMU_GROUPS, MDEV_DEVICES, PCI_DEVICES, TreeBuilder

LOCK_FILE = ".sim.lock"  # at the root; every simulated write and fault edit holds it (fcntl flock)


def fail(code: int) -> NoReturn:
    """Refuse a write the way the kernel does: the write(2) fails with `code`."""
    raise OSError(code, os.strerror(code))


def _digits(text: str, base: int) -> int:
    valid = "0123456789abcdef"[:base]
    if not text or any(c not in valid for c in text.lower()):
        fail(errno_mod.EINVAL)
    return int(text, base)


def _strip_newline(data: bytes) -> str:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        fail(errno_mod.EINVAL)
    # kstrto*() accept exactly one trailing newline, as `echo` writes it.
    return text[:-1] if text.endswith("\n") else text


def kstrtoul(data: bytes, base: int = 0, bits: int = 64) -> int:
    """The kernel's kstrtou{16,32,l}: optional '+', base 0 autodetects 0x/0 prefixes; ERANGE on overflow."""
    text = _strip_newline(data)
    text = text[1:] if text.startswith("+") else text
    if base in (0, 16) and text[:2].lower() == "0x" and len(text) > 2:
        base, text = 16, text[2:]
    elif base == 0:
        base = 8 if text.startswith("0") and len(text) > 1 else 10
    value = _digits(text, base)
    if value >= 1 << bits:
        fail(errno_mod.ERANGE)
    return value


def kstrtol(data: bytes, base: int = 10) -> int:
    text = _strip_newline(data)
    if text.startswith("-"):
        return -kstrtoul(text[1:].encode(), base, 63)
    return kstrtoul(data, base, 63)


def kstrtobool(data: bytes) -> bool:
    """y/Y/1/on → True, n/N/0/off → False (only the first one or two characters count); else EINVAL."""
    text = data.decode("ascii", errors="replace")
    if text[:1] in ("y", "Y", "1"):
        return True
    if text[:1] in ("n", "N", "0"):
        return False
    if text[:1] in ("o", "O") and text[1:2] in ("n", "N", "f", "F"):
        return text[1:2] in ("n", "N")
    fail(errno_mod.EINVAL)


@dataclass(frozen=True)
class MdevRecord:
    uuid: str
    parent: str  # the parent's name (BDF, or mtty/mdpy/mbochs)
    type_id: str
    path: str  # host path of the mdev directory


def marker_path(root: str) -> str:
    return os.path.join(root, SIM_MARKER)


def require_simulated(root: str) -> None:
    if not os.path.exists(marker_path(root)):
        raise UsageError(
            f"{root} is not a simulated host (no {SIM_MARKER})",
            "give a directory made by `vgpuadm sim build PROFILE DIR`; a real host cannot be rebooted from here",
        )


@contextmanager
def root_lock(root: str) -> Iterator[None]:
    """The per-root lock: one simulated kernel operation at a time, across processes."""
    with FileLock(os.path.join(root, LOCK_FILE)):
        yield


def load_model(root: str) -> dict[str, Any]:
    try:
        with open(marker_path(root)) as f:
            loaded = json.load(f)
    except ValueError:
        loaded = None
    model = check_model(loaded, os.path.join(root, SIM_MARKER))
    model.setdefault("sriov_configure_drivers", list(SRIOV_CONFIGURE_DRIVERS))
    model.setdefault("faults", [])
    model.setdefault("pools", {})
    model.setdefault("vendor_vfio", {})
    return model


class SimHost:
    """One host root under the lock: model + tree, and readers answering what the kernel knows."""

    def __init__(self, root: str, model: dict[str, Any]) -> None:
        self.root = os.path.realpath(root)  # resolved, so realpath() of any path under it keeps this prefix
        self.model = model
        self.builder = HostBuilder.attach(self.root, model)
        self._parents: dict[str, dict[str, Any] | None] = {}
        self.tree: TreeBuilder = self.builder.tree

    # -- reading the tree ---------------------------------------------------------------------------------------
    def real(self, host_path: str) -> str:
        return self.root + host_path

    def host(self, real_path: str) -> str:
        return real_path[len(self.root) :] or "/"

    def exists(self, host_path: str) -> bool:
        return os.path.lexists(self.real(host_path))

    def read(self, host_path: str) -> str | None:
        """Attribute text without the trailing newline; None when absent."""
        try:
            with open(self.real(host_path)) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        return text[:-1] if text.endswith("\n") else text

    def link_name(self, host_path: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self.real(host_path)))
        except OSError:
            return None

    def listdir(self, host_path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.real(host_path)))
        except FileNotFoundError:
            return []

    def resolve(self, host_path: str) -> str:
        return self.host(os.path.realpath(self.real(host_path)))

    def set_attr(self, host_path: str, value: str | int, mode: int = 0o444) -> None:
        """Rewrite an attribute only when its text changes (keeps a write cheap on 16-VF hosts)."""
        data = f"{value}\n".encode()
        try:
            fd = os.open(self.real(host_path), os.O_RDONLY)
        except FileNotFoundError:
            same = False
        else:
            try:
                same = os.read(fd, 65536) == data
            finally:
                os.close(fd)
        if not same:
            self.tree.raw(host_path, data, mode)

    # -- PCI ----------------------------------------------------------------------------------------------------
    def pci_dir(self, bdf: str) -> str | None:
        """The canonical device dir of a PCI function, None when no such device exists."""
        link = f"{PCI_DEVICES}/{bdf}"
        if not bdf or "/" in bdf or not os.path.exists(self.real(link)):
            return None
        return self.resolve(link)

    def driver_of(self, dev: str) -> str | None:
        return self.link_name(f"{dev}/driver")

    def override_of(self, dev: str) -> str | None:
        text = self.read(f"{dev}/driver_override")
        return None if text in (None, "", "(null)") else text

    def native_driver(self, bdf: str) -> str | None:
        """The driver whose id table matches the function (what drivers_probe binds without an override)."""
        driver = self.model["drivers"].get(bdf)
        if driver:
            return str(driver)
        for info in self.model["sriov"].values():
            if bdf in info["vfs"]:
                return str(info["vf_driver"])
        return None

    def sriov_pf_of(self, bdf: str) -> tuple[str, int] | None:
        """(PF, VF index) when `bdf` is a VF in the hardware model."""
        for pf, info in self.model["sriov"].items():
            if bdf in info["vfs"]:
                return pf, info["vfs"].index(bdf)
        return None

    def is_bridge(self, dev: str) -> bool:
        return (self.read(f"{dev}/class") or "").startswith("0x0604") or os.path.isdir(self.real(f"{dev}/pci_bus"))

    def group_of(self, dev: str) -> int | None:
        name = self.link_name(f"{dev}/iommu_group")
        return int(name) if name and name.isdigit() else None

    def free_group(self) -> int:
        """The lowest unused IOMMU group number at or above the model's floor (the kernel allocates with an ida)."""
        n = int(self.model.get("next_iommu_group", 100))
        try:
            taken = set(os.listdir(self.real(IOMMU_GROUPS)))  # one listing, not one lstat per number in use
        except OSError:
            taken = set()
        while str(n) in taken:
            n += 1
        return n

    # -- mdev ---------------------------------------------------------------------------------------------------
    def mdevs(self) -> dict[str, MdevRecord]:
        """The kernel's global mdev list, read from /sys/bus/mdev/devices."""
        out = {}
        for uuid in self.listdir(MDEV_DEVICES):
            # The bus link points straight at the device dir under /sys/devices, whose components are plain
            # directories in a simulated tree: joining the link text is the realpath, without an lstat per component.
            try:
                target = os.readlink(self.real(f"{MDEV_DEVICES}/{uuid}"))
            except OSError:
                continue
            path = os.path.normpath(os.path.join(MDEV_DEVICES, target))
            type_id = self.link_name(f"{path}/mdev_type")
            if type_id is not None:
                out[uuid] = MdevRecord(uuid, os.path.basename(os.path.dirname(path)), type_id, path)
        return out

    def parent_info(self, name: str) -> dict[str, Any] | None:
        """The model of mdev parent `name` (read-only); VFs enabled at runtime are derived from their PF's SR-IOV
        model. Memoized for the duration of one write."""
        if name not in self._parents:
            self._parents[name] = self._parent_info(name)
        return self._parents[name]

    def _parent_info(self, name: str) -> dict[str, Any] | None:
        info = self.model["mdev_parents"].get(name)
        if info is not None:
            return dict(info)
        vf = self.sriov_pf_of(name)
        if vf is None:
            return None
        sriov = self.model["sriov"][vf[0]]
        if sriov["vf_layout"] != "mdev-vf":
            return None
        return {
            "path": f"{sriov['parent_dir']}/{name}",
            "rule": "nvidia-one-size",
            "pool": None,
            "physical_gpu": vf[0],
            "types": sriov["vf_types"],
        }

    def parent_names(self) -> list[str]:
        """Every mdev parent the model knows, including all possible VFs."""
        names = list(self.model["mdev_parents"])
        for info in self.model["sriov"].values():
            if info["vf_layout"] == "mdev-vf":
                names.extend(v for v in info["vfs"] if v not in names)
        return names
