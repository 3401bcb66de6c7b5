"""A real live migration between two real libvirt daemons on this machine (issue #33): the machine's libvirtd and a
second one in its own mount namespace with its own host UUID (conftest's `target_libvirtd`). The guest is a running
diskless TCG QEMU with no assigned device (the vendor driver's VFIO migration needs a GPU); what is proven here is
vgpuadm's side of it: VirtConn.migrate_live's flags (live, persistent on the target, undefined on the source) and the
destination XML — the guest runs on the target with the definition vgpuadm rewrote for it — and that a migration libvirt refuses leaves the guest running and defined on the source, and nothing on the target."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import libvirt
import pytest

from vgpuadm.errors import LibvirtError
from vgpuadm.model import Allocation, DeviceMode
from vgpuadm.virt import xml
from vgpuadm.virt.conn import VirtConn

pytestmark = pytest.mark.libvirt

UUID = "3b1a5f3c-0e6e-4f3a-9a39-6f6c4a1f7e01"


def _metadata(domain: str, host: str) -> str:
    """vgpuadm's record of one nvidia-63 the domain holds on `host` (none is attached: nothing here has a GPU)."""
    mdev = Allocation(domain, DeviceMode.MDEV, "nvidia-63", "0000:02:00.0", UUID, slot=0)
    return xml.metadata_xml([mdev], host=host)


def _running(daemon: VirtConn, name: str) -> bool:
    return name in daemon.list_domains() and daemon.is_active(name)


@pytest.fixture
def guest(libvirtd: str, daemon_domain: Callable[[str], str]) -> tuple[VirtConn, str]:
    """A guest running on the first daemon, its definition carrying vgpuadm metadata that names host-a."""
    source = VirtConn(libvirtd)
    name = daemon_domain("live")
    source.define(xml.redefine(source.xml(name), element=_metadata(name, "host-a")))
    source.domain(name).create()
    return source, name


def test_a_running_guest_moves_live_with_the_definition_rewritten_for_the_target(
    guest: tuple[VirtConn, str], target_libvirtd: str
) -> None:
    source, name = guest
    target = VirtConn(target_libvirtd)
    uuid = source.uuid(name)
    rewrite = _metadata(name, "host-b")
    source.migrate_live(
        name,
        target,
        live_xml=xml.redefine(source.xml(name, inactive=False, migratable=True), element=rewrite),
        persistent_xml=xml.redefine(source.xml(name), element=rewrite),
        data_uri="tcp://127.0.0.1",
    )
    assert _running(target, name)
    assert target.uuid(name) == uuid
    assert name not in source.list_domains()  # undefined on the source once the target ran it
    for inactive in (True, False):  # the target's persistent and live definitions both carry the rewrite
        assert xml.metadata_host(target.xml(name, inactive=inactive)) == "host-b"
    assert [a.uuid for a in xml.parse_allocations(target.xml(name), domain=name)] == [UUID]
    stats = target.domain(name).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    assert stats.get("operation") == libvirt.VIR_DOMAIN_JOB_OPERATION_MIGRATION_IN
    target.undefine(name)


def test_a_migration_the_target_refuses_leaves_the_guest_running_on_the_source(
    guest: tuple[VirtConn, str], target_libvirtd: str
) -> None:
    source, name = guest
    target = VirtConn(target_libvirtd)
    # The target is told to give the guest an mdev it does not have: its QEMU cannot start.
    missing = xml.mdev_hostdev(UUID)
    with pytest.raises(LibvirtError) as err:
        source.migrate_live(
            name,
            target,
            live_xml=xml.redefine(source.xml(name, inactive=False, migratable=True), add=missing),
            persistent_xml=xml.redefine(source.xml(name), add=missing),
            data_uri="tcp://127.0.0.1",
        )
    assert str(err.value).startswith(f"moving '{name}' to {target_libvirtd}: ")
    assert _running(source, name)
    assert xml.metadata_host(source.xml(name)) == "host-a"
    assert name not in target.list_domains()


# -- `vgpuadm migrate run` itself, on two simulated hosts whose libvirt are the two real daemons ------------------

_RUN = """
import json, sys
from vgpuadm.cli.app import main
from vgpuadm.virt.conn import VirtConn

record = sys.argv[1]
real = VirtConn.migrate_live

def migrate_live(self, name, target, *, live_xml, persistent_xml, data_uri=None):
    with open(record, "w") as f:  # a spy: what vgpuadm gives libvirt, which then runs as given
        json.dump({"live": live_xml, "persistent": persistent_xml, "target": target.uri, "data": data_uri}, f)
    real(self, name, target, live_xml=live_xml, persistent_xml=persistent_xml, data_uri=data_uri)

VirtConn.migrate_live = migrate_live
sys.argv = ["vgpuadm", *sys.argv[2:]]
main()
"""


