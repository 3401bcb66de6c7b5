"""Bounded waits for what happens outside vgpuadm: mdev parents registering after a reboot (the vendor daemon, e.g.
nvidia-vgpud, can take seconds), a running guest releasing a device it is unplugged from, and another process
letting go of a lock file (FileLock: the host lock, the simulated kernel's). One poll: a deadline, a growing or fixed
interval, never a fixed sleep for a guessed duration. (It was tenacity's Retrying with stop_after_delay and
wait_exponential, the same schedule; importing tenacity cost a seventh of a `restore` in the kernel lane's guest:
bench/README.md.)"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    done: Callable[[T], bool],
    timeout: float,
    interval: float = 0.05,
    *,
    max_interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `probe` until `done(result)` or `timeout` seconds (time.monotonic) pass; returns the last result either
    way. `probe` runs at least once; the interval grows from `interval` to `max_interval` (equal: a fixed one)."""
    deadline = time.monotonic() + max(0.0, timeout)
    wait = min(max_interval, interval)
    while True:
        result = probe()
        if done(result) or time.monotonic() >= deadline:
            return result
        sleep(wait)
        wait = min(max_interval, max(interval, wait * 2))


class LockTimeout(Exception):
    """FileLock.acquire: the lock stayed held (by another process or thread) for the whole wait."""


class FileLock:
    """An exclusive flock(2) on the file at `path` (made with `mode` when missing), as the `filelock` package's
    FileLock took it on Linux, without that package's import (a fifth of `restore`'s: bench/README.md). Re-entrant
    in the thread that holds it (`lock_counter` counts the holds; the last release unlocks and closes the file);
    another thread of the process waits as another process does. `acquire(timeout)`: 0 tries once, a negative
    timeout waits for ever; LockTimeout when the wait ends with the lock still held elsewhere."""

    def __init__(self, path: str, mode: int = 0o644) -> None:
        self.path, self.mode = path, mode
        self._threads = threading.RLock()
        self._owner: int | None = None
        self._count = 0
        self._fd: int | None = None

    @property
    def is_locked(self) -> bool:
        """Whether this thread holds the lock."""
        return self._owner == threading.get_ident()

    @property
    def lock_counter(self) -> int:
        """How many times this thread holds the lock (0 when it does not)."""
        return self._count if self.is_locked else 0

    def _try(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, self.mode)
        try:
            with contextlib.suppress(PermissionError):  # another user's lock file: locking it still works
                os.fchmod(fd, self.mode)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def acquire(self, timeout: float = -1) -> None:
        start = time.monotonic()
        if not (self._threads.acquire(timeout=timeout) if timeout > 0 else self._threads.acquire(timeout < 0)):
            raise LockTimeout(self.path)
        try:
            if self._count == 0:
                left = math.inf if timeout < 0 else max(0.0, timeout - (time.monotonic() - start))
                if not wait_until(self._try, bool, left, interval=0.05, max_interval=0.05):
                    raise LockTimeout(self.path)
                self._owner = threading.get_ident()
            self._count += 1
        except BaseException:
            self._threads.release()
            raise

    def release(self) -> None:
        if not self.is_locked:
            return
        self._count -= 1
        if self._count == 0:
            fd, self._fd, self._owner = self._fd, None, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        self._threads.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()
