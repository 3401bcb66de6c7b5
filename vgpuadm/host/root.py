"""HostRoot: the one object that derives every path under a host root, as mdevctl's Environment does; and every
file under a root, opened by descriptor beneath it.

Every kernel, state and configuration path vgpuadm touches is a host path (`/sys/...`, `/run/vgpuadm/lock`) that
this object joins to one root (default `/`; `--root DIR` or `$VGPUADM_ROOT`). Users are always shown the host path,
never the temporary root. A root holding SIM_MARKER is a simulated host: its writes go to the simulated kernel.

The files: the one safe-open/safe-write helper, and the one lock.

Every file vgpuadm reads or writes below a directory it does not fully trust (a host root, an imported snapshot or
recording being laid down, a user's cache) goes through `*_beneath(top, rel, …)`: `top` is opened once, then each
component of `rel` with `dir_fd` + O_NOFOLLOW (+ O_DIRECTORY for directories), so no link is followed at any
component and nothing resolves outside `top` — whatever links a root, an archive or a recording holds (no text
check of a path can see a chain of relative links). `rel` is a plain relative path: no `..`, `.` or empty part.
Reads take regular files only (the type is checked first, and the open is O_NONBLOCK, so a FIFO never hangs) and
are size-limited. `write_beneath` is vgpuadm's one atomic writer — host configuration, the executor's state
(journal, drivers.json), snapshot archives, report files: a temp file with an unguessable name created
O_EXCL|O_NOFOLLOW in the same directory, fsync, rename, directory fsync (each fsync optional), an exact mode
whatever the umask; directories it creates get an exact mode too. `confine=False` lets the kernel follow links
among the directories above the file (the executor's state on `/`, where no link can lead out of the root); the
file itself is always replaced, never written through.

The low-level functions raise OSError (a `BeneathError` with a one-line reason naming the host path for a link,
a non-regular file or a too-large file); read_config/write_config/remove_config turn OSError into a HostIOError
naming the host path.

`FileLock` is an exclusive flock(2) on a lock file: the host lock (executor) and the simulated kernel's per-root lock.
Re-entrant within a thread, the way filelock's FileLock (which this replaced: ~30 ms of imports, a twentieth of an
`apply -f`) is by default: each thread holds the lock through its own descriptor, so two threads of one process
exclude each other as two processes do. The file is opened without following a link (O_NOFOLLOW), created with `mode`
(less the umask), and left in place on release, so every waiter locks the same inode.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from _thread import get_ident  # not `threading`: it loads collections and functools on the read commands' path

from vgpuadm.errors import HostIOError, NeedsRootError, NotFoundError, UnsafeError, UsageError
from vgpuadm.host.paths import (
    DEFAULT_ROOT,
    DRIVERS,
    EMBED_LIBVIRT,
    HOSTNAME,
    JOURNAL,
    LOCK,
    MACHINE_ID,
    MDEVCTL_DIR,
    NVIDIA_SMI,
    SRIOV_MANAGE,
    STATE_DIR,
)
from vgpuadm.host.sysfs import SIM_MARKER, Sysfs

__all__ = [
    "DEFAULT_ROOT", "DRIVERS", "EMBED_LIBVIRT", "HOSTNAME", "JOURNAL", "LOCK", "MACHINE_ID", "MDEVCTL_DIR",
    "NVIDIA_SMI", "SRIOV_MANAGE", "STATE_DIR", "HostRoot", "resolve_root",
]  # fmt: skip

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from vgpuadm.host.sysfs import Writer


def resolve_root(root: str | None) -> str:
    """--root, else $VGPUADM_ROOT, else /. An empty `--root ""` or VGPUADM_ROOT="" is refused (neither may silently
    mean /)."""
    if root is not None and not root.strip():
        raise UsageError("--root is empty", "pass --root DIR (a host root), or leave --root out for this host (/)")
    env = os.environ.get("VGPUADM_ROOT")
    if root is None and env is not None and not env.strip():
        raise UsageError("VGPUADM_ROOT is set but empty", "unset it for this host (/), or set it to a host root")
    return os.path.abspath(root or env or DEFAULT_ROOT)


def check_exists(root: str) -> None:
    """The root is an existing directory (checked before a lock or a state file is created under it)."""
    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise NotFoundError(f"host root {root} {what}", "pass --root DIR or set VGPUADM_ROOT to a host root")


def _nearest_existing(path: str) -> str:
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def check_writable(root: str, host_dirs: tuple[str, ...] = ("/run", STATE_DIR)) -> None:
    """A changing command can create its lock and journal: each host directory in `host_dirs` (or, when missing,
    its nearest existing parent, where it would be created) is writable by this process. NeedsRootError else."""
    eff = os.access in os.supports_effective_ids
    for host_dir in host_dirs:
        real = _nearest_existing(os.path.join(root, host_dir.lstrip("/")))
        if not os.access(real, os.W_OK | os.X_OK, effective_ids=eff):
            rel = os.path.relpath(real, root)
            shown = "/" if rel == "." else "/" + rel
            where = "" if root == "/" else f" (host root {root})"
            raise NeedsRootError(
                f"changing the host needs root (or write access to {shown}){where}",
                "rerun as root, e.g. with sudo; read-only commands and --dry-run need no root",
            )


_ENOENT = 2  # errno.ENOENT, without importing errno on the read commands' fast path


def _refuse(host_path: str, root: str, problem: str) -> str:
    raise UnsafeError(
        f"refusing to run {host_path} of host root {root}: it {problem}",
        f"install {os.path.basename(host_path)} as a regular root-owned file inside the root (not a link out of it)",
    )


class HostRoot:
    """One host root. `path` is the real directory; `real(host_path)` joins any host path to it."""

    __slots__ = ("path",)

    def __init__(self, root: str | None = None) -> None:
        object.__setattr__(self, "path", resolve_root(root))

    path: str

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __repr__(self) -> str:
        return f"HostRoot({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostRoot) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def real(self, host_path: str) -> str:
        """The real path of host path `host_path` (`/run/vgpuadm/lock` → `<root>/run/vgpuadm/lock`)."""
        return os.path.join(self.path, host_path.lstrip("/"))

    @property
    def simulated(self) -> bool:
        return os.path.exists(self.real(SIM_MARKER))

    @property
    def is_host(self) -> bool:
        """Whether this is the machine's own root (`/`), not a simulated or captured one."""
        return self.path == "/"

    def sysfs(self, writer_factory: Callable[[], Writer] | None = None) -> Sysfs:
        """The kernel files of this root; `writer_factory` makes the writer on the first write (the simulated kernel
        on a simulated root, chosen by ops.session: host/ sits below sim/)."""
        return Sysfs(self.path, writer_factory=writer_factory)

    def read_small(self, host_path: str, limit: int = 4096) -> str | None:
        """The first `limit` bytes of a small regular file under the root as text, None when it is missing, not a
        regular file (a FIFO never hangs the read) or unreadable. On a root other than / no link is followed at
        any component below the root (the `*_beneath` helpers below), so a planted link never shows another file's
        contents."""
        top, rel = ("/", host_path) if self.is_host else (self.path, host_path)
        try:
            if self.is_host:  # this host's own /etc/machine-id may be a link (to /var/lib/dbus/machine-id)
                fd = os.open(host_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        return None
                    return read_fd(fd, limit, host_path, truncate=True).decode(errors="replace")
                finally:
                    os.close(fd)
            data = read_beneath(top, rel, limit=limit, truncate=True)
        except OSError:
            return None
        return None if data is None else data.decode(errors="replace")

    def machine_id(self) -> str:
        """`<root>/etc/machine-id` when present (stable across reboots), else the host name."""
        ident = (self.read_small(MACHINE_ID) or "").strip()
        return ident or os.uname().nodename  # what socket.gethostname() returns, without importing socket

    def hostname(self) -> str:
        """The name a host's inventory carries: <root>/etc/hostname on a non-/ root when present, else this host's."""
        name = "" if self.is_host else (self.read_small(HOSTNAME) or "").strip()
        return name or os.uname().nodename  # what socket.gethostname() returns, without importing socket

    def has_executable(self, host_path: str) -> bool:
        return self.executable(host_path) is not None

    def executable(self, host_path: str) -> str | None:
        """The real path to run for a tool the root brings (`/usr/bin/nvidia-smi`), None when it has none. On a
        root other than /, a tool that resolves outside the root (a link or a linked directory leaving it), is not
        a regular file, or is owned by another user than root or this process, or writable by group or others, is
        refused with a one-line error: running it would run whatever another user put there, as root."""
        path = self.real(host_path)
        if self.is_host:
            return path if os.access(path, os.X_OK) else None
        if not os.path.lexists(path):
            return None
        inside, where = os.path.realpath(self.path), os.path.realpath(path)
        problem = ""
        if not where.startswith(inside.rstrip("/") + "/"):
            problem = f"resolves to {where}, outside the host root"
        else:
            try:
                st = os.stat(where)
            except OSError as exc:
                return None if exc.errno == _ENOENT else _refuse(host_path, self.path, exc.strerror or "unreadable")
            if (st.st_mode & 0o170000) != 0o100000:
                problem = "is not a regular file"
            elif st.st_uid not in (0, os.geteuid()):
                problem = f"is owned by uid {st.st_uid}, not by root"
            elif st.st_mode & 0o022:
                problem = "is writable by group or others"
            elif not os.access(where, os.X_OK):
                return None
        return _refuse(host_path, self.path, problem) if problem else where


MAX_CONFIG = 1 << 20  # bytes of a configuration file vgpuadm reads (hook, unit, mdevctl definition, policy)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
          stat.S_IFBLK: "a device", stat.S_IFDIR: "a directory", stat.S_IFREG: "a regular file"}  # fmt: skip