def _sim_guest(tmp_path: Path, libvirtd: str, name: str) -> tuple[Path, Path, str]:
    """Two simulated P4 hosts, `src` on the first daemon and `dst` on the second; on `src` the guest `name` records
    one nvidia-63 vGPU made by `vgpuadm create` (its mdev in the simulated sysfs, its hostdev in the definition)
    and runs without the hostdev (this kernel has no mdev for QEMU to open). Returns the roots and the mdev's UUID."""
    from tests.libvirt.embedded_host import vgpuadm
    from vgpuadm.sim.profiles import build

    src, dst = tmp_path / "src", tmp_path / "dst"
    build("p4", str(src))
    build("p4", str(dst))
    r = vgpuadm(src, "--connect", libvirtd, "create", "--type", "nvidia-63", "--vm", name)
    assert r.code == 0, r.err
    source = VirtConn(libvirtd)
    text = source.xml(name, secure=True)
    (mdev,) = xml.parse_allocations(text, domain=name)
    source.define(xml.redefine(text, remove=xml.mdev_hostdev(mdev.uuid)))
    source.domain(name).create()
    source.define(text)  # its definition as vgpuadm made it; the running guest lacks only the hostdev
    return src, dst, mdev.uuid


def _run_live(src: Path, dst: Path, libvirtd: str, target: str, name: str, data: str,
              env: dict[str, str] | None = None):  # fmt: skip
    import json
    import subprocess
    import sys

    from tests.libvirt.embedded_host import REPO, _env

    record = src.parent / "migrate-live.json"
    argv = [sys.executable, "-c", _RUN, str(record), "--root", str(src), "--connect", libvirtd, "migrate", "run",
            "--vm", name, "--target-root", str(dst), "--target-connect", target, "--migrate-uri", data]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(env), timeout=600, check=False, cwd=REPO)
    return proc, (json.loads(record.read_text()) if record.exists() else None)


def test_migrate_run_moves_a_running_guest_between_two_real_daemons(
    tmp_path: Path, libvirtd: str, target_libvirtd: str, daemon_domain: Callable[[str], str]
) -> None:
    """The whole `vgpuadm migrate run` with the real migration and nothing faked: each host's vgpuadm on its own
    daemon, the target's planner making the mdev and defining the domain (inactive, incoming) before libvirt moves
    the running guest onto it (the guest runs without its hostdev, so the live XML has none to rewrite; the
    persistent XML names the target's mdev). What vgpuadm gave libvirt is recorded on the way (a spy)."""
    from tests.libvirt.embedded_host import mdevs

    name = daemon_domain("mvlive")
    src, dst, uuid = _sim_guest(tmp_path, libvirtd, name)
    source, target = VirtConn(libvirtd), VirtConn(target_libvirtd)
    domain_uuid = source.uuid(name)
    r, sent = _run_live(src, dst, libvirtd, target_libvirtd, name, "tcp://127.0.0.1")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    there = f"the simulated host {dst}"
    assert r.stdout.splitlines() == [
        f"moved domain {name} to {there}:",
        f"  this host: step 1/1 record domain {name}'s devices as outgoing",
        f"  {there}: step 1/3 define domain {name} (incoming)",
        f"  {there}: step 2/3 create mdev {uuid} of type nvidia-63 on 0000:01:00.0",
        f"  {there}: step 3/3 attach mdev {uuid} (nvidia-63) to domain {name}, and record 1 vgpuadm device(s) in its "
        "metadata",
        f"  this host: move running domain {name} live to {there} (libvirt: live, post-copy off, persistent there, "
        "undefined here)",
        f"  this host: step 1/1 remove mdev {uuid} from 0000:01:00.0",
        f"  {there}: step 1/1 record domain {name}'s devices as settled (the move is over)",
    ]
    assert sent is not None and (sent["target"], sent["data"]) == (target_libvirtd, "tcp://127.0.0.1")
    host = xml.metadata_host(sent["persistent"])
    assert host == f"sim:{dst}" and all(xml.metadata_host(sent[k]) == host for k in ("live", "persistent"))
    assert [a.moving for k in ("live", "persistent") for a in xml.parse_allocations(sent[k])] == ["incoming"] * 2
    # the guest runs on the target, undefined here; the target keeps the persistent XML vgpuadm wrote (its mdev),
    # and its metadata — live and persistent — records the device as its own, the move over
    assert _running(target, name) and target.uuid(name) == domain_uuid
    assert name not in source.list_domains()
    assert [r.key for r in xml.parse_hostdevs(target.xml(name))] == [uuid]
    for inactive in (True, False):
        text = target.xml(name, inactive=inactive)
        assert xml.metadata_host(text) == host
        assert [(a.uuid, a.moving) for a in xml.parse_allocations(text, domain=name)] == [(uuid, None)]
    stats = target.domain(name).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    assert stats.get("operation") == libvirt.VIR_DOMAIN_JOB_OPERATION_MIGRATION_IN
    assert (mdevs(src), mdevs(dst)) == ([], [uuid])
    target.undefine(name)


