"""polling.wait_until, vgpuadm's one bounded wait (mdev parents registering, a guest releasing a device, a lock
file): the schedule tenacity's Retrying(stop_after_delay, wait_exponential) gave it before, without tenacity."""

from __future__ import annotations

import time

from vgpuadm.polling import wait_until


def test_the_interval_doubles_up_to_its_cap_until_done() -> None:
    calls: list[int] = []
    slept: list[float] = []
    got = wait_until(lambda: calls.append(len(calls)) or len(calls), lambda n: n == 7, 60, 0.05,
                     max_interval=1.0, sleep=slept.append)  # fmt: skip
    assert got == 7 and len(calls) == 7
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]


def test_a_fixed_interval_and_the_last_result_at_the_deadline() -> None:
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        time.sleep(s)

    start = time.monotonic()
    got = wait_until(lambda: "not yet", lambda r: r == "done", 0.2, 0.05, max_interval=0.05, sleep=sleep)
    assert got == "not yet"
    assert 0.2 <= time.monotonic() - start < 2
    assert set(slept) == {0.05} and len(slept) >= 4


def test_no_timeout_probes_once_and_never_sleeps() -> None:
    calls: list[int] = []
    got = wait_until(lambda: calls.append(1) or False, bool, 0, sleep=lambda _s: (_ for _ in ()).throw(AssertionError))
    assert (got, calls) == (False, [1])