class BeneathError(OSError):
    """A path under `top` that vgpuadm refuses to use: a link, a non-regular file, too large, not a plain path.
    `strerror` names the host path (`/etc/libvirt is a symlink, …`); `reason` is the same without it."""

    def __init__(self, code: int, shown: str, reason: str) -> None:
        super().__init__(code, f"{shown} {reason}")
        self.shown = shown
        self.reason = reason


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _refused(shown: str, mode: int, wanted: str) -> BeneathError:
    code = errno.ELOOP if stat.S_ISLNK(mode) else errno.EINVAL
    return BeneathError(code, shown, f"is {_kind(mode)}, not {wanted}")


def parts_of(rel: str) -> list[str]:
    """The components of a plain relative path (a leading `/` is allowed: host paths); BeneathError else."""
    parts = rel.strip("/").split("/")
    if not rel.strip("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise BeneathError(errno.EINVAL, repr(rel), "is not a plain path")
    return parts


def _shown(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def _open_dir(top: str, parts: list[str], create: int | None = None, confine: bool = True) -> int:
    """A descriptor of directory top/parts…, each component opened without following a link (unless not
    `confine`); missing ones are created with mode `create` (exact) when it is given, else FileNotFoundError."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            made = False
            try:
                nfd = _open_child_dir(fd, part, parts[: i + 1], confine)
            except FileNotFoundError:
                if create is None:
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    made = True
                except FileExistsError:  # made meanwhile: opened below, never followed
                    pass
                nfd = _open_child_dir(fd, part, parts[: i + 1], confine)
            os.close(fd)
            fd = nfd
            if made and create is not None:
                os.fchmod(fd, create)  # whatever the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(fd: int, part: str, shown: list[str], confine: bool = True) -> int:
    try:
        return os.open(part, _DIR if confine else _DIR & ~os.O_NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise _refused(_shown(shown), os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode, "a directory") from None


def open_dir_beneath(top: str, rel: str, *, create: int | None = None) -> int:
    """A descriptor of directory `rel` under `top` (the caller closes it); `rel` "" is `top` itself."""
    return _open_dir(top, parts_of(rel) if rel.strip("/") else [], create)


def _open_regular(dfd: int, name: str, shown: str) -> int:
    """Open regular file `name` in `dfd` for reading: its type is checked before it is opened (a FIFO, a device or
    a link is refused unopened), the open is O_NONBLOCK|O_NOFOLLOW, and the type is checked again on the descriptor."""
    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise _refused(shown, st.st_mode, "a regular file")
    try:
        fd = os.open(name, _READ, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(shown, stat.S_IFLNK, "a regular file") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refused(shown, mode, "a regular file")
    return fd


def read_fd(fd: int, limit: int, shown: str, *, truncate: bool = False) -> bytes:
    """At most `limit` bytes of an open file; more is a BeneathError (EFBIG) unless `truncate`."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 16, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    if size > limit and not truncate:
        raise BeneathError(errno.EFBIG, shown, f"is larger than {limit} bytes")
    return data[:limit]


def read_beneath(top: str, rel: str, *, limit: int = MAX_CONFIG, truncate: bool = False) -> bytes | None:
    """The bytes of regular file `rel` under `top`, None when it (or a directory above it) does not exist."""
    parts = parts_of(rel)
    try:
        dfd = _open_dir(top, parts[:-1])
    except FileNotFoundError:
        return None
    try:
        fd = _open_regular(dfd, parts[-1], _shown(parts))
    except FileNotFoundError:
        return None
    finally:
        os.close(dfd)
    try:
        return read_fd(fd, limit, _shown(parts), truncate=truncate)
    finally:
        os.close(fd)


def _temp_name(name: str) -> str:
    return f".{name[:180]}.vgpuadm.{os.urandom(8).hex()}.tmp"  # unguessable, in the same directory


def write_beneath(top: str, rel: str, data: bytes, *, mode: int, dir_mode: int = 0o755, sync: bool = True,
                  sync_dir: bool = True, confine: bool = True) -> None:  # fmt: skip
    """Replace file `rel` under `top` with `data` atomically (a crash leaves the old or the new file), mode `mode`
    whatever the umask; missing directories are created with `dir_mode`. A link or FIFO at `rel` is replaced, never
    written through. sync=False skips the fsyncs, sync_dir=False the directory's; confine=False follows links among
    the directories below `top` (see the module's docstring)."""
    parts = parts_of(rel)
    dfd = _open_dir(top, parts[:-1], dir_mode, confine)
    try:
        name = parts[-1]
        tmp = _temp_name(name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:  # noqa: SIM105  (not contextlib.suppress: contextlib stays off the read commands' path)
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        if sync and sync_dir:
            os.fsync(dfd)
    finally:
        os.close(dfd)


def makedirs_beneath(top: str, rel: str, *, mode: int = 0o755) -> None:
    """Create directory `rel` under `top` and its missing parents (`mode`, exact); an existing link is refused."""
    os.close(open_dir_beneath(top, rel, create=mode))


def symlink_beneath(top: str, rel: str, target: str, *, dir_mode: int = 0o755) -> None:
    """Make (or replace) the link `rel` under `top` pointing at `target`; directories above it are never links."""
    parts = parts_of(rel)
    dfd = _open_dir(top, parts[:-1], dir_mode)
    try:
        st = _lstat(dfd, parts[-1])
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise _refused(_shown(parts), st.st_mode, "a link")
            os.unlink(parts[-1], dir_fd=dfd)
        os.symlink(target, parts[-1], dir_fd=dfd)
    finally:
        os.close(dfd)


def chmod_beneath(top: str, rel: str, mode: int) -> None:
    """Set the mode of directory or regular file `rel` under `top` (a link there is refused, never followed)."""
    parts = parts_of(rel)
    dfd = _open_dir(top, parts[:-1])
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            fd = _open_child_dir(dfd, parts[-1], parts)
        else:
            fd = _open_regular(dfd, parts[-1], _shown(parts))
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def remove_beneath(top: str, rel: str) -> bool:
    """Remove the file (or link) `rel` under `top`; False when there was none."""
    parts = parts_of(rel)
    try:
        dfd = _open_dir(top, parts[:-1])
    except FileNotFoundError:
        return False
    try:
        os.unlink(parts[-1], dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True


def list_beneath(top: str, rel: str) -> list[tuple[str, int]] | None:
    """The entries of directory `rel` under `top` as (name, st_mode of the entry itself, links not followed),
    sorted; None when it does not exist."""
    try:
        dfd = open_dir_beneath(top, rel)
    except FileNotFoundError:
        return None
    try:
        names = sorted(os.listdir(dfd))
        out = []
        for name in names:
            st = _lstat(dfd, name)
            if st is not None:
                out.append((name, st.st_mode))
        return out
    finally:
        os.close(dfd)


def _lstat(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def undo_fill(directory: str, made: bool) -> None:
    """Take back what an import laid into `directory`: remove it when the import `made` it, else empty it (it was
    empty). shutil.rmtree works by descriptor and never follows a link out of the tree."""
    import shutil

    if made:
        shutil.rmtree(directory, ignore_errors=True)
        return
    try:
        for name, mode in list_beneath(directory, "") or []:
            if stat.S_ISDIR(mode):
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            else:
                remove_beneath(directory, name)
    except OSError:
        pass


def resolve_links(path: str, links: dict[str, str], *, max_hops: int = 40) -> str | None:
    """Where `/`-rooted `path` leads inside a tree whose links are `links` (link path → target, as an archive or a
    recording declares them), component by component as the kernel does: a `..` after a link goes up from where
    the link led, not from where it sits (a text check of each link alone misses a chain). None when the path
    climbs above `/` or the links loop."""
    todo = [p for p in path.split("/") if p not in ("", ".")]
    out: list[str] = []
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if not out:
                return None
            out.pop()
            continue
        if part == ".":
            continue
        out.append(part)
        target = links.get("/" + "/".join(out))
        if target is not None:
            hops += 1
            if hops > max_hops:
                return None
            out.pop()
            if target.startswith("/"):
                out = []
            todo = [p for p in target.split("/") if p not in ("", ".")] + todo
    return "/" + "/".join(out)


# --- paths given whole (the directory is the caller's; only the file's own name is guarded) ----------------------


def read_nofollow(path: str, limit: int = MAX_CONFIG) -> str | None:
    """The text of regular file `path`, None when it does not exist; a link, FIFO or device there is an OSError."""
    data = read_beneath(os.path.dirname(path) or ".", os.path.basename(path), limit=limit)
    return None if data is None else data.decode("utf-8")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_report(path: str, text: str) -> None:
    """A report file (`inventory -o`, the exporter's `--textfile`), 0644, replaced atomically by write_beneath in the
    file's directory, which must exist: node_exporter and web servers never read half a file."""
    try:
        write_beneath(os.path.dirname(os.path.abspath(path)), os.path.basename(path), text.encode("utf-8"), mode=0o644)
    except OSError as exc:
        raise HostIOError(f"cannot write {path}: {exc.strerror}", "check the directory exists and is writable",
                          path=path, errno=exc.errno) from None  # fmt: skip


# --- configuration files under a host root ------------------------------------------------------------------------


def _rel(root: str, path: str) -> str:
    return os.path.relpath(path, root)


def _shown_path(root: str, path: str) -> str:
    return "/" + _rel(root, path)


_ING = {"read": "reading", "write": "writing", "remove": "removing"}


def file_error(verb: str, shown: str, exc: OSError | UnicodeDecodeError, hint: str = "",
               refused_hint: str = "remove it; vgpuadm follows no link under a host root") -> HostIOError:  # fmt: skip
    """The HostIOError for a failed `verb` (read, write, remove) of host path `shown`: `refusing to …` when the
    helper refused a link, FIFO or oversized file there, `… failed: <strerror>` for any other OSError."""
    if isinstance(exc, BeneathError):
        return HostIOError(f"refusing to {verb} {shown}: {exc.strerror}", refused_hint, path=shown, errno=exc.errno)
    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else "it is not text"
    return HostIOError(f"{_ING[verb]} {shown} failed: {reason}", hint, path=shown, errno=getattr(exc, "errno", None))


def read_config(root: str, path: str) -> str | None:
    """The text of a file vgpuadm installs under `root`, None when there is none; never through a link (at any
    component), never a FIFO or device, at most MAX_CONFIG bytes."""
    try:
        data = read_beneath(root, _rel(root, path))
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error("read", _shown_path(root, path), exc) from None


def write_config(root: str, path: str, text: str, *, mode: int) -> None:
    """Write a file vgpuadm installs under `root` atomically with `mode` whatever the umask; missing directories
    are created 0755; no component below the root is ever a link written through."""
    try:
        write_beneath(root, _rel(root, path), text.encode("utf-8"), mode=mode)
    except OSError as exc:
        raise file_error("write", _shown_path(root, path), exc,
                         "run as root, or point --root at a writable host root") from None  # fmt: skip


def remove_config(root: str, path: str) -> bool:
    """Remove a file vgpuadm installed under `root`; False when there was none."""
    try:
        return remove_beneath(root, _rel(root, path))
    except OSError as exc:
        raise file_error("remove", _shown_path(root, path), exc) from None


POLL = 0.05  # seconds between tries while waiting with a timeout


_HELD_PATHS: dict[int, set[str]] = {}  # thread id → the lock files that thread holds, through any FileLock


class LockTimeout(Exception):
    """The lock was still held by another descriptor when the timeout ran out."""


class FileLock:
    """An exclusive flock on `path`, held per thread (see the module docstring)."""

    def __init__(self, path: str, mode: int = 0o644) -> None:
        self.path, self.mode = path, mode
        self._held: dict[int, tuple[int, int]] = {}  # thread id → (descriptor, count) of the threads holding it

    @property
    def lock_counter(self) -> int:
        """How many times the calling thread holds the lock (0: not at all)."""
        held = self._held.get(get_ident())
        return held[1] if held else 0

    @property
    def is_locked(self) -> bool:
        return self.lock_counter > 0

    def acquire(self, timeout: float | None = None) -> None:
        """Take the lock (again, when this thread holds it): `timeout` None waits as long as it takes, 0 tries once,
        else tries every POLL seconds for up to `timeout` seconds; LockTimeout when it is still taken."""
        me = get_ident()
        if me in self._held:
            fd, count = self._held[me]
            self._held[me] = fd, count + 1
            return
        held = _HELD_PATHS.setdefault(me, set())
        if timeout is None and self.path in held:  # it would wait for itself for ever
            raise RuntimeError(f"{self.path} is already locked by this thread through another FileLock")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self.mode)
        try:
            if timeout is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                _try_for(fd, timeout, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._held[me] = fd, 1
        held.add(self.path)

    def release(self) -> None:
        """Give up one hold; the last closes the descriptor, which drops the flock."""
        me = get_ident()
        if me not in self._held:
            return
        fd, count = self._held.pop(me)
        if count > 1:
            self._held[me] = fd, count - 1
            return
        held = _HELD_PATHS.get(me, set())
        held.discard(self.path)
        if not held:
            _HELD_PATHS.pop(me, None)
        os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _try_for(fd: int, timeout: float, path: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout(f"{path} is locked") from None
            time.sleep(min(POLL, left))
