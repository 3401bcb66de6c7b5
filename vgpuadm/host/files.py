"""Configuration files vgpuadm writes under the host root for other programs (mdevctl definitions, systemd units,
libvirt hooks): read without following a symlink, written atomically (a temp file created O_EXCL|O_NOFOLLOW in the
same directory, fsync, rename, directory fsync) with an exact mode whatever the umask. The low-level functions let
OSError reach the caller; read_config/write_config/remove_config turn it into a HostIOError naming the host path."""

from __future__ import annotations

import contextlib
import os
import secrets

from vgpuadm.errors import HostIOError, UsageError


def read_nofollow(path: str) -> str | None:
    """The file's text, None when it does not exist; a symlink at `path` is an OSError (ELOOP)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as f:
        return f.read()


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, text: str, *, mode: int = 0o644, dir_mode: int = 0o755) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file; a missing directory is created
    with `dir_mode`."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, dir_mode)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.vgpuadm.{secrets.token_hex(8)}.tmp")  # unguessable
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def _shown(root: str, path: str) -> str:
    return "/" + os.path.relpath(path, root)


def read_config(root: str, path: str) -> str | None:
    """The text of a file vgpuadm installs under `root`, None when there is none; never through a symlink."""
    try:
        return read_nofollow(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not text"
        raise HostIOError(f"reading {_shown(root, path)} failed: {reason}", path=_shown(root, path),
                          errno=getattr(exc, "errno", None)) from None  # fmt: skip


def write_config(root: str, path: str, text: str, *, mode: int, levels: int = 1) -> None:
    """Write a file vgpuadm installs under `root` atomically with `mode` whatever the umask; its directory (and the
    `levels` - 1 above it) are created 0755 when absent and are never written through when they are symlinks."""
    try:
        directory = os.path.dirname(path)
        dirs = [directory]
        for _ in range(levels - 1):
            dirs.insert(0, os.path.dirname(dirs[0]))
        for d in dirs:
            if os.path.islink(d):
                raise UsageError(f"{_shown(root, d)} is a symlink", "vgpuadm does not write through symlinks")
        os.makedirs(os.path.dirname(dirs[0]), exist_ok=True)
        for d in dirs:
            if not os.path.isdir(d):
                os.mkdir(d)
                os.chmod(d, 0o755)  # whatever the umask
        write_atomic(path, text, mode=mode)
    except OSError as exc:
        raise HostIOError(f"writing {_shown(root, path)} failed: {exc.strerror}",
                          "run as root, or point --root at a writable host root", path=_shown(root, path),
                          errno=exc.errno) from None  # fmt: skip


def remove_config(root: str, path: str) -> bool:
    """Remove a file vgpuadm installed under `root`; False when there was none."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HostIOError(f"removing {_shown(root, path)} failed: {exc.strerror}", path=_shown(root, path),
                          errno=exc.errno) from None  # fmt: skip
    return True
