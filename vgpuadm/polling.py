"""Bounded waits for what happens outside vgpuadm: mdev parents registering after a reboot (the vendor daemon, e.g.
nvidia-vgpud, can take seconds) and a running guest releasing a device it is unplugged from. One poll: a deadline,
a growing or fixed interval, never a fixed sleep for a guessed duration. (It was tenacity's Retrying with
stop_after_delay and wait_exponential, the same schedule; importing tenacity cost a seventh of a `restore` in the
kernel lane's guest: bench/README.md.)"""

from __future__ import annotations

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
