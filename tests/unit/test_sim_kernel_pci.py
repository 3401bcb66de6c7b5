"""PCI binding and SR-IOV on the simulated kernel (reference §5.1, §5.2, §5.4, §3.1): driver_override, bind,
unbind, drivers_probe, /dev/vfio group nodes, sriov_numvfs and sriov_drivers_autoprobe, each errno."""

from __future__ import annotations

import errno
import os

import pytest

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import HostBuilder, add_h200
from vgpuadm.sim.treestate import diff, tree_state

GPU = "/sys/bus/pci/devices/0000:65:00.0"
AUDIO = "/sys/bus/pci/devices/0000:65:00.1"
DRIVERS = "/sys/bus/pci/drivers"


def read(root, path: str) -> str:
    with open(f"{root}{path}") as f:
        return f.read()


def driver(root, path: str) -> str | None:
    link = f"{root}{path}/driver"
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def write_errno(root, path: str, data: str) -> int:
    with pytest.raises(OSError) as info:
        SimKernel(str(root)).write(path, data)
    return info.value.errno


def to_vfio(k: SimKernel, dev: str, bdf: str) -> None:
    """libvirt's virPCIDeviceBindWithDriverOverride (reference §5.2)."""
    k.write(f"{dev}/driver_override", "vfio-pci\n")
    k.write(f"{dev}/driver/unbind", bdf + "\n")
    k.write("/sys/bus/pci/drivers_probe", bdf + "\n")


def test_driver_override_reads_null_and_clears_on_newline(sim_host):
    root = sim_host("passthrough")
    k = SimKernel(str(root))
    assert read(root, f"{GPU}/driver_override") == "(null)\n"
    k.write(f"{GPU}/driver_override", "vfio-pci\nrest")
    assert read(root, f"{GPU}/driver_override") == "vfio-pci\n"
    assert driver(root, GPU) == "nvidia"  # an override does not unbind
    k.write(f"{GPU}/driver_override", "\n")
    assert read(root, f"{GPU}/driver_override") == "(null)\n"


def test_bind_and_unbind_errno(sim_host):
    root = sim_host("passthrough")
    k = SimKernel(str(root))
    assert write_errno(root, f"{DRIVERS}/vfio-pci/bind", "0000:65:00.0") == errno.ENODEV  # no override: no match
    assert write_errno(root, f"{DRIVERS}/vfio-pci/unbind", "0000:65:00.0") == errno.ENODEV  # not bound to it
    assert write_errno(root, f"{DRIVERS}/nvidia/bind", "0000:65:00.0") == errno.EBUSY  # matches, already bound
    assert write_errno(root, f"{DRIVERS}/nvidia/bind", "0000:99:00.0") == errno.ENODEV  # no such device
    k.write(f"{GPU}/driver_override", "pci-stub")
    k.write(f"{DRIVERS}/nvidia/unbind", "0000:65:00.0\n")
    assert write_errno(root, f"{DRIVERS}/nvidia/bind", "0000:65:00.0") == errno.ENODEV  # override names another
    assert write_errno(root, f"{DRIVERS}/vfio-pci/bind", "0000:65:00.0") == errno.ENODEV
    k.write(f"{DRIVERS}/pci-stub/bind", "0000:65:00.0")
    assert (
        os.readlink(f"{root}{DRIVERS}/pci-stub/0000:65:00.0")
        == "../../../../devices/pci0000:64/0000:64:00.0/0000:65:00.0"
    )
    assert os.readlink(f"{root}{GPU}/driver") == "../../../../bus/pci/drivers/pci-stub"
    assert not os.path.lexists(f"{root}{DRIVERS}/nvidia/0000:65:00.0")


def test_vfio_node_exists_while_a_group_member_is_on_vfio(sim_host):
    """As the real kernel does (tests/kernel): the node comes with the group's first vfio-pci device, viable or not."""
    root = sim_host("passthrough")
    before = tree_state(root)
    k = SimKernel(str(root))
    to_vfio(k, GPU, "0000:65:00.0")
    assert driver(root, GPU) == "vfio-pci"
    assert os.path.exists(f"{root}/dev/vfio/13")  # although the audio function still holds the group
    to_vfio(k, AUDIO, "0000:65:00.1")
    assert os.path.exists(f"{root}/dev/vfio/13")
    # restore as libvirt's reattach does: unbind, clear the override, drivers_probe picks the native driver
    k.write(f"{DRIVERS}/vfio-pci/unbind", "0000:65:00.0")
    assert os.path.exists(f"{root}/dev/vfio/13")
    k.write(f"{GPU}/driver_override", "\n")
    k.write("/sys/bus/pci/drivers_probe", "0000:65:00.0")
    assert os.path.exists(f"{root}/dev/vfio/13")  # nvidia took the GPU back; the audio function is still on vfio
    k.write(f"{DRIVERS}/vfio-pci/unbind", "0000:65:00.1")
    assert not os.path.exists(f"{root}/dev/vfio/13")
    k.write(f"{AUDIO}/driver_override", "\n")
    k.write("/sys/bus/pci/drivers_probe", "0000:65:00.1")
    assert (driver(root, GPU), driver(root, AUDIO)) == ("nvidia", "snd_hda_intel")
    assert diff(before, tree_state(root)) == {}


