"""`restore` on a libvirtd shared by two simulated roots touches only its own host's domains: their vgpuadm
metadata names the host, so root 1 restores its VM's 2 mdevs and not the 3 that root 2's VM records. Real
libvirtd (qemu:///system, the `libvirtd` fixture), throwaway domains with unique names (conftest's `daemon_domain`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import mdevs, vgpuadm

pytestmark = pytest.mark.libvirt


def test_restore_on_a_shared_libvirtd_only_touches_this_hosts_domains(
    sim_host: Callable[[str], Path], tmp_path: Path, libvirtd: str, daemon_domain: Callable[[str], str]
) -> None:
    one = sim_host("p4")
    two = tmp_path / "second-p4"
    assert vgpuadm(one, "sim", "build", "p4", str(two)).code == 0
    a, b = daemon_domain("shared-a"), daemon_domain("shared-b")
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
