"""Reading a user-given input file (a plan, an inventory report, a umockdev recording) with bounds: only a regular
file, at most a size limit, checked on the open descriptor before anything is read (so `/dev/zero`, a FIFO or a
200 MB file is one refusal, never a hang or a memory blow-up)."""

from __future__ import annotations

import os
import re
import stat
from typing import BinaryIO

from vgpuadm.errors import UsageError, VgpuadmError

MAX_INPUT = 4 * 1024 * 1024  # 4 MiB: a plan for thousands of VMs, or a whole host's umockdev recording, is far less
# A descriptor this process already holds (`-f /dev/stdin`, the shell's `-f <(…)`): a pipe there has its writer,
# so reading it is reading a stream; a named FIFO elsewhere is still refused (opening it waits for a writer).
_OPEN_FD = re.compile(r"/dev/stdin|/dev/fd/[0-9]{1,9}|/proc/self/fd/[0-9]{1,9}")


def read_input(
    path: str,
    what: str,
    hint: str,
    limit: int = MAX_INPUT,
    unreadable: type[VgpuadmError] = UsageError,
    pipes: bool = False,
) -> bytes:
    """The bytes of the regular file `path` (`what`, e.g. "plan", names it in messages before the path; "" for
    none); `unreadable` (UsageError by default) for a missing or unreadable file, UsageError for a non-regular or
    oversized one. With `pipes`, a pipe this process already holds (`/dev/stdin`, `/dev/fd/N`) is read like
    `-f -`, to the same limit."""
    name = f"{what} {path}" if what else path
    fd = _open(path, name, hint, unreadable)
    try:
        st = os.fstat(fd)
        if pipes and stat.S_ISFIFO(st.st_mode) and _OPEN_FD.fullmatch(path):
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as stream:
                return read_stream(stream, name, hint, limit)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{name} is not a regular file", hint)
        if st.st_size > limit:
            raise UsageError(f"{name} is {st.st_size} bytes, over the {_mib(limit)} limit", hint)
        os.set_blocking(fd, True)
        # The file may grow between fstat and read: read one byte more than it had, then, if that byte came, on up
        # to one byte over the limit. (One read of limit + 1 would allocate the limit for every file: 16 MiB per
        # report in `inventory merge`; os.read, not a buffered file: no dup, no buffer per report.)
        want = min(st.st_size, limit) + 1
        data = _read_upto(fd, want)
        if len(data) == want and want <= limit:
            data += _read_upto(fd, limit + 1 - want)
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror}", hint) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UsageError(f"{name} is over the {_mib(limit)} limit", hint)
    return data


def read_head(path: str, size: int, hint: str) -> bytes:
    """The first `size` bytes of the regular file `path` (a format's magic): the same refusals as read_input — a
    FIFO, a device or a directory is one UsageError, never a hang."""
    fd = _open(path, path, hint, UsageError)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path} is not a regular file", hint)
        return _read_upto(fd, size)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", hint) from None
    finally:
        os.close(fd)


def _open(path: str, name: str, hint: str, unreadable: type[VgpuadmError]) -> int:
    """A descriptor of `path` for reading; `unreadable` (naming it `name`) when it cannot be opened."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang (it is refused right after, by fstat).
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise unreadable(f"cannot read {name}: {exc.strerror}", hint) from None


def _read_upto(fd: int, size: int) -> bytes:
    """Up to `size` bytes of `fd`, fewer only at its end (a read may return less than asked)."""
    data = os.read(fd, size)
    if len(data) in (0, size):
        return data
    chunks = [data]
    size -= len(data)
    while size and (chunk := os.read(fd, size)):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_stream(stream: BinaryIO, what: str, hint: str, limit: int = MAX_INPUT) -> bytes:
    """Up to `limit` bytes of a stream (`apply -f -`: the plan on stdin), read in one bounded call; more is the
    same refusal as an oversized file."""
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}", hint) from None
    if len(data) > limit:
        raise UsageError(f"{what} is over the {_mib(limit)} limit", hint)
    return data


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"
