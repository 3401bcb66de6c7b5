"""Layout C on the simulated kernel (reference §3.3, §3.4, §8.5): current_vgpu_type errno, the equal-size
narrowing of creatable_vgpu_types, and vgpu_params kept as written."""

from __future__ import annotations

import errno

import pytest

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import H200_MIG_PROFILE, H200_TYPES
from vgpuadm.sim.treestate import diff, tree_state

BASE = "/sys/devices/pci0000:17/0000:17:01.0"
HEADER = "ID    : vGPU Name\n"


def vf(n: int) -> str:
    fn = 4 + n
    return f"{BASE}/0000:18:{fn // 8:02x}.{fn % 8}"


def read(root, path: str) -> str:
    with open(f"{root}{path}") as f:
        return f.read()


def write_errno(root, path: str, data: str) -> int:
    with pytest.raises(OSError) as info:
        SimKernel(str(root)).write(path, data)
    return info.value.errno


def test_first_vgpu_narrows_free_vfs_to_its_size(sim_host):
    root = sim_host("h200-vendor-vfio")
    # MIG off: the time-sliced types (the MIG-backed ones only in MIG mode, tests/unit/test_sim_mig.py)
    full = HEADER + "".join(f"{num:<5d} : NVIDIA {p}\n" for num, p, _ in H200_TYPES if p not in H200_MIG_PROFILE)
    assert read(root, f"{vf(1)}/nvidia/creatable_vgpu_types") == full
    SimKernel(str(root)).write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1427\n")  # 70C, max 2
    assert read(root, f"{vf(0)}/nvidia/current_vgpu_type") == "1427\n"
    assert read(root, f"{vf(0)}/nvidia/creatable_vgpu_types") == HEADER  # occupied VF: nothing more [I]
    assert read(root, f"{vf(1)}/nvidia/creatable_vgpu_types") == HEADER + "1427  : NVIDIA H200X-70C\n"
    assert write_errno(root, f"{vf(1)}/nvidia/current_vgpu_type", "1428") == errno.EINVAL  # another size
    SimKernel(str(root)).write(f"{vf(1)}/nvidia/current_vgpu_type", "1427")
    # the max of that size (2) is reached: every free VF shows the header only
    assert {read(root, f"{vf(n)}/nvidia/creatable_vgpu_types") for n in range(16)} == {HEADER}


def test_current_type_errno(sim_host):
    root = sim_host("h200-vendor-vfio")
    path = f"{vf(2)}/nvidia/current_vgpu_type"
    assert write_errno(root, path, "0\n") == errno.EPERM  # clearing when none is set
    assert write_errno(root, path, "abc") == errno.EINVAL
    assert write_errno(root, path, "0x5a4") == errno.EINVAL  # kstrtol base 10
    assert write_errno(root, path, "999") == errno.EINVAL  # not in this VF's list
    SimKernel(str(root)).write(path, "1420")
    assert write_errno(root, path, "1420") == errno.EPERM  # already created
    assert write_errno(root, path, "1421") == errno.EPERM
    assert read(root, path) == "1420\n"


def test_clearing_the_last_vgpu_restores_every_list(sim_host):
    root = sim_host("h200-vendor-vfio")
    before = tree_state(root)
    k = SimKernel(str(root))
    k.write(f"{vf(0)}/nvidia/current_vgpu_type", "1420")
    k.write(f"{vf(5)}/nvidia/current_vgpu_type", "1420")
    k.write(f"{vf(5)}/nvidia/vgpu_params", "frame_rate_limiter=0 disable_vnc=1\n")
    assert read(root, f"{vf(5)}/nvidia/vgpu_params") == "frame_rate_limiter=0 disable_vnc=1\n"
    k.write(f"{vf(0)}/nvidia/current_vgpu_type", "0")
    assert read(root, f"{vf(0)}/nvidia/creatable_vgpu_types") == HEADER + "1420  : NVIDIA H200X-4C\n"
    k.write(f"{vf(5)}/nvidia/current_vgpu_type", "0\n")
    assert diff(before, tree_state(root)) == {}


def test_vgpu_params_are_stored_exactly(sim_host):
    root = sim_host("h200-vendor-vfio")
    SimKernel(str(root)).write(f"{vf(3)}/nvidia/vgpu_params", "enable_uvm=1")
    assert read(root, f"{vf(3)}/nvidia/vgpu_params") == "enable_uvm=1"
