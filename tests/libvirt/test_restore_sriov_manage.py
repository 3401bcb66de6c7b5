"""`restore` after `sim reboot` on a freshly built layout C host re-enables the VFs through the sriov-manage that
`vgpuadm sim build` installs (no hand-planted stand-in), then types them again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import attr, define, hostdev_keys, vgpuadm

pytestmark = pytest.mark.libvirt

PF = "0000:18:00.0"


def test_restore_reenables_vfs_with_the_installed_sriov_manage(sim_host: Callable[[str], Path],
                                                               tmp_path: Path) -> None:  # fmt: skip
    root = sim_host("h200-vendor-vfio")
    define(root, "sriovm01")
    res = vgpuadm(root, "create", "--type", "H200X-4C", "--count", "2", "--vm", "sriovm01")
    assert res.code == 0, res.err
    vfs = hostdev_keys(root, "sriovm01")
    assert len(vfs) == 2
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert attr(root, f"/sys/bus/pci/devices/{PF}/sriov_numvfs") == "0\n"
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == f"sriov: run /usr/lib/nvidia/sriov-manage -e {PF}"
    assert attr(root, f"/sys/bus/pci/devices/{PF}/sriov_numvfs") == "16\n"
    for vf in vfs:
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1420\n"