def test_migrate_run_the_target_daemon_refuses_leaves_the_guest_running_on_the_source(
    tmp_path: Path, libvirtd: str, target_libvirtd: str, daemon_domain: Callable[[str], str]
) -> None:
    """No fake at all: the target's libvirt is told to take the guest's memory on an address it does not have
    (192.0.2.1, TEST-NET-1): the migration fails for real, the target's vgpuadm removes the domain and mdev it
    made, the source drops its mark, and the guest runs on as before."""
    from tests.libvirt.embedded_host import mdevs

    name = daemon_domain("mvfail")
    src, dst, uuid = _sim_guest(tmp_path, libvirtd, name)
    source, target = VirtConn(libvirtd), VirtConn(target_libvirtd)
    before = source.xml(name)
    r, sent = _run_live(src, dst, libvirtd, target_libvirtd, name, "tcp://192.0.2.1")
    assert sent is not None
    assert (r.returncode, r.stdout) == (8, ""), r.stderr
    error, hint = r.stderr.splitlines()
    assert error.startswith(f"error: moving '{name}' to {target_libvirtd}: ")
    assert (
        hint
        == f"hint: {name} runs here as before and the target's part is undone: fix what libvirt says, run this again"
    )
    assert _running(source, name)
    assert name not in target.list_domains()
    assert (mdevs(src), mdevs(dst)) == ([uuid], [])
    after = source.xml(name)
    assert [a.moving for a in xml.parse_allocations(after, domain=name)] == [None]
    strip = re.compile(r' changed="[^"]*"')
    assert strip.sub("", after) == strip.sub("", before)


def test_a_source_killed_after_the_guest_left_is_ended_on_the_target_not_undone(
    tmp_path: Path, libvirtd: str, target_libvirtd: str, daemon_domain: Callable[[str], str]
) -> None:
    """`migrate prepare`, then `migrate run` killed right after its first step freeing this host's mdev (the
    executor's crash hook): the guest runs on the target, which still records it incoming. There `migrate abort`
    refuses (undoing the target's part would stop the VM), `reconcile` says so, `migrate finish` ends the move; here `recover` rolls
    the half-done freeing back, leaving the mdev owned by no domain, which `reconcile` reports."""
    from tests.libvirt.embedded_host import mdevs, vgpuadm
    from vgpuadm.executor import CRASH_HOOK

    name = daemon_domain("mvkill")
    src, dst, uuid = _sim_guest(tmp_path, libvirtd, name)
    target = VirtConn(target_libvirtd)
    on_src, on_dst = ("--connect", libvirtd), ("--connect", target_libvirtd)
    r = vgpuadm(src, *on_src, "migrate", "prepare", "--vm", name, "--target-root", str(dst), "--target-connect",
                target_libvirtd)  # fmt: skip
    assert r.code == 0, r.err
    r, _sent = _run_live(src, dst, libvirtd, target_libvirtd, name, "tcp://127.0.0.1", env={CRASH_HOOK: "1"})
    assert r.returncode != 0
    assert _running(target, name)
    assert [a.moving for a in xml.parse_allocations(target.xml(name), domain=name)] == ["incoming"]
    r = vgpuadm(dst, *on_dst, "migrate", "abort", "--vm", name)
    assert (r.code, r.out) == (5, "")
    assert r.err.splitlines() == [
        f"error: domain {name} runs here: it moved here live, this host's domain is the VM now",
        f"hint: end the move here: `vgpuadm migrate finish --vm {name}`",
    ]
    assert _running(target, name) and mdevs(dst) == [uuid]
    r = vgpuadm(dst, *on_dst, "reconcile")  # says how to end it here, not the half-way move's go-on-or-back
    assert (r.code, r.err.splitlines()) == (0, [
        f"warning: domain {name} is incoming and runs here: its live move stopped after the guest came (`vgpuadm "
        f"migrate finish --vm {name}` here ends it)"
    ]), r.err  # fmt: skip
    r = vgpuadm(dst, *on_dst, "migrate", "finish", "--vm", name)
    assert (r.code, r.err) == (0, ""), r.err
    for inactive in (True, False):
        assert [a.moving for a in xml.parse_allocations(target.xml(name, inactive=inactive), domain=name)] == [None]
    assert vgpuadm(src, *on_src, "recover").code == 0
    assert mdevs(src) == [uuid]
    r = vgpuadm(src, *on_src, "reconcile")
    assert r.code == 0, r.err
    assert uuid in r.out
    target.undefine(name)
