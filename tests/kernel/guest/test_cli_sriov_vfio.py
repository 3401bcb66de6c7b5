"""`vgpuadm sriov enable|disable` on QEMU's SR-IOV NVMe PF and `vgpuadm vfio bind|unbind` of one of its VFs, each
VF alone in its IOMMU group behind the guest's emulated Intel IOMMU."""

from __future__ import annotations

from vgpuadm import api
from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"


def test_sriov_enable_and_disable(cli, sysfs: Sysfs, enabled_vfs: tuple[str, list[str]]) -> None:
    pf, vfs = enabled_vfs
    assert vfs == ["0000:01:00.1", "0000:01:00.2"]
    snap = api.discover(None)
    assert snap.functions[pf].sriov_num_vfs == 2
    assert snap.functions[pf].virtfns == tuple(vfs)
    groups = set()
    for vf in vfs:
        fn = snap.functions[vf]
        assert (fn.physfn, fn.driver, fn.vendor_id, fn.class_code) == (pf, None, "0x1b36", "0x010802")
        assert snap.iommu_groups[fn.iommu_group] == (vf,)
        groups.add(fn.iommu_group)
    assert len(groups) == 2

    result = cli("sriov", "disable", pf)
    assert result.code == 0, result.err
    assert sysfs.read(f"{PCI}/{pf}/sriov_numvfs") == "0"
    assert not any(e.startswith("virtfn") for e in sysfs.listdir(f"{PCI}/{pf}"))
    assert not sysfs.exists(f"{PCI}/{vfs[0]}")


def test_vfio_bind_and_restore_a_vf(cli, sysfs: Sysfs, enabled_vfs: tuple[str, list[str]]) -> None:
    pf, (vf0, vf1) = enabled_vfs
    group = sysfs.link_name(f"{PCI}/{vf0}/iommu_group")
    assert group is not None
    assert not sysfs.exists(f"/dev/vfio/{group}")

    result = cli("vfio", "bind", vf0, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"
    assert sysfs.read(f"{PCI}/{vf0}/driver_override") == "vfio-pci"
    assert sysfs.exists(f"/dev/vfio/{group}")
    assert sysfs.link_name(f"{PCI}/{vf1}/driver") is None  # its neighbour, in another group, is untouched

    result = cli("sriov", "disable", pf)  # a VF on vfio-pci keeps its PF's VFs on
    assert result.code == 5
    assert result.err.splitlines()[0] == f"error: VFs of {pf} are in use ({vf0})"

    result = cli("vfio", "unbind", vf0, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") is None  # it had no driver before
    assert sysfs.read(f"{PCI}/{vf0}/driver_override") == "(null)"
    assert not sysfs.exists(f"/dev/vfio/{group}")
    assert cli("sriov", "disable", pf).code == 0
