"""Bounded waits for what happens outside vgpuadm: mdev parents registering after a reboot (the vendor daemon, e.g.
nvidia-vgpud, can take seconds) and a running guest releasing a device it is unplugged from. One poll, through
tenacity: a deadline, a growing or fixed interval, never a fixed sleep for a guessed duration."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

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
    retrying = Retrying(
        stop=stop_after_delay(max(0.0, timeout)),
        wait=wait_exponential(multiplier=interval, min=interval, max=max_interval),
        retry=retry_if_result(lambda r: not done(r)),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
        sleep=sleep,
    )
    result: T = retrying(probe)
    return result
