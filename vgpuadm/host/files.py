"""Configuration files vgpuadm writes under the host root for other programs (mdevctl definitions, systemd units):
read without following a symlink, written atomically (a temp file created O_EXCL|O_NOFOLLOW in the same directory,
fsync, rename, directory fsync) with an exact mode whatever the umask. OSError reaches the caller, which names the
host path."""

from __future__ import annotations

import contextlib
import os


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
    tmp = os.path.join(directory, f".{os.path.basename(path)}.vgpuadm.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        if not os.path.islink(tmp):
            os.unlink(tmp)  # a stale one of a crashed run with the same pid
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
