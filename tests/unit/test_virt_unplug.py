"""The bounded wait after a live unplug (vgpuadm/virt/conn.py `unplug`, through vgpuadm/polling.py).

A fake clock (time.monotonic, which polling.wait_until reads too) and a fake connection stand in for time and libvirt here: outside the kernel lane there is no device
a running guest could refuse to release (libvirt needs a real mdev or vfio-pci function to hot-plug one), and a real
wait would take UNPLUG_WAIT seconds. tests/kernel/guest/test_live.py runs the same path against the real kernel,
QEMU and libvirtd with a paused guest, which never acknowledges the unplug."""

from __future__ import annotations

import time

import pytest

from vgpuadm.errors import ConflictError
from vgpuadm.polling import wait_until
from vgpuadm.virt import conn
from vgpuadm.virt.conn import UNPLUG_POLL, UNPLUG_WAIT, unplug
from vgpuadm.virt.xml import hostdev_elements, mdev_hostdev, vf_hostdev

UUID = "5d0b1a8e-1111-4222-8333-444455556666"


class Clock:
    """Monotonic time that moves only when the code under test sleeps (installed as time.monotonic)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Guest:
    """A connection to a running domain whose guest lets go of an unplugged device after `release_after` looks at
    the live XML (None: never, as a paused guest)."""

    def __init__(self, device: str, release_after: int | None) -> None:
        self.device = device
        self.release_after = release_after
        self.looks = 0
        self.requests: list[tuple[str, str]] = []
        self.quoted_uri = "qemu:///system"

    def detach_live(self, name: str, device_xml: str) -> None:
        self.requests.append((name, device_xml))

    def xml(self, name: str, *, inactive: bool = True) -> str:
        assert (name, inactive) == ("web01", False)
        self.looks += 1
        gone = self.requests and self.release_after is not None and self.looks > self.release_after
        return f"<domain><name>{name}</name><devices>{'' if gone else self.device}</devices></domain>"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(time, "monotonic", c)
    return c


def present_until(clock: Clock, answers: list[bool]) -> tuple[list[float], object]:
    looks: list[float] = []

    def probe() -> bool:
        looks.append(clock())
        return answers.pop(0) if answers else True

    return looks, probe


def test_the_wait_ends_at_the_deadline_when_the_device_stays(clock: Clock) -> None:
    looks, probe = present_until(clock, [])
    assert wait_until(probe, lambda present: not present, 2.0, UNPLUG_POLL, max_interval=UNPLUG_POLL,
                      sleep=clock.sleep)  # fmt: skip
    assert sum(clock.sleeps) == 2.0 and set(clock.sleeps) == {UNPLUG_POLL}
    assert looks == [1000.0 + UNPLUG_POLL * i for i in range(int(2.0 / UNPLUG_POLL) + 1)]  # the last one at 2 s


def test_the_wait_ends_when_the_device_goes(clock: Clock) -> None:
    _looks, probe = present_until(clock, [True, True, False])
    assert not wait_until(probe, lambda present: not present, 2.0, UNPLUG_POLL, max_interval=UNPLUG_POLL,
                          sleep=clock.sleep)  # fmt: skip
    assert clock.sleeps == [UNPLUG_POLL, UNPLUG_POLL]
    clock.sleeps.clear()
    _looks, probe = present_until(clock, [False])
    assert not wait_until(probe, lambda present: not present, -1.0, sleep=clock.sleep)  # gone: never too late
    assert clock.sleeps == []


@pytest.mark.parametrize(
    ("device", "named"),
    [(mdev_hostdev(UUID), f"mdev {UUID}"), (vf_hostdev("0000:01:00.1"), "PCI device 0000:01:00.1")],
)
def test_a_guest_that_keeps_the_device_fails_the_unplug_within_the_bound(device: str, named: str, clock: Clock) -> None:
    guest = Guest(device, release_after=None)
    (el,) = hostdev_elements(device)
    with pytest.raises(ConflictError) as caught:
        unplug(guest, "web01", el, sleep=clock.sleep)
    assert caught.value.message == (
        f"the guest of domain web01 has not released {named} (PCIe unplug not acknowledged within "
        f"{UNPLUG_WAIT} s); nothing removed"
    )
    assert caught.value.hint == (
        "the guest OS must accept hot-unplug; or shut the domain down (virsh -c qemu:///system shutdown web01) "
        "and run the command again"
    )
    assert [n for n, _ in guest.requests] == ["web01"]  # one request, never repeated
    assert clock.now == 1000.0 + UNPLUG_WAIT  # waited exactly the bound


def test_a_guest_that_lets_go_ends_the_wait(clock: Clock) -> None:
    guest = Guest(mdev_hostdev(UUID), release_after=3)
    (el,) = hostdev_elements(guest.device)
    unplug(guest, "web01", el, sleep=clock.sleep)
    assert (guest.looks, clock.sleeps) == (4, [UNPLUG_POLL] * 3)
    assert conn.UNPLUG_WAIT == 10
