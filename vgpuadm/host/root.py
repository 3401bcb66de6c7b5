"""HostRoot: the one object that derives every path under a host root, as mdevctl's Environment does.

Every kernel, state and configuration path vgpuadm touches is a host path (`/sys/...`, `/run/vgpuadm/lock`) that
this object joins to one root (default `/`; `--root DIR` or `$VGPUADM_ROOT`). Users are always shown the host path,
never the temporary root. A root holding SIM_MARKER is a simulated host: its writes go to the simulated kernel.
"""

from __future__ import annotations

import os
import stat

from vgpuadm.errors import NeedsRootError, NotFoundError, UnsafeError, UsageError
from vgpuadm.host.files import read_beneath, read_fd
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
        any component below the root (host/files.py), so a planted link never shows another file's contents."""
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