def test_bridge_in_the_group_is_ignored(sim_host):
    root = sim_host("passthrough")
    k = SimKernel(str(root))
    to_vfio(k, "/sys/bus/pci/devices/0000:01:00.0", "0000:01:00.0")
    to_vfio(k, "/sys/bus/pci/devices/0000:01:00.1", "0000:01:00.1")
    assert driver(root, "/sys/bus/pci/devices/0000:00:01.0") == "pcieport"
    assert os.path.exists(f"{root}/dev/vfio/1")


def test_drivers_probe_is_quiet_when_bound_or_unmatched(sim_host):
    root = sim_host("passthrough")
    k = SimKernel(str(root))
    state = tree_state(root)
    k.write("/sys/bus/pci/drivers_probe", "0000:65:00.0")  # already bound: nothing happens
    assert diff(state, tree_state(root)) == {}
    assert write_errno(root, "/sys/bus/pci/drivers_probe", "0000:99:00.0") == errno.ENODEV


def test_unbinding_nvidia_takes_mdev_types_and_mdevs_with_it(sim_host):
    root = sim_host("p4")
    before = tree_state(root)
    k = SimKernel(str(root))
    dev = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    k.write(f"{dev}/mdev_supported_types/nvidia-64/create", "00000000-0000-4000-8000-000000000001")
    k.write(f"{DRIVERS}/nvidia/unbind", "0000:01:00.0")
    assert not os.path.exists(f"{root}{dev}/mdev_supported_types")
    assert not os.path.lexists(f"{root}/sys/class/mdev_bus/0000:01:00.0")
    assert os.listdir(f"{root}/sys/bus/mdev/devices") == []
    k.write(f"{DRIVERS}/nvidia/bind", "0000:01:00.0")
    assert diff(before, tree_state(root)) == {}


# -- SR-IOV ----------------------------------------------------------------------------------------------------
PF = "/sys/bus/pci/devices/0000:18:00.0"
PF_DIR = "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"


def _h200(tmp_path, enabled: bool) -> str:
    root = str(tmp_path / ("h200-on" if enabled else "h200-off"))
    h = HostBuilder(root, "h200")
    add_h200(h, "0000:18:00.0", "pci0000:17", 5, 0, 16, enabled=enabled)
    h.finish()
    return root


def _to_stub(k: SimKernel) -> None:
    """sriov-manage's first steps (reference §3.1): nvidia lacks sriov_configure, pci-pf-stub has it."""
    k.write(f"{DRIVERS}/nvidia/unbind", "0000:18:00.0")
    k.write(f"{PF}/driver_override", "pci-pf-stub")
    k.write("/sys/bus/pci/drivers_probe", "0000:18:00.0")


def test_sriov_numvfs_errno(tmp_path):
    root = _h200(tmp_path, enabled=False)
    k = SimKernel(root)
    assert write_errno(root, f"{PF}/sriov_numvfs", "17") == errno.ERANGE
    assert write_errno(root, f"{PF}/sriov_numvfs", "4") == errno.ENOENT  # bound to nvidia: no sriov_configure
    k.write(f"{PF}/sriov_numvfs", "0")  # same count: accepted without a driver check
    k.write(f"{DRIVERS}/nvidia/unbind", "0000:18:00.0")
    assert write_errno(root, f"{PF}/sriov_numvfs", "4") == errno.ENOENT  # no driver at all
    assert write_errno(root, f"{PF}/sriov_numvfs", "four") == errno.EINVAL
    assert write_errno(root, f"{PF}/sriov_numvfs", "70000") == errno.ERANGE  # kstrtou16 overflow
    k.write(f"{PF}/driver_override", "pci-pf-stub")
    k.write("/sys/bus/pci/drivers_probe", "0000:18:00.0")
    k.write(f"{PF}/sriov_numvfs", "0x4\n")  # kstrtou16 base 0
    assert read(root, f"{PF}/sriov_numvfs") == "4\n"
    assert write_errno(root, f"{PF}/sriov_numvfs", "8") == errno.EBUSY
    k.write(f"{PF}/sriov_numvfs", "4")  # same count again: no-op
    assert write_errno(root, f"{PF}/sriov_drivers_autoprobe", "maybe") == errno.EINVAL


