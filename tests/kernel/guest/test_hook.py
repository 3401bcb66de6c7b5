"""#15's on-demand hook in the guest's real libvirtd: with vgpuadm's qemu hook installed (hooks/qemu.d/vgpuadm,
libvirtd reloaded to see it), a domain with an on-demand mtty-2 request starts (`virsh start --paused`), its mdev
exists while it runs, of the UUID its <hostdev> names, and is gone after `virsh destroy`; a second domain whose
request does not fit fails to start with vgpuadm's message in libvirt's error; nothing leaks.

libvirtd is reloaded (SIGHUP), not restarted: what `hook install` tells the operator to do (`systemctl reload
libvirtd`), so this also proves that a reload is enough. The reload is asynchronous; a `daemon` hook written beside
it tells when libvirtd has looked at the hooks again (it runs `daemon - reload begin SIGHUP` right after rescanning
them).

guest-entry.sh puts a tmpfs on /etc/libvirt/hooks, so nothing is written to the host's. The hook runs this
checkout's vgpuadm (PYTHONPATH), not whatever the venv's editable install points to."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from guest_virsh import URI, domstate, dumpxml, virsh
from lxml import etree
from tenacity import Retrying, stop_after_delay, wait_fixed

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.ops import hook

REPO = Path(__file__).resolve().parents[3]
PID = Path("/run/libvirtd.pid")
DAEMON_HOOK = Path("/etc/libvirt/hooks/daemon")  # on guest-entry.sh's tmpfs
RELOADED = Path("/run/vgpuadm-lane-reloaded")


def _reload_libvirtd() -> None:
    """SIGHUP, then wait until libvirtd has looked at its hooks again."""
    DAEMON_HOOK.write_text(f'#!/bin/sh\necho "$2 $3" >> {RELOADED}\n')
    DAEMON_HOOK.chmod(0o755)
    RELOADED.unlink(missing_ok=True)
    os.kill(int(PID.read_text()), signal.SIGHUP)
    for attempt in Retrying(stop=stop_after_delay(120), wait=wait_fixed(0.2), reraise=True):
        with attempt:
            assert "reload begin" in RELOADED.read_text()


@pytest.fixture
def installed_hook(libvirtd: None) -> Iterator[str]:
    command = ["/usr/bin/env", f"PYTHONPATH={REPO}", sys.executable, "-m", "vgpuadm"]
    result = hook.install(None, command=command)
    assert result.installed and result.current, result.to_json()
    _reload_libvirtd()
    yield result.path
    hook.uninstall(None)
    DAEMON_HOOK.unlink()


def _uuids(name: str) -> list[str]:
    doc = etree.fromstring(dumpxml(name, inactive=True).encode())
    return [a.get("uuid") for a in doc.findall("devices/hostdev/source/address")]


def test_on_demand_mdevs_live_while_the_domain_runs(cli, sysfs: Sysfs, domain, installed_hook: str, mark) -> None:
    mark("hook installed, libvirtd reloaded")
    assert installed_hook == "/etc/libvirt/hooks/qemu.d/vgpuadm"
    a, b = domain("kl-hook-a"), domain("kl-hook-b")
    result = cli("--connect", URI, "create", "--type", "mtty-2", "--vm", a, "--on-demand", "--json")
    assert result.code == 0, result.err
    result = cli("--connect", URI, "create", "--type", "mtty-2", "--vm", b, "--total", "12", "--on-demand")
    assert result.code == 0, result.err  # fits while the host is empty
    (uuid,) = _uuids(a)
    assert len(_uuids(b)) == 12
    assert sysfs.listdir("/sys/bus/mdev/devices") == []  # nothing exists while both are off

    mark("requests recorded; starting a")
    virsh("start", "--paused", a)
    mark("a started")
    assert sysfs.listdir("/sys/bus/mdev/devices") == [uuid]
    assert sysfs.link_name(f"/sys/bus/mdev/devices/{uuid}/mdev_type") == "mtty-2"

    refused = virsh("start", "--paused", b, check=False)
    mark(f"b refused: {refused.stderr.strip()[:200]}")
    assert refused.returncode != 0
    assert "No room for 12 × mtty-2" in refused.stderr, refused.stderr
    assert domstate(b) == "shut off"
    assert sysfs.listdir("/sys/bus/mdev/devices") == [uuid]  # b's start made nothing, a's device is untouched

    virsh("destroy", a)
    mark("a destroyed")
    for attempt in Retrying(stop=stop_after_delay(60), wait=wait_fixed(0.5), reraise=True):
        with attempt:
            assert sysfs.listdir("/sys/bus/mdev/devices") == []
    assert not os.path.exists("/var/lib/vgpuadm/journal.json")
    result = cli("--connect", URI, "reconcile", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == {"dry_run": False, "recovered": [], "leaks": [], "fixed": [], "lost": []}
    assert sysfs.read("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/available_instances") == "12"
