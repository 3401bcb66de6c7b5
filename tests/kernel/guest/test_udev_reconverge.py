"""#35's udev rule on the guest's real kernel and a real udevd: with `vgpuadm udev install`'s rule in
/etc/udev/rules.d (a tmpfs here: nothing is written to the host's) and systemd-udevd running, a driver reload
brings the recorded devices back without anyone calling vgpuadm:

- rmmod + insmod of the sample mdev drivers: their parents register again (the kernel's change uevent with
  MDEV_STATE=registered) and the mdevs come back with the same UUIDs and types;
- the SR-IOV PF's driver unbound and bound again (after its VFs went away, as a driver reload takes them): the bind
  uevent brings the VFs back and the VF's vfio-pci bind; a second bind event while that run is pending is dropped
  (one reset, one run);
- a reload with nothing recorded changes nothing, and the system log says "nothing to restore".

The system log is read where vgpuadm's runs write it: a datagram socket bound at /dev/log for the module (the
guest runs no syslog daemon). udevd runs RUN programs without PATH or PYTHONPATH: the rule runs this checkout's
vgpuadm through /usr/bin/env PYTHONPATH=…, as test_hook.py's hook does. The lane has no systemd, so each run is
handed to a detached child (systemd-run is the other path)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from guest_virsh import URI

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.ops import udev

REPO = Path(__file__).resolve().parents[3]
RULES = Path("/etc/udev/rules.d")
PENDING = Path("/run/vgpuadm/udev")
PCI = "/sys/bus/pci/devices"
UDEVD = ("/lib/systemd/systemd-udevd", "/usr/lib/systemd/systemd-udevd")
WAIT_S = 300  # under TCG: udevd's worker, a Python start, the settle delay, a restore through libvirt


class SyslogSink:
    """What processes send to /dev/log, as text lines (the `vgpuadm[pid]: ` prefix kept)."""

    def __init__(self, path: str = "/dev/log") -> None:
        self.path = path
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        os.chmod(path, 0o666)
        self._sock.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.lines.append(data.decode("utf-8", "replace"))

    def ours(self) -> list[str]:
        """vgpuadm's messages so far, without the priority, time and ident."""
        with self._lock:
            return [line.split("]: ", 1)[1] for line in self.lines if "vgpuadm[" in line and "]: " in line]

    def clear(self) -> None:
        with self._lock:
            self.lines.clear()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _udevd_running() -> bool:
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() in ("systemd-udevd", "udevd"):
                return True
    return False


