"""Sysfs(root): the only place that touches kernel files. Every path is a host path (`/sys/...`) joined to one root.

Reads return attribute text without the kernel's trailing newline. Writes go to a `Writer`: plain file writes on a
real host, or the simulated kernel (vgpuadm.sim.kernel) when the root carries the simulation marker. Any OSError
becomes a HostIOError that names the host path and the errno, never the temporary root.

On a root other than `/` the tree is untrusted (a copied or captured host: anyone who could write it may have
planted symlinks), so nothing read, listed or written may lead out of `<root>/sys`: a file is opened relative to a
descriptor of its directory, whose resolved path (/proc/self/fd) must lie inside `<root>/sys`, with O_NOFOLLOW on
the last component (attributes are never links in sysfs). The kernel's own links that paths go through (a bus
entry, `device`, `physfn`, `virtfnN`) are followed only because the directory check sees where they led; the
links whose names discovery reads (`driver`, `iommu_group`, `mdev_type`, …) must resolve inside `<root>/sys` too.
Leaving it is a HostIOError with errno EXDEV. On `/` every path is inside: no check, no extra system call.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat

from vgpuadm.errors import HostIOError, NotFoundError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)

SIM_MARKER = "vgpuadm-simulated-host.json"  # at the root of a simulated host; holds its hardware model
_O_READ = os.O_RDONLY | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Confined opens: never follow a link at the last component, never block on a planted FIFO.
_O_CONFINED = os.O_NOFOLLOW | os.O_NONBLOCK
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY) | os.O_CLOEXEC  # locates a file without opening it (no side effect)
_CHUNK = 65536
# read_tree's first read: attributes are short, and a buffer this small comes from Python's own allocator (a 64 KiB
# one costs a malloc and a shrinking realloc per file). A full buffer means: read on, _CHUNK at a time.
_SMALL = 256


if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class Writer(Protocol):
        """Applies one attribute write; raises OSError with the kernel's errno on refusal."""

        def write(self, host_path: str, data: str) -> None: ...

else:
    Writer = object  # run time: only annotations name it


