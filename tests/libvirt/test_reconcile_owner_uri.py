"""`reconcile --fix --connect qemu:///system` on a simulated root: refused while the root's embedded libvirt holds
domains (their devices would look leaked and be removed — #31 item 4), accepted when it holds none (the root's
domains live on a shared daemon, as in the kernel lane's differential). Real CLI processes, the root's embedded
libvirt, the simulated kernel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import define, mdevs, vgpuadm

pytestmark = pytest.mark.libvirt


def test_the_system_daemon_cannot_fix_a_root_whose_embedded_libvirt_holds_domains(
    sim_host: Callable[[str], Path],
) -> None:
    root = sim_host("p4")
    define(root, "ownuri01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--total", "2", "--vm", "ownuri01").code == 0
    made = mdevs(root)
    res = vgpuadm(root, "--connect", "qemu:///system", "reconcile", "--fix")
    assert (res.code, res.out) == (6, "")
    assert res.err.splitlines() == [
        "error: --connect qemu:///system does not hold this simulated host's domains (its embedded libvirt does), "
        "so it cannot say which devices are leaks",
        "hint: run `vgpuadm reconcile --fix` without --connect",
    ]
    assert mdevs(root) == made


def test_the_system_daemon_may_fix_a_root_whose_embedded_libvirt_holds_none(
    sim_host: Callable[[str], Path], libvirtd: str
) -> None:
    root = sim_host("p4")
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63").code == 0
    res = vgpuadm(root, "--connect", libvirtd, "reconcile", "--fix")
    assert res.code == 0, res.err
    assert mdevs(root) == []
