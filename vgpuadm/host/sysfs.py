"""Sysfs(root): the only place that touches kernel files. Every path is a host path (`/sys/...`) joined to one root.

Reads return attribute text without the kernel's trailing newline. Writes go to a `Writer`: plain file writes on a
real host, or the simulated kernel (vgpuadm.sim.kernel) when the root carries the simulation marker. Any OSError
becomes a HostIOError that names the host path and the errno, never the temporary root.
"""

from __future__ import annotations

import errno as errno_mod
import os
from typing import Protocol

from vgpuadm.errors import HostIOError

SIM_MARKER = "vgpuadm-simulated-host.json"  # at the root of a simulated host; holds its hardware model


class Writer(Protocol):
    """Applies one attribute write; raises OSError with the kernel's errno on refusal."""

    def write(self, host_path: str, data: str) -> None: ...


class PlainWriter:
    """A real host: the kernel applies the write and answers with an errno."""

    def __init__(self, root: str) -> None:
        self.root = root

    def write(self, host_path: str, data: str) -> None:
        # One write(2) per attribute: sysfs store callbacks see exactly one buffer (no buffering splits).
        fd = os.open(os.path.join(self.root, host_path.lstrip("/")), os.O_WRONLY)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)


class Sysfs:
    def __init__(self, root: str = "/", writer: Writer | None = None) -> None:
        self.root = os.path.abspath(root)
        self._prefix = "" if self.root == "/" else self.root
        self.writer: Writer = writer if writer is not None else PlainWriter(self.root)

    @property
    def simulated(self) -> bool:
        return os.path.exists(os.path.join(self.root, SIM_MARKER))

    def path(self, host_path: str) -> str:
        """The real filesystem path of a host path."""
        return self._prefix + host_path

    def host(self, real_path: str) -> str:
        """The host path of a real filesystem path under the root."""
        if self._prefix and real_path.startswith(self._prefix):
            return real_path[len(self._prefix) :] or "/"
        return real_path

    def _fail(self, action: str, host_path: str, exc: OSError, hint: str = "") -> HostIOError:
        code = exc.errno or 0
        name = errno_mod.errorcode.get(code, str(code))
        reason = os.strerror(code) if code else str(exc)
        return HostIOError(f"{action} {host_path} failed: {reason} ({name})", hint, path=host_path, errno=code)

    def read(self, host_path: str) -> str:
        """Attribute text without its trailing newline; HostIOError if missing or unreadable."""
        try:
            with open(self._prefix + host_path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise self._fail("reading", host_path, exc) from None
        text = data.decode(errors="replace")
        return text[:-1] if text.endswith("\n") else text

    def read_opt(self, host_path: str) -> str | None:
        """Like read, but None when the attribute does not exist (optional attributes)."""
        try:
            with open(self._prefix + host_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("reading", host_path, exc) from None
        text = data.decode(errors="replace")
        return text[:-1] if text.endswith("\n") else text

    def read_int(self, host_path: str, base: int = 10) -> int | None:
        """An integer attribute, None when absent; HostIOError naming the path when it is not an integer."""
        text = self.read_opt(host_path)
        if text is None:
            return None
        try:
            return int(text.strip(), base)
        except ValueError:
            raise HostIOError(f"{host_path} holds {text.strip()[:40]!r}, not an integer", path=host_path) from None

    def exists(self, host_path: str) -> bool:
        return os.path.lexists(self._prefix + host_path)

    def is_dir(self, host_path: str) -> bool:
        return os.path.isdir(self._prefix + host_path)

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; [] when the directory does not exist."""
        try:
            return sorted(os.listdir(self._prefix + host_path))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._fail("listing", host_path, exc) from None

    def readlink(self, host_path: str) -> str | None:
        """The raw link target, None when the path is not a link."""
        try:
            return os.readlink(self._prefix + host_path)
        except (FileNotFoundError, OSError):
            return None

    def link_name(self, host_path: str) -> str | None:
        """The last component of a link's target (driver → nvidia, iommu_group → 13)."""
        target = self.readlink(host_path)
        return os.path.basename(target) if target else None

    def resolve(self, host_path: str) -> str:
        """The host path with every link followed (/sys/bus/pci/devices/X → /sys/devices/pci.../X)."""
        return self.host(os.path.realpath(self._prefix + host_path))

    def write(self, host_path: str, data: str, hint: str = "") -> None:
        try:
            self.writer.write(host_path, data)
        except OSError as exc:
            raise self._fail(f"writing {data.strip()!r} to", host_path, exc, hint) from None


def check_root(root: str) -> None:
    """A usable host root exists and has a sys/ directory."""
    from vgpuadm.errors import NotFoundError

    if not os.path.isdir(root):
        raise NotFoundError(f"host root {root} does not exist", "pass --root DIR or set VGPUADM_ROOT to a host root")
    if not os.path.isdir(os.path.join(root, "sys")):
        raise NotFoundError(
            f"host root {root} has no sys/ directory",
            "point --root at a directory holding a sys/ tree, e.g. one made by `vgpuadm sim build p4 DIR`",
        )