def test_enabled_vfs_are_byte_identical_to_build_time_vfs(tmp_path):
    off, on = _h200(tmp_path, enabled=False), _h200(tmp_path, enabled=True)
    k = SimKernel(off)
    _to_stub(k)
    k.write(f"{PF}/sriov_numvfs", "16")
    k.write(f"{DRIVERS}/pci-pf-stub/unbind", "0000:18:00.0")
    k.write(f"{PF}/driver_override", "\n")
    k.write("/sys/bus/pci/drivers_probe", "0000:18:00.0")
    assert diff(tree_state(on), tree_state(off)) == {}


def test_disabling_vfs_removes_them_and_their_groups(tmp_path):
    off, on = _h200(tmp_path, enabled=False), _h200(tmp_path, enabled=True)
    k = SimKernel(on)
    k.write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1420")
    _to_stub(k)
    k.write(f"{PF}/sriov_numvfs", "0")
    assert read(on, f"{PF}/sriov_numvfs") == "0\n"
    for bdf in ("0000:18:00.4", "0000:18:01.3"):
        assert not os.path.lexists(f"{on}/sys/bus/pci/devices/{bdf}")
    assert not any(e.startswith("virtfn") for e in os.listdir(f"{on}{PF_DIR}"))
    assert not os.path.exists(f"{on}/sys/kernel/iommu_groups/50")
    k.write(f"{DRIVERS}/pci-pf-stub/unbind", "0000:18:00.0")
    k.write(f"{PF}/driver_override", "\n")
    k.write("/sys/bus/pci/drivers_probe", "0000:18:00.0")
    assert diff(tree_state(off), tree_state(on)) == {}


def test_autoprobe_off_leaves_new_vfs_unbound(tmp_path):
    root = _h200(tmp_path, enabled=False)
    k = SimKernel(root)
    _to_stub(k)
    k.write(f"{PF}/sriov_drivers_autoprobe", "0\n")
    assert read(root, f"{PF}/sriov_drivers_autoprobe") == "0\n"
    k.write(f"{PF}/sriov_numvfs", "2")
    vf = "/sys/bus/pci/devices/0000:18:00.5"
    assert driver(root, vf) is None
    assert not os.path.exists(f"{root}{vf}/nvidia")
    assert os.readlink(f"{root}{vf}/physfn") == "../0000:18:00.0"
    assert os.readlink(f"{root}{PF_DIR}/virtfn1") == "../0000:18:00.5"
    k.write(f"{vf}/driver_override", "vfio-pci")
    k.write("/sys/bus/pci/drivers_probe", "0000:18:00.5")
    assert os.path.exists(f"{root}/dev/vfio/51")  # VF 1 of the PF in group 5: group 51
    k.write(f"{DRIVERS}/vfio-pci/unbind", "0000:18:00.5")
    k.write(f"{vf}/driver_override", "\n")
    k.write(f"{DRIVERS}/nvidia/bind", "0000:18:00.5")  # the native driver lays down its nvidia/ group
    assert read(root, f"{vf}/nvidia/current_vgpu_type") == "0\n"
    assert read(root, f"{vf}/nvidia/creatable_vgpu_types").startswith(
        "ID    : vGPU Name\n1420  : NVIDIA H200X-4C\n"  # MIG off: the time-sliced types
    )


def test_unbinding_a_layout_b_vf_destroys_its_mdev_and_frees_the_gpu(sim_host):
    root = sim_host("a100-mdev-vf")
    k = SimKernel(str(root))
    vf0, vf1 = "/sys/bus/pci/devices/0000:41:00.4", "/sys/bus/pci/devices/0000:41:00.5"
    k.write(f"{vf0}/mdev_supported_types/nvidia-473/create", "00000000-0000-4000-8000-000000000001")  # 40C: max 1
    assert read(root, f"{vf1}/mdev_supported_types/nvidia-468/available_instances") == "0\n"
    k.write(f"{vf0}/driver_override", "vfio-pci")
    k.write(f"{DRIVERS}/nvidia/unbind", "0000:41:00.4")
    assert os.listdir(f"{root}/sys/bus/mdev/devices") == []
    assert read(root, f"{vf1}/mdev_supported_types/nvidia-468/available_instances") == "1\n"
    k.write("/sys/bus/pci/drivers_probe", "0000:41:00.4")
    assert driver(root, vf0) == "vfio-pci" and not os.path.exists(f"{root}{vf0}/mdev_supported_types")
    assert os.path.exists(f"{root}/dev/vfio/40")
