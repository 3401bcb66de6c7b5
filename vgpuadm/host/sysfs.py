"""Sysfs(root): the only place that touches kernel files. Every path is a host path (`/sys/...`) joined to one root.

Reads return attribute text without the kernel's trailing newline. Writes go to a `Writer`: plain file writes on a
real host, or the simulated kernel (vgpuadm.sim.kernel) when the root carries the simulation marker. Any OSError
becomes a HostIOError that names the host path and the errno, never the temporary root.
"""

from __future__ import annotations

import errno as errno_mod
import os
from collections.abc import Callable

from vgpuadm.errors import HostIOError, NotFoundError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)

SIM_MARKER = "vgpuadm-simulated-host.json"  # at the root of a simulated host; holds its hardware model
_O_READ = os.O_RDONLY | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_CHUNK = 65536
# read_tree's first read: attributes are short, and a buffer this small comes from Python's own allocator (a 64 KiB
# one costs a malloc and a shrinking realloc per file). A full buffer means: read on, _CHUNK at a time.
_SMALL = 256


if TYPE_CHECKING:
    from typing import Protocol

    class Writer(Protocol):
        """Applies one attribute write; raises OSError with the kernel's errno on refusal."""

        def write(self, host_path: str, data: str) -> None: ...

else:
    Writer = object  # run time: only annotations name it


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
    """`writer` applies writes; `writer_factory` makes one on the first write instead (the simulated kernel is
    costly to import, and read-only commands never need it)."""

    def __init__(
        self, root: str = "/", writer: Writer | None = None, writer_factory: Callable[[], Writer] | None = None
    ) -> None:
        self.root = os.path.abspath(root)
        self._prefix = "" if self.root == "/" else self.root
        self._writer = writer
        self._writer_factory = writer_factory

    @property
    def writer(self) -> Writer:
        if self._writer is None:
            self._writer = self._writer_factory() if self._writer_factory else PlainWriter(self.root)
        return self._writer

    @writer.setter
    def writer(self, writer: Writer) -> None:
        self._writer = writer

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

    def _read_raw(self, host_path: str) -> str:
        # os.open/os.read rather than open(): discovery reads thousands of attributes and the io stack costs
        # several times the syscalls. A sysfs attribute arrives in one read; regular files may need more.
        fd = os.open(self._prefix + host_path, _O_READ)
        try:
            data = os.read(fd, _CHUNK)
            if len(data) == _CHUNK:
                chunks = [data]
                while chunk := os.read(fd, _CHUNK):
                    chunks.append(chunk)
                data = b"".join(chunks)
        finally:
            os.close(fd)
        text = data.decode(errors="replace")
        return text[:-1] if text.endswith("\n") else text

    def read(self, host_path: str) -> str:
        """Attribute text without its trailing newline; HostIOError if missing or unreadable."""
        try:
            return self._read_raw(host_path)
        except OSError as exc:
            raise self._fail("reading", host_path, exc) from None

    def read_opt(self, host_path: str) -> str | None:
        """Like read, but None when the attribute does not exist (optional attributes)."""
        try:
            return self._read_raw(host_path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("reading", host_path, exc) from None

    def read_attrs(self, host_dir: str, names: tuple[str, ...]) -> dict[str, str | None]:
        """Several attributes of one directory, opened relative to it (one path walk instead of one per file).
        A missing attribute reads None; a missing directory reads all None."""
        return self.read_tree(host_dir, {"": names})[""]

    def read_tree(self, host_dir: str, wanted: dict[str, tuple[str, ...]]) -> dict[str, dict[str, str | None]]:
        """{subdir: {name: text}} for `subdir/name` under `host_dir`, all opened relative to one directory fd
        (discovery reads four attributes of every mdev type: thousands of files on a big host)."""
        try:
            dfd = os.open(self._prefix + host_dir, _O_DIR)
        except FileNotFoundError:
            return {sub: dict.fromkeys(names) for sub, names in wanted.items()}
        except OSError as exc:
            raise self._fail("opening", host_dir, exc) from None
        out: dict[str, dict[str, str | None]] = {}
        open_, read, close = os.open, os.read, os.close  # locals: this loop runs once per file
        try:
            for sub, names in wanted.items():
                attrs: dict[str, str | None] = {}
                base = f"{sub}/" if sub else ""
                for name in names:
                    rel = base + name
                    try:
                        fd = open_(rel, _O_READ, dir_fd=dfd)
                    except FileNotFoundError:
                        attrs[name] = None
                        continue
                    except OSError as exc:
                        raise self._fail("reading", f"{host_dir}/{rel}", exc) from None
                    try:
                        data = read(fd, _SMALL)
                        if len(data) == _SMALL:
                            while chunk := read(fd, _CHUNK):
                                data += chunk
                    except OSError as exc:
                        raise self._fail("reading", f"{host_dir}/{rel}", exc) from None
                    finally:
                        close(fd)
                    # Positional arguments: keywords cost a parse per call.
                    attrs[name] = data.decode("utf-8", "replace").removesuffix("\n")
                out[sub] = attrs
        finally:
            close(dfd)
        return out

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

    def entries(self, host_path: str) -> dict[str, bool]:
        """Entry name → is a symlink, in one scandir; {} when the directory does not exist."""
        try:
            with os.scandir(self._prefix + host_path) as it:
                return {e.name: e.is_symlink() for e in it}
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._fail("listing", host_path, exc) from None

    def readlink(self, host_path: str) -> str | None:
        """The raw link target, None when the path is not a link."""
        try:
            return os.readlink(self._prefix + host_path)
        except OSError:
            return None

    def link_name(self, host_path: str) -> str | None:
        """The last component of a link's target (driver → nvidia, iommu_group → 13)."""
        target = self.readlink(host_path)
        return os.path.basename(target) if target else None

    def resolve(self, host_path: str) -> str:
        """The host path with every link followed (/sys/bus/pci/devices/X → /sys/devices/pci.../X)."""
        return self.host(os.path.realpath(self._prefix + host_path))

    def resolve_link(self, host_path: str) -> str:
        """Follow one link whose directory holds no links itself (/sys/bus/pci/devices/X, /sys/class/mdev_bus/X,
        /sys/bus/mdev/devices/U): readlink + normpath, much cheaper than realpath. Not a link → the path."""
        target = self.readlink(host_path)
        if target is None:
            return host_path
        if target.startswith("/"):
            return self.host(target)
        return os.path.normpath(os.path.join(os.path.dirname(host_path), target))

    def write(self, host_path: str, data: str, hint: str = "") -> None:
        try:
            self.writer.write(host_path, data)
        except OSError as exc:
            raise self._fail(f"writing {data.strip()!r} to", host_path, exc, hint) from None


def check_root(root: str) -> None:
    """A usable host root exists and has a sys/ directory."""

    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise NotFoundError(f"host root {root} {what}", "pass --root DIR or set VGPUADM_ROOT to a host root")
    if not os.path.isdir(os.path.join(root, "sys")):
        raise NotFoundError(
            f"host root {root} has no sys/ directory",
            "point --root at a directory holding a sys/ tree, e.g. one made by `vgpuadm sim build p4 DIR`",
        )