class PlainWriter:
    """A real host: the kernel applies the write and answers with an errno. The file is opened as the Sysfs reads
    (confined to `<root>/sys` on a root other than /)."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs

    def write(self, host_path: str, data: str) -> None:
        # One write(2) per attribute: sysfs store callbacks see exactly one buffer (no buffering splits).
        fd = self.sysfs.open(host_path, os.O_WRONLY | os.O_CLOEXEC)
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
        # Where every opened path must resolve on a root other than / ("" on /: no checks).
        self._inside = os.path.realpath(self.root) + "/sys" if self._prefix else ""
        self._real_prefix = self._inside[:-4]
        self._writer = writer
        self._writer_factory = writer_factory
        # Attribute bytes → their text, for short attributes: every VF of a GPU lists the same types, so a big
        # layout B host reads a few dozen distinct texts thousands of times; each becomes one str (_read_at).
        self._texts: dict[bytes, str] = {}

    @property
    def writer(self) -> Writer:
        if self._writer is None:
            self._writer = self._writer_factory() if self._writer_factory else PlainWriter(self)
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
        for prefix in (self._prefix, self._real_prefix):
            if prefix and real_path.startswith(prefix + "/"):
                return real_path[len(prefix) :]
        return "/" if self._prefix and real_path in (self._prefix, self._real_prefix) else real_path

    # -- confinement (roots other than /) -----------------------------------------------------------------------
    def _escape(self, host_path: str, where: str) -> HostIOError:
        shown = self.host(where)
        return HostIOError(
            f"refusing {host_path}: it leads outside the host root's {'/dev' if host_path.startswith('/dev/') else '/sys'} "
            f"(to {shown})",
            "a symlink under the host root points out of its /sys: remove it, or rebuild the root",
            path=host_path,
            errno=errno_mod.EXDEV,
        )

    def _is_inside(self, where: str) -> bool:
        """Inside <root>/sys, or <root>/dev (the VFIO group nodes and render nodes the kernel makes there)."""
        dev = self._real_prefix + "/dev"
        return any(where == top or where.startswith(top + "/") for top in (self._inside, dev))

    def _where(self, fd: int, real_path: str) -> str:
        """The resolved path of an open descriptor (realpath of the path it was opened by, without /proc)."""
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return os.path.realpath(real_path)

    def _check_fd(self, fd: int, host_path: str, real_path: str) -> None:
        """Close `fd` and raise unless it resolves inside <root>/sys."""
        where = self._where(fd, real_path)
        if not self._is_inside(where):
            os.close(fd)
            raise self._escape(host_path, where)

    def open_dir(self, host_dir: str) -> int:
        """A descriptor of directory `host_dir`, checked to lie inside <root>/sys on a root other than /."""
        real = self._prefix + host_dir
        fd = os.open(real, _O_DIR)
        if self._inside:
            self._check_fd(fd, host_dir, real)
        return fd

    def open(self, host_path: str, flags: int) -> int:
        """os.open of a host path; on a root other than / relative to its checked directory, with O_NOFOLLOW
        (a symlink is a HostIOError, not ELOOP) and O_NONBLOCK. OSError as os.open raises it."""
        if not self._inside:
            return os.open(host_path, flags)
        host_dir, _, name = host_path.rpartition("/")
        dfd = self.open_dir(host_dir or "/")
        try:
            fd = os.open(name, flags | _O_CONFINED, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno_mod.ELOOP:
                raise self._link_refused(host_path) from None
            raise
        finally:
            os.close(dfd)
        if flags & os.O_ACCMODE != os.O_RDONLY:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:  # a hard link may share a file outside the root
                os.close(fd)
                raise HostIOError(
                    f"refusing to write {host_path}: it is a hard link ({st.st_nlink} names), not a kernel attribute",
                    "a hard link under the host root may be a file outside it: remove it, or rebuild the root",
                    path=host_path,
                    errno=errno_mod.EXDEV,
                )
        return fd

    def _check_not_link(self, host_path: str) -> None:
        """The path's directory lies inside <root>/sys and the path itself is no symlink (a missing one passes:
        the writer answers ENOENT)."""
        host_dir, _, name = host_path.rpartition("/")
        dfd = self.open_dir(host_dir or "/")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(dfd)
        if stat.S_ISLNK(st.st_mode):
            raise self._link_refused(host_path)

    def _link_refused(self, host_path: str) -> HostIOError:
        target = self.readlink(host_path) or "?"
        return HostIOError(
            f"refusing {host_path}: it is a symlink (to {target}), not a kernel attribute",
            "a symlink under the host root stands where sysfs has a file: remove it, or rebuild the root",
            path=host_path,
            errno=errno_mod.ELOOP,
        )

    def _check_link(self, host_path: str, target: str) -> None:
        """A kernel link (driver, iommu_group, physfn, mdev_type…) must resolve inside <root>/sys."""
        real = self._prefix + host_path
        try:
            fd = os.open(real, _O_PATH)
        except OSError:  # dangling: where it would lead, from the resolved directory holding it
            where = os.path.normpath(os.path.join(os.path.realpath(os.path.dirname(real)), target))
            if not self._is_inside(where):
                raise self._escape(host_path, where) from None
            return
        try:
            where = self._where(fd, real)
        finally:
            os.close(fd)
        if not self._is_inside(where):
            raise self._escape(host_path, where)

    def _fail(self, action: str, host_path: str, exc: OSError, hint: str = "") -> HostIOError:
        code = exc.errno or 0
        name = errno_mod.errorcode.get(code, str(code))
        reason = os.strerror(code) if code else str(exc)
        return HostIOError(f"{action} {host_path} failed: {reason} ({name})", hint, path=host_path, errno=code)

    def _read_raw(self, host_path: str) -> str:
        # os.open/os.read rather than open(): discovery reads thousands of attributes and the io stack costs
        # several times the syscalls. A sysfs attribute arrives in one read; regular files may need more.
        fd = self.open(host_path, _O_READ) if self._inside else os.open(host_path, _O_READ)
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
            dfd = self.open_dir(host_dir)
        except FileNotFoundError:
            return {sub: dict.fromkeys(names) for sub, names in wanted.items()}
        except OSError as exc:
            raise self._fail("opening", host_dir, exc) from None
        try:
            return self._read_at(dfd, host_dir, wanted)
        finally:
            os.close(dfd)

    def read_subdirs(self, host_dir: str, names: tuple[str, ...]) -> dict[str, dict[str, str | None]]:
        """read_tree(host_dir, {sub: names for every sub in listdir(host_dir)}), the listing and the reads through
        one descriptor of the directory (an mdev parent's types: one directory open and check, not two)."""
        try:
            dfd = self.open_dir(host_dir)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._fail("listing", host_dir, exc) from None
        try:
            try:
                subs = sorted(os.listdir(dfd))
            except OSError as exc:
                raise self._fail("listing", host_dir, exc) from None
            return self._read_at(dfd, host_dir, dict.fromkeys(subs, names))
        finally:
            os.close(dfd)

    def scan(self, host_dir: str) -> DirScan:
        """One directory read through one descriptor of it: `with sysfs.scan(d) as dir_:` then dir_.entries(),
        dir_.link_names(…), dir_.read_attrs(…) answer as entries(d), link_names(d, …) and read_attrs(d, …) do (a PCI
        function's scandir, links and attributes: one directory open and check, not three). Opening it fails as
        entries(d) fails; a missing directory has no entries."""
        return DirScan(self, host_dir)

    def _read_at(self, dfd: int, host_dir: str, wanted: dict[str, tuple[str, ...]]) -> dict[str, dict[str, str | None]]:
        """read_tree's reads, relative to `dfd`, a checked descriptor of `host_dir` (left open)."""
        out: dict[str, dict[str, str | None]] = {}
        open_, read, close = os.open, os.read, os.close  # locals: this loop runs once per file
        texts = self._texts
        confined = bool(self._inside)
        flags = _O_READ | _O_CONFINED if confined else _O_READ
        for sub, names in wanted.items():
            attrs: dict[str, str | None] = {}
            base = f"{sub}/" if sub else ""
            sfd = dfd
            if confined and sub:
                # A subdirectory that is a link could lead anywhere: open it without following, read in it.
                try:
                    sfd = open_(sub, _O_DIR | os.O_NOFOLLOW, dir_fd=dfd)
                except FileNotFoundError:
                    out[sub] = dict.fromkeys(names)
                    continue
                except OSError as exc:
                    if exc.errno in (errno_mod.ELOOP, errno_mod.ENOTDIR) and self.readlink(f"{host_dir}/{sub}"):
                        raise self._link_refused(f"{host_dir}/{sub}") from None
                    raise self._fail("opening", f"{host_dir}/{sub}", exc) from None
                base = ""
            try:
                for name in names:
                    rel = base + name
                    try:
                        fd = open_(rel, flags, dir_fd=sfd)
                    except FileNotFoundError:
                        attrs[name] = None
                        continue
                    except OSError as exc:
                        if confined and exc.errno == errno_mod.ELOOP:
                            raise self._link_refused(f"{host_dir}/{base or sub + '/'}{name}") from None
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
                    text = texts.get(data)
                    if text is None:
                        # Positional arguments: keywords cost a parse per call.
                        text = data.decode("utf-8", "replace").removesuffix("\n")
                        if len(data) < _SMALL:
                            texts[data] = text
                    attrs[name] = text
            finally:
                if sfd != dfd:
                    close(sfd)
            out[sub] = attrs
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
        """Whether the entry exists (a link counts, followed or not)."""
        if not self._inside:
            return os.path.lexists(host_path)
        host_dir, _, name = host_path.rpartition("/")
        try:
            dfd = self.open_dir(host_dir or "/")
        except OSError:
            return False
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            os.close(dfd)

    def is_dir(self, host_path: str) -> bool:
        """Whether the path is a directory (following links: on a root other than /, one inside <root>/sys)."""
        if not self._inside:
            return os.path.isdir(host_path)
        try:
            os.close(self.open_dir(host_path))
        except (OSError, HostIOError):  # outside <root>/sys: not a directory of this host
            return False
        return True

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; [] when the directory does not exist."""
        try:
            if not self._inside:
                return sorted(os.listdir(host_path))
            fd = self.open_dir(host_path)
            try:
                return sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._fail("listing", host_path, exc) from None

    def entries(self, host_path: str) -> dict[str, bool]:
        """Entry name → is a symlink, in one scandir; {} when the directory does not exist."""
        try:
            if not self._inside:
                with os.scandir(host_path) as it:
                    return {e.name: e.is_symlink() for e in it}
            fd = self.open_dir(host_path)
            try:
                with os.scandir(fd) as it:
                    return {e.name: e.is_symlink() for e in it}
            finally:
                os.close(fd)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._fail("listing", host_path, exc) from None

    def readlink(self, host_path: str) -> str | None:
        """The raw link target, None when the path is not a link (its directory is checked, the target is not:
        it is only text here)."""
        try:
            if not self._inside:
                return os.readlink(host_path)
            host_dir, _, name = host_path.rpartition("/")
            dfd = self.open_dir(host_dir or "/")
            try:
                return os.readlink(name, dir_fd=dfd)
            finally:
                os.close(dfd)
        except OSError:
            return None

    def link_name(self, host_path: str) -> str | None:
        """The last component of a kernel link's target (driver → nvidia, iommu_group → 13); on a root other than
        /, a link leading outside <root>/sys is a HostIOError."""
        target = self.readlink(host_path)
        if target and self._inside:
            self._check_link(host_path, target)
        return os.path.basename(target) if target else None

    def link_names(self, host_dir: str, names: list[str]) -> dict[str, str | HostIOError | None]:
        """link_name of several links of one directory, read relative to one descriptor of it (a PCI function has
        a dozen: virtfnN, driver, iommu_group, physfn). A link leading outside <root>/sys maps to its HostIOError,
        for the caller to raise where it would have called link_name."""
        out: dict[str, str | HostIOError | None] = {}
        if not self._inside:
            for name in names:
                try:
                    target = os.readlink(f"{host_dir}/{name}")
                except OSError:
                    target = ""
                out[name] = os.path.basename(target) if target else None
            return out
        try:
            dfd = self.open_dir(host_dir)
        except (OSError, HostIOError):  # link_name, one at a time, says what each would have said
            for name in names:
                try:
                    out[name] = self.link_name(f"{host_dir}/{name}")
                except HostIOError as exc:
                    out[name] = exc
            return out
        try:
            return self._links_at(dfd, host_dir, names)
        finally:
            os.close(dfd)

    def _links_at(self, dfd: int, host_dir: str, names: list[str]) -> dict[str, str | HostIOError | None]:
        """link_names' reads, relative to `dfd`, a checked descriptor of `host_dir` (left open)."""
        out: dict[str, str | HostIOError | None] = {}
        for name in names:
            try:
                target = os.readlink(name, dir_fd=dfd)
            except OSError:
                target = ""
            if not target:
                out[name] = None
                continue
            if not self._inside:
                out[name] = os.path.basename(target)
                continue
            host_path, real = f"{host_dir}/{name}", f"{self._prefix}{host_dir}/{name}"
            try:  # as _check_link, relative to the directory's descriptor
                fd = os.open(name, _O_PATH, dir_fd=dfd)
            except OSError:  # dangling: where it would lead, from the resolved directory holding it
                where = os.path.normpath(os.path.join(os.path.realpath(self._prefix + host_dir), target))
            else:
                try:
                    where = self._where(fd, real)
                finally:
                    os.close(fd)
            out[name] = os.path.basename(target) if self._is_inside(where) else self._escape(host_path, where)
        return out

    def resolve(self, host_path: str) -> str:
        """The host path with every link followed (/sys/bus/pci/devices/X → /sys/devices/pci.../X)."""
        real = os.path.realpath(self._prefix + host_path)
        if self._inside and not self._is_inside(real):
            raise self._escape(host_path, real)
        return self.host(real)

    def resolve_link(self, host_path: str) -> str:
        """Follow one link whose directory holds no links itself (/sys/bus/pci/devices/X, /sys/class/mdev_bus/X,
        /sys/bus/mdev/devices/U): readlink + normpath, much cheaper than realpath. Not a link → the path. On a root
        other than / the result must stay under /sys (every later open checks where it really leads)."""
        return self._resolved(host_path, self.readlink(host_path))

    def _resolved(self, host_path: str, target: str | None) -> str:
        """resolve_link's answer for the link `host_path` holding `target` (None: not a link)."""
        if target is None:
            return host_path
        if target.startswith("/"):
            out = self.host(target)
        else:
            out = os.path.normpath(os.path.join(os.path.dirname(host_path), target))
        if self._inside and not out.startswith("/sys/"):
            raise self._escape(host_path, target if target.startswith("/") else self._prefix + out)
        return out

    def write(self, host_path: str, data: str, hint: str = "") -> None:
        try:
            if self._inside:
                self._check_not_link(host_path)  # for every writer, the simulated kernel too
            self.writer.write(host_path, data)
        except OSError as exc:
            raise self._fail(f"writing {data.strip()!r} to", host_path, exc, hint) from None


class DirScan:
    """Sysfs.scan: a checked descriptor of one directory (none when it does not exist), closed on leaving."""

    def __init__(self, sysfs: Sysfs, host_dir: str) -> None:
        self.sysfs = sysfs
        self.host_dir = host_dir
        self.fd: int | None = None

    def __enter__(self) -> DirScan:
        try:
            self.fd = self.sysfs.open_dir(self.host_dir)
        except FileNotFoundError:
            self.fd = None
        except OSError as exc:
            raise self.sysfs._fail("listing", self.host_dir, exc) from None
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def entries(self) -> dict[str, bool]:
        if self.fd is None:
            return {}
        try:
            with os.scandir(self.fd) as it:
                return {e.name: e.is_symlink() for e in it}
        except OSError as exc:
            raise self.sysfs._fail("listing", self.host_dir, exc) from None

    def link_names(self, names: list[str]) -> dict[str, str | HostIOError | None]:
        if self.fd is None:
            return self.sysfs.link_names(self.host_dir, names)
        return self.sysfs._links_at(self.fd, self.host_dir, names)

    def resolve_link(self, name: str) -> str:
        """resolve_link(host_dir/name), the link read relative to the directory (/sys/bus/pci/devices: one
        directory open and check for every function's bus entry, not one each)."""
        if self.fd is None:
            return self.sysfs.resolve_link(f"{self.host_dir}/{name}")
        try:
            target: str | None = os.readlink(name, dir_fd=self.fd)
        except OSError:
            target = None
        return self.sysfs._resolved(f"{self.host_dir}/{name}", target)

    def read_attrs(self, names: tuple[str, ...]) -> dict[str, str | None]:
        if self.fd is None:
            return dict.fromkeys(names)
        return self.sysfs._read_at(self.fd, self.host_dir, {"": names})[""]


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