def _udevadm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["udevadm", *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def syslog() -> Iterator[SyslogSink]:
    assert not os.path.exists("/dev/log"), "something else listens on /dev/log in the guest"
    sink = SyslogSink()
    yield sink
    sink.close()


@pytest.fixture(scope="module")
def udevd() -> Iterator[None]:
    """systemd-udevd: the one running, else one started here (`--daemon`) and stopped after the module."""
    started = False
    if not _udevd_running():
        binary = next(p for p in UDEVD if os.access(p, os.X_OK))
        subprocess.run([binary, "--daemon"], check=True, capture_output=True, timeout=120)
        started = True
    deadline = time.monotonic() + 120
    while _udevadm("control", "--ping").returncode != 0:
        assert time.monotonic() < deadline, "udevd does not answer udevadm control --ping"
        time.sleep(0.5)
    yield
    if started:
        _udevadm("control", "--exit")


@pytest.fixture(scope="module")
def rule(udevd: None, syslog: SyslogSink) -> Iterator[Path]:
    """vgpuadm's udev rule, installed into a tmpfs over /etc/udev/rules.d, udevd told to read it."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "lane-udev-rules", str(RULES)], check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    command = ["/usr/bin/env", f"PYTHONPATH={REPO}", sys.executable, "-m", "vgpuadm"]
    result = udev.install(None, command=command)
    assert result.installed and result.current and result.changed, result.to_json()
    assert result.reload == "udev reloaded its rules (/usr/bin/udevadm control --reload)"
    path = RULES / "61-vgpuadm.rules"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    yield path
    udev.uninstall(None)
    _udevadm("control", "--reload")
    subprocess.run(["umount", str(RULES)], check=False, capture_output=True, timeout=60)


def _mdevs(cli) -> list[tuple[str, str, str]]:
    return sorted((d["id"], d["type_id"], d["parent"]) for d in json.loads(cli("devices", "--json").out))


def _settled(syslog: SyslogSink, done: Callable[[], bool], what: str) -> None:
    """Wait until `done()` holds, udevd's queue is empty and no run is pending (each run removes its file)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        _udevadm("settle", "--timeout=60")
        if done() and not (PENDING.is_dir() and any(PENDING.iterdir())):
            return
        if time.monotonic() > deadline:
            pending = sorted(p.name for p in PENDING.iterdir()) if PENDING.is_dir() else []
            raise AssertionError(f"{what}: not within {WAIT_S}s; pending {pending}; system log: {syslog.ours()}")
        time.sleep(1)


def _reload(*names: str) -> None:
    modules = os.environ["VGPUADM_KERNEL_MODULES"]
    for name in names:
        subprocess.run(["rmmod", name], check=True, capture_output=True, timeout=120)
    for name in names:
        subprocess.run(["insmod", f"{modules}/{name}.ko"], check=True, capture_output=True, timeout=120)


def test_a_reload_with_nothing_recorded_does_nothing_and_says_so(rule: Path, syslog: SyslogSink, sysfs: Sysfs,
                                                                 libvirtd: None) -> None:  # fmt: skip
    _settled(syslog, lambda: True, "quiet before the reload")
    syslog.clear()
    _reload("mtty")
    _settled(syslog, lambda: any("nothing to restore" in m for m in syslog.ours()), "the run for mtty")
    got = syslog.ours()
    assert got.count("udev: mdev parent mtty appeared again: re-converging it in 2 s (detached)") == 1, got
    assert "nothing to restore: all 0 recorded device(s) on parent mtty are in place" in got, got
    assert sysfs.listdir("/sys/bus/mdev/devices") == []


def test_the_sample_drivers_reloaded_bring_back_the_same_mdevs(rule: Path, syslog: SyslogSink, cli, sysfs: Sysfs,
                                                                domain) -> None:  # fmt: skip
    a = domain("kl-udev-a")
    for args in (("--type", "mtty-2", "--vm", a, "--total", "2"), ("--type", "mdpy-vga", "--vm", a)):
        result = cli("--connect", URI, "create", *args)
        assert result.code == 0, result.err
    made = _mdevs(cli)
    assert len(made) == 3
    _settled(syslog, lambda: True, "quiet before the reload")
    syslog.clear()

    _reload("mtty", "mdpy")  # nobody calls vgpuadm from here on: udevd does
    _settled(syslog, lambda: _mdevs(cli) == made, "the mdevs back")
    got = syslog.ours()
    assert got.count("udev: mdev parent mtty appeared again: re-converging it in 2 s (detached)") == 1, got
    assert got.count("udev: mdev parent mdpy appeared again: re-converging it in 2 s (detached)") == 1, got
    assert any(m.startswith("restored: ") for m in got), got
    assert cli("--connect", URI, "destroy", "--vm", a, "--all").code == 0


def test_the_pf_driver_rebound_brings_back_vfs_and_binds_once(rule: Path, syslog: SyslogSink, cli, sysfs: Sysfs,
                                                              domain, enabled_vfs: tuple[str, list[str]]) -> None:  # fmt: skip
    pf, (vf0, _vf1) = enabled_vfs
    b = domain("kl-udev-b")
    result = cli("--connect", URI, "passthrough", "--gpu", vf0, "--vm", b)
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"
    driver = sysfs.link_name(f"{PCI}/{pf}/driver")
    assert driver == "nvme"
    # What a reload of a driver that disables SR-IOV on removal (as NVIDIA's does) leaves: no VFs, no binds.
    sysfs.write("/sys/bus/pci/drivers/vfio-pci/unbind", vf0)
    sysfs.write(f"{PCI}/{vf0}/driver_override", "\n")
    sysfs.write(f"{PCI}/{pf}/sriov_numvfs", "0")
    sysfs.write(f"{PCI}/{pf}/sriov_drivers_autoprobe", "1")
    sysfs.write(f"/sys/bus/pci/drivers/{driver}/unbind", pf)
    _settled(syslog, lambda: True, "quiet before the rebind")
    syslog.clear()

    sysfs.write(f"/sys/bus/pci/drivers/{driver}/bind", pf)  # the bind uevent; nobody calls vgpuadm from here on
    Path(f"{PCI}/{pf}/uevent").write_text("bind\n")  # the same event again, while the first one's run is pending

    def back() -> bool:
        return sysfs.read(f"{PCI}/{pf}/sriov_numvfs") == "2" and sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"

    _settled(syslog, back, "the VFs and the vfio-pci bind back")
    got = syslog.ours()
    assert got.count(f"udev: GPU {pf} appeared again: re-converging it in 2 s (detached)") == 1, got
    assert got.count(f"udev: GPU {pf}: a run is already pending; this event is dropped") == 1, got
    assert len([m for m in got if m.startswith(f"udev: GPU {pf}: restoring")]) == 1, got
    assert cli("--connect", URI, "destroy", "--vm", b, "--all").code == 0
