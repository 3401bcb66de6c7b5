"""The qemu hook run by a real libvirtd: `vgpuadm hook install` writes it into a simulated root's etc/libvirt/hooks,
and a libvirtd of its own reads exactly that directory as /etc/libvirt/hooks — it runs in a private mount namespace
(`unshare -m`) where the hooks directory is that root's and /run/libvirt, /var/lib/libvirt, /var/cache/libvirt,
/var/log/libvirt and /etc/libvirt/qemu are fresh tmpfs, so the shared system libvirtd and its domains are never
touched; the test reaches it through /proc/PID/root/run/libvirt/libvirt-sock.

What cannot be real here: the devices live in the simulated root, not in this machine's /sys, so libvirt refuses the
start after the prepare hook for its own reason (no VFIO on this machine, or no such mdev in /sys) and then runs the
release hook. A second hook in qemu.d (zz-log, run after vgpuadm's) records what the simulated root holds at each
call, which shows the mdev existing while libvirt starts the domain and gone after. The real-kernel lane is where a
domain really runs with an on-demand device."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import libvirt
import pytest

from vgpuadm import api
from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.sim.treestate import diff, tree_state
from vgpuadm.virt import xml

pytestmark = [
    pytest.mark.libvirt,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("libvirtd"),
        reason="needs root, unshare and libvirtd",
    ),
]
REPO = Path(__file__).resolve().parent.parent.parent
START = """#!/bin/sh
set -e
cd /
for d in /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /etc/libvirt/qemu; do
    mount -t tmpfs -o mode=0755 none "$d"
done
mount --bind "$1" /etc/libvirt/hooks
virtlogd -d -p /run/libvirt/virtlogd.pid
exec libvirtd -p /run/libvirt/libvirtd.pid
"""
LOG_HOOK = """#!/bin/sh
cat >/dev/null
printf '%s %s %s: %s\\n' "$1" "$2" "$3" "$(ls {root}/sys/bus/mdev/devices | tr '\\n' ' ')" >> {log}
"""


def _answers(uri: str) -> bool:
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        libvirt.open(uri).close()
    except libvirt.libvirtError:
        return False
    return True


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def private_libvirtd(tmp_path: Path) -> Iterator[Callable[[Path], tuple[str, libvirt.virConnect]]]:
    """Start a libvirtd whose /etc/libvirt/hooks is `<root>/etc/libvirt/hooks`; returns its URI and a connection."""
    started: list[subprocess.Popen[bytes]] = []
    conns: list[libvirt.virConnect] = []

    def start(root: Path) -> tuple[str, libvirt.virConnect]:
        script = tmp_path / "start-libvirtd.sh"
        script.write_text(START)
        log = (tmp_path / "libvirtd.log").open("wb")
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", str(script),
                                 str(root / "etc/libvirt/hooks")], cwd="/", stdout=log, stderr=log)  # fmt: skip
        started.append(proc)
        uri = f"qemu+unix:///system?socket=/proc/{proc.pid}/root/run/libvirt/libvirt-sock"
        for _ in range(600):  # polls for the socket (each try costs a connect), not a guessed duration
            if proc.poll() is not None:
                pytest.fail(f"the private libvirtd exited: {(tmp_path / 'libvirtd.log').read_text()[-2000:]}")
            # Only once the script has exec'd libvirtd are the tmpfs mounts in place: before, the path under
            # /proc/PID/root would reach the system libvirtd's socket.
            if _comm(proc.pid) == "libvirtd" and _answers(uri):
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        else:
            pytest.fail("the private libvirtd did not answer")
        conn = libvirt.open(uri)
        conns.append(conn)
        assert conn.listAllDomains() == [], "not the private libvirtd: it would have no domains"
        return uri, conn

    yield start
    for c in conns:
        with contextlib.suppress(libvirt.libvirtError):
            c.close()
    for proc in started:
        pidfile = Path(f"/proc/{proc.pid}/root/run/libvirt/virtlogd.pid")
        logd = int(pidfile.read_text()) if pidfile.exists() else None
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        if logd is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(logd, signal.SIGTERM)


def _start(conn: libvirt.virConnect, name: str) -> str:
    """`virsh start --paused`; returns libvirt's error message."""
    with pytest.raises(libvirt.libvirtError) as exc:
        conn.lookupByName(name).createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)
    return str(exc.value)


def test_libvirt_runs_the_installed_hook_on_start_and_stop(tmp_path, sim_host, cli, private_libvirtd) -> None:
    root = sim_host("p4")
    installed = api.hook_install(str(root), command=["/usr/bin/env", f"PYTHONPATH={REPO}", sys.executable, "-m",
                                                     "vgpuadm"])  # fmt: skip
    assert installed.path == "/etc/libvirt/hooks/qemu.d/vgpuadm" and installed.current
    log = tmp_path / "hook.log"
    zz = root / "etc/libvirt/hooks/qemu.d/zz-log"
    zz.write_text(LOG_HOOK.format(root=root, log=log))
    zz.chmod(0o755)
    uri, conn = private_libvirtd(root)
    machine = HostRoot(str(root)).machine_id()
    uuids = {}
    od1, od2 = names = (f"vgpuadm-test-{os.getpid()}-od1", f"vgpuadm-test-{os.getpid()}-od2")
    for name in names:
        conn.defineXML(xml.domain_definition(name, memory_mib=64, vnc=False))
        r = cli("--root", str(root), "--connect", uri, "create", "--type", "P4-8Q", "--vm", name, "--on-demand")
        assert r.code == 0, r.err
        uuids[name] = device_uuid(machine, conn.lookupByName(name).UUIDString(), 0)
        assert r.out.splitlines()[0] == f"attached mdev nvidia-66 {uuids[name]} (to {name}, made when it starts)"
        defined = conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert [(h.kind, h.key) for h in xml.parse_hostdevs(defined)] == [("mdev", uuids[name])]
        [a] = xml.parse_allocations(defined)
        assert (a.on_demand, a.type_id, a.parent, a.uuid) == (True, "nvidia-66", None, uuids[name])
    clean = tree_state(root)
    assert not os.listdir(root / "sys/bus/mdev/devices")

    # od1 fits: the hook makes its mdev before libvirt goes on; libvirt's own refusal follows, then the release hook
    message = _start(conn, od1)
    assert "vgpuadm" not in message
    u1 = uuids[od1]
    assert log.read_text().splitlines() == [
        f"{od1} prepare begin: {u1} ",
        f"{od1} stopped end: {u1} ",
        f"{od1} release end: ",
    ]
    assert diff(clean, tree_state(root)) == {}

    # both P4s busy (two whole-GPU mdevs no domain of this libvirtd owns): od2 does not fit and libvirt says why
    assert cli("--root", str(root), "mdev", "create", "--type", "P4-8Q", "--count", "2").code == 0
    busy = tree_state(root)
    log.write_text("")
    message = _start(conn, od2)
    assert "Hook script execution failed" in message
    assert f"vgpuadm: domain {od2}: No room for 1 × nvidia-66" in message
    assert uuids[od2] not in os.listdir(root / "sys/bus/mdev/devices")
    assert diff(busy, tree_state(root)) == {}
    assert not conn.lookupByName(od2).isActive()
    # libvirt still runs the other hooks and the stop hooks; vgpuadm's release finds nothing of od2's to free
    assert [line.split(":")[0] for line in log.read_text().splitlines()] == [
        f"{od2} prepare begin", f"{od2} stopped end", f"{od2} release end"]  # fmt: skip
