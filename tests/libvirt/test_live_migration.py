"""A real live migration between two real libvirt daemons on this machine (issue #33): the machine's libvirtd and a
second one in its own mount namespace with its own host UUID (conftest's `target_libvirtd`). The guest is a running
diskless TCG QEMU with no assigned device (the vendor driver's VFIO migration needs a GPU); what is proven here is
vgpuadm's side of it: VirtConn.migrate_live's flags (live, persistent on the target, undefined on the source) and the
destination XML — the guest runs on the target with the definition vgpuadm rewrote for it — and that a migration libvirt refuses leaves the guest running and defined on the source, and nothing on the target."""

from __future__ import annotations

from collections.abc import Callable

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
