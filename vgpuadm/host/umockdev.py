"""Turn a `umockdev-record` capture of a real host into a sys/ tree under a root, so discovery can read it.

Record format (one block per device, blocks separated by blank lines):
  P: /devices/...        the device path under /sys
  E: KEY=VALUE           udev properties (SUBSYSTEM, DRIVER, …)
  A: name=value          attribute text, C-escaped (\\n, \\t, \\\\, \\xHH, \\NNN octal)
  H: name=HEX            binary attribute (PCI config space)
  L: name=target         a symlink, relative to the directory holding it
  N:, S:                 /dev node and links (ignored)

umockdev does not record the directories the kernel derives, so they are rebuilt here:
  - SUBSYSTEM → /sys/bus/<subsystem>/devices/<name> (bus subsystems) or /sys/class/<subsystem>/<name>;
  - a `driver` link → /sys/bus/<bus>/drivers/<driver>/<name> back-link;
  - an `iommu_group` link → /sys/kernel/iommu_groups/<n>/devices/<name>;
  - a device with a child mdev → /sys/class/mdev_bus/<name>, and the mdev's type back-link.

umockdev does not record `mdev_supported_types/` either. `types_from` (a captured sys/ tree such as
tests/data/harvester-a2/testdata-sys) fills them in: a captured `class/mdev_bus/<BDF>` whose BDF is a recorded
device is laid onto that device as captured. Its siblings — the other VFs of the same PF bound to the same driver —
are mdev parents too on a real host (vgpu-sysfs.md §3.2: every VF bound to nvidia has its own types), so they get
the same type directories; a VF that hosts an mdev reads `available_instances` 0 for every type (§3.2), a free VF
reads what the captured free VF read. Captured `bus/pci/devices/<BDF>/nvidia/` files are laid on a recorded BDF.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field

from vgpuadm.errors import NotFoundError, UsageError
from vgpuadm.host.inputs import read_input
from vgpuadm.host.root import (
    makedirs_beneath,
    open_dir_beneath,
    read_beneath,
    resolve_links,
    symlink_beneath,
    undo_fill,
    write_beneath,
)

MDEV_SUBSYSTEM, PCI_SUBSYSTEM = "mdev", "pci"  # the two whose devices make an mdev parent and its mdevs
# Subsystems that are buses (/sys/bus/<name>); every other subsystem is a class (/sys/class/<name>).
BUS_SUBSYSTEMS = frozenset(
    [
        "acpi",
        "container",
        "cpu",
        "event_source",
        "i2c",
        "mdev",
        "mdio_bus",
        "memory",
        "node",
        "pci",
        "pci_express",
        "platform",
        "pnp",
        "scsi",
        "serio",
        "usb",
        "virtio",
        "wmi",
        "workqueue",
        "clockevents",
        "clocksource",
        "edac",
        "machinecheck",
    ]
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f",
           "v": "\v", "e": "\x1b"}  # fmt: skip


MAX_RECORDING = 16 * 1024 * 1024  # bytes of a whole host's umockdev-record output; larger files are refused


@dataclass
class Device:
    """One recorded device block."""

    path: str  # host path, /sys/devices/...
    props: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def subsystem(self) -> str | None:
        return self.props.get("SUBSYSTEM")


@dataclass
class Loaded:
    """What `load` laid down: recorded devices, and the mdev parents it derived."""

    devices: int
    mdev_parents: list[str]
    mdevs: list[str]
    untyped_vfs: list[str] = field(default_factory=list)  # NVIDIA VFs with no recorded types (see `untyped`)


def unescape(text: str) -> bytes:
    """Decode umockdev's C escapes into the attribute's bytes."""

    def one(m: re.Match[str]) -> str:
        code = m[1]
        if code[0] == "x" and len(code) == 3:
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        return _SIMPLE.get(code, code)

    return _ESCAPE.sub(one, text).encode("latin-1", errors="replace")


def parse(text: str, source: str = "recording") -> list[Device]:
    """Parse a umockdev-record text. A malformed line → UsageError naming the file and line."""
    devices: list[Device] = []
    current: Device | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            current = None
            continue
        tag, sep, rest = raw.partition(": ")
        if not sep or len(tag) != 1 or "\x00" in raw:  # a NUL can name no file
            raise UsageError(f"{source} line {lineno}: {raw[:60]!r} is not a umockdev record line",
                             "give a file written by `umockdev-record`")  # fmt: skip
        if tag == "P":
            if not rest.startswith("/devices/") or ".." in rest.split("/"):
                raise UsageError(f"{source} line {lineno}: device path {rest!r} is not under /devices",
                                 "give a file written by `umockdev-record`")  # fmt: skip
            current = Device("/sys" + rest.rstrip("/"))
            devices.append(current)
            continue
        if current is None:
            raise UsageError(f"{source} line {lineno}: {tag}: line before any P: line",
                             "every block of a umockdev record starts with `P: /devices/...`")  # fmt: skip
        key, eq, value = rest.partition("=")
        if tag in "EALH" and (not eq or not key or key.startswith("/") or ".." in key.split("/")):
            raise UsageError(f"{source} line {lineno}: {raw[:60]!r} has no name=value",
                             "give a file written by `umockdev-record`")  # fmt: skip
        if tag == "E":
            current.props[key] = value
        elif tag == "A":
            current.attrs[key] = unescape(value)
        elif tag == "H":
            try:
                current.attrs[key] = bytes.fromhex(value)
            except ValueError:
                raise UsageError(f"{source} line {lineno}: H: {key} is not hex",
                                 "give a file written by `umockdev-record`") from None  # fmt: skip
        elif tag == "L":
            current.links[key] = value
        # N: and S: describe /dev nodes; discovery never reads them.
    return devices


def load(recording: str, root: str, types_from: str | None = None, subsystems: set[str] | None = None) -> Loaded:
    """Lay the devices of `recording` (only `subsystems` when given) under `root`/sys; see the module doc."""
    raw = read_input(
        recording, "", "give the path of a umockdev-record file", limit=MAX_RECORDING, unreadable=NotFoundError
    )
    text = raw.decode("utf-8", errors="surrogateescape")
    devices = parse(text, os.path.basename(recording))
    for d in devices:
        _confine(d, os.path.basename(recording))
    _confine_chains(devices, os.path.basename(recording))
    if subsystems is not None:
        devices = [d for d in devices if d.subsystem in subsystems]
    if os.path.exists(root) and (not os.path.isdir(root) or os.listdir(root)):
        raise UsageError(f"{root} is not empty", "give a new or empty directory for the imported host")
    made = not os.path.exists(root)
    os.makedirs(root, exist_ok=True)
    try:
        return _lay(_Tree(os.path.realpath(root)), devices, types_from)
    except BaseException as exc:
        undo_fill(root, made)  # a refused recording leaves nothing behind
        if isinstance(exc, OSError):
            raise UsageError(f"{os.path.basename(recording)}: {exc.strerror or exc}; nothing was written",
                             _RECORD_HINT) from None  # fmt: skip
        raise


def _lay(tree: _Tree, devices: list[Device], types_from: str | None) -> Loaded:
    for d in devices:
        tree.device(d)
    by_path = {d.path: d for d in devices}
    mdevs = [d for d in devices if d.subsystem == MDEV_SUBSYSTEM]
    parents: dict[str, Device] = {}
    for m in mdevs:
        parent = by_path.get(os.path.dirname(m.path))
        if parent is not None:
            parents[parent.path] = parent
            tree.mdev(m, parent)
    if types_from is not None:
        _overlay_types(tree, types_from, devices, parents, mdevs)
    for p in parents.values():
        tree.link(f"/sys/class/mdev_bus/{p.name}", p.path)
    return Loaded(len(devices), sorted(p.name for p in parents.values()), sorted(m.name for m in mdevs),
                  untyped(tree, devices, parents))  # fmt: skip


def untyped(tree: _Tree, devices: list[Device], parents: dict[str, Device]) -> list[str]:
    """VFs bound to nvidia that list neither mdev types nor vendor-VFIO types: umockdev recorded neither, so
    discovery sees plain PCI functions (layout passthrough) until `--types-from` lays the captured types on."""
    return sorted(
        d.name
        for d in devices
        if d.subsystem == PCI_SUBSYSTEM and "physfn" in d.links and os.path.basename(d.links.get("driver", "")) == "nvidia"
        and d.path not in parents and not os.path.isdir(tree.real(f"{d.path}/nvidia"))
    )  # fmt: skip


def _overlay_types(
    tree: _Tree, types_from: str, devices: list[Device], parents: dict[str, Device], mdevs: list[Device]
) -> None:
    pci = {d.name: d for d in devices if d.subsystem == PCI_SUBSYSTEM}
    busy = {os.path.dirname(m.path) for m in mdevs}
    captured = os.path.join(types_from, "class", "mdev_bus")
    for name in sorted(os.listdir(captured)) if os.path.isdir(captured) else ():
        dev = pci.get(name)
        src = os.path.join(captured, name, "mdev_supported_types")
        if dev is None or not os.path.isdir(src):
            continue
        parents[dev.path] = dev
        tree.copy_types(src, dev.path, zero=dev.path in busy)
        pf = dev.links.get("physfn")
        driver = dev.links.get("driver")
        for sib in pci.values():
            if sib is dev or pf is None or sib.links.get("physfn") != pf or sib.links.get("driver") != driver:
                continue
            parents[sib.path] = sib
            tree.copy_types(src, sib.path, zero=sib.path in busy)
    nvidia = os.path.join(types_from, "bus", "pci", "devices")
    for name in sorted(os.listdir(nvidia)) if os.path.isdir(nvidia) else ():
        dev = pci.get(name)
        if dev is not None and os.path.isdir(os.path.join(nvidia, name, "nvidia")):
            tree.copy_tree(os.path.join(nvidia, name, "nvidia"), f"{dev.path}/nvidia")


_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")
_RECORD_HINT = "give a file written by `umockdev-record` (every path stays under /sys)"


def _in_sys(host_path: str) -> bool:
    return host_path == "/sys" or host_path.startswith("/sys/")


def _confine(d: Device, source: str) -> None:
    """Every path the device would create stays under /sys: its subsystem and driver are plain names, and each
    recorded link is relative and resolves (from the directory holding it) to a path under /sys."""
    sub = d.subsystem
    if sub is not None and (not _NAME.fullmatch(sub) or sub in (".", "..")):
        raise UsageError(f"{source}: device {d.path} has SUBSYSTEM {sub!r}, not a subsystem name", _RECORD_HINT)
    for name, target in d.links.items():
        resolved = os.path.normpath(os.path.join(os.path.dirname(f"{d.path}/{name}"), target))
        if not target or os.path.isabs(target) or not _in_sys(resolved):
            raise UsageError(f"{source}: link {d.path}/{name} -> {target!r} points outside /sys", _RECORD_HINT)


def _confine_chains(devices: list[Device], source: str) -> None:
    """Every recorded link, followed through the recording's other links as the kernel would (a chain of links
    each harmless as text can climb out), still leads under /sys."""
    links: dict[str, str] = {}
    for d in devices:
        for name, target in d.links.items():
            links.setdefault(os.path.normpath(f"{d.path}/{name}"), target)  # the first block's link is the one laid
    for path, target in links.items():
        resolved = resolve_links(path, links)
        if resolved is None or not _in_sys(resolved):
            raise UsageError(f"{source}: link {path} -> {target!r} leads outside /sys through the recording's "
                             "other links", _RECORD_HINT)  # fmt: skip


class _Tree:
    """The host root being laid down. Every host path goes through `rel`, which refuses one outside /sys; every
    file, directory and link is made by descriptor beneath the root (host/root.py), so a link the recording
    planted — or a chain of them — is never written through: such a recording is refused (BeneathError)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def rel(self, host_path: str) -> str:
        norm = os.path.normpath(host_path)
        if not host_path.startswith("/") or not _in_sys(norm):
            raise UsageError(f"refusing to write {host_path}: it is outside /sys", _RECORD_HINT)
        return norm.lstrip("/")

    def real(self, host_path: str) -> str:
        return os.path.join(self.root, self.rel(host_path))

    def makedirs(self, host_path: str) -> None:
        makedirs_beneath(self.root, self.rel(host_path))

    def write(self, host_path: str, data: bytes) -> None:
        write_beneath(self.root, self.rel(host_path), data, mode=0o644, sync=False)

    def link(self, host_link: str, host_target: str) -> None:
        rel = self.rel(host_link)
        target = os.path.relpath(self.rel(host_target), os.path.dirname(rel) or ".")
        symlink_beneath(self.root, rel, target)

    def device(self, d: Device) -> None:
        self.makedirs(d.path)
        for name, data in d.attrs.items():
            self.write(f"{d.path}/{name}", data)
        for name, target in d.links.items():
            rel = self.rel(f"{d.path}/{name}")
            parent = open_dir_beneath(self.root, os.path.dirname(rel), create=0o755)
            try:
                with contextlib.suppress(FileExistsError):
                    os.symlink(target, os.path.basename(rel), dir_fd=parent)
            finally:
                os.close(parent)
        host_targets = {name: os.path.normpath(os.path.join(os.path.dirname(f"{d.path}/{name}"), t))
                        for name, t in d.links.items()}  # fmt: skip
        sub = d.subsystem
        if sub:
            where = f"/sys/bus/{sub}/devices/{d.name}" if sub in BUS_SUBSYSTEMS else f"/sys/class/{sub}/{d.name}"
            self.link(where, d.path)
        if "driver" in host_targets:
            drv = host_targets["driver"]
            self.makedirs(drv)
            self.link(f"{drv}/{d.name}", d.path)
        if "iommu_group" in host_targets:
            group = host_targets["iommu_group"]
            self.link(f"{group}/devices/{d.name}", d.path)

    def mdev(self, m: Device, parent: Device) -> None:
        """The type back-link (`<parent>/mdev_supported_types/<type>/devices/<uuid>`) of a recorded mdev."""
        target = m.links.get("mdev_type")
        if target:
            type_dir = os.path.normpath(os.path.join(m.path, target))
            self.link(f"{type_dir}/devices/{m.name}", m.path)

    def copy_types(self, src: str, dev_path: str, zero: bool) -> None:
        for type_id in sorted(os.listdir(src)):
            d = f"{dev_path}/mdev_supported_types/{type_id}"
            for entry in sorted(os.listdir(os.path.join(src, type_id))):
                data = read_nofollow_bytes(os.path.join(src, type_id, entry))
                if data is None:
                    continue
                if zero and entry == "available_instances":
                    data = b"0\n"
                self.write(f"{d}/{entry}", data)
            self.makedirs(f"{d}/devices")

    def copy_tree(self, src: str, host_dir: str) -> None:
        """Copy the regular files and directories of captured tree `src` (links not followed) to `host_dir`."""
        self.makedirs(host_dir)
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            if os.path.isdir(path) and not os.path.islink(path):
                self.copy_tree(path, f"{host_dir}/{name}")
            else:
                data = read_nofollow_bytes(path)
                if data is not None:
                    self.write(f"{host_dir}/{name}", data)


def read_nofollow_bytes(path: str) -> bytes | None:
    """A captured regular file's bytes; None for anything else (a link, a FIFO, a directory), never opened."""
    try:
        return read_beneath(os.path.dirname(path), os.path.basename(path), limit=MAX_RECORDING)
    except OSError:
        return None
