"""`restore` on a libvirtd shared by two simulated roots touches only its own host's domains: their vgpuadm
metadata names the host, so root 1 restores its VM's 2 mdevs and not the 3 that root 2's VM records. Real
libvirtd (qemu:///system, the `libvirtd` fixture), throwaway domains with unique names."""

from __future__ import annotations

import uuid as uuid_mod
from collections.abc import Callable, Iterator
from pathlib import Path

import libvirt
import pytest
from embedded_host import mdevs, vgpuadm

from vgpuadm.virt import xml

pytestmark = pytest.mark.libvirt


@pytest.fixture
def domains(libvirtd: str) -> Iterator[Callable[[str], str]]:
    conn = libvirt.open(libvirtd)
    made: list[str] = []

    def define(suffix: str) -> str:
        name = f"vgpuadm-test-{uuid_mod.uuid4().hex[:10]}-{suffix}"
        conn.defineXML(xml.domain_definition(name, memory_mib=64))
        made.append(name)
        return name

    yield define
    for name in made:
        try:
            conn.lookupByName(name).undefine()
        except libvirt.libvirtError:
            continue
    conn.close()


def test_restore_on_a_shared_libvirtd_only_touches_this_hosts_domains(
    sim_host: Callable[[str], Path], tmp_path: Path, libvirtd: str, domains: Callable[[str], str]
) -> None:
    one = sim_host("p4")
    two = tmp_path / "second-p4"
    assert vgpuadm(one, "sim", "build", "p4", str(two)).code == 0
    a, b = domains("shared-a"), domains("shared-b")
    for root, vm, count in ((one, a, 2), (two, b, 3)):
        res = vgpuadm(root, "--connect", libvirtd, "create", "--type", "nvidia-63", "--count", str(count), "--vm", vm)
        assert res.code == 0, res.err
    assert (len(mdevs(one)), len(mdevs(two))) == (2, 3)
    for root in (one, two):
        assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert mdevs(one) == mdevs(two) == []
    res = vgpuadm(one, "--connect", libvirtd, "restore")
    assert res.code == 0, res.err
    assert len(mdevs(one)) == 2
    assert mdevs(two) == []
