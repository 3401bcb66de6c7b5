"""Fault injection and `sim reboot` on simulated hosts, through the Python helpers and the CLI."""

from __future__ import annotations

import errno
import os

import pytest

from vgpuadm.api import open_sysfs
from vgpuadm.errors import HostIOError, UsageError
from vgpuadm.sim.faults import clear_faults, inject_fault, list_faults
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import build
from vgpuadm.sim.reboot import reboot
from vgpuadm.sim.treestate import diff, tree_state

P4 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
CREATE = "/sys/class/mdev_bus/0000:01:00.0/mdev_supported_types/nvidia-63/create"


def uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"


def write_errno(root, path: str, data: str) -> int:
    with pytest.raises(OSError) as info:
        SimKernel(str(root)).write(path, data)
    return info.value.errno


def test_fault_fails_the_chosen_write_once_and_changes_nothing(sim_host):
    root = sim_host("p4")
    state = tree_state(root)
    inject_fault(str(root), "*/nvidia-63/create", "EIO")
    assert write_errno(root, CREATE, uuid(1)) == errno.EIO
    assert diff(state, tree_state(root)) == {}
    assert list_faults(str(root)) == []
    SimKernel(str(root)).write(CREATE, uuid(1))
    assert os.path.isdir(f"{root}{P4}/{uuid(1)}")


def test_fault_after_and_times_and_canonical_paths(sim_host):
    root = sim_host("p4")
    k = SimKernel(str(root))
    # the glob names the canonical /sys/devices path; the write goes through /sys/class/mdev_bus
    inject_fault(str(root), f"{P4}/mdev_supported_types/*/create", "ENOSPC", times=2, after=1)
    k.write(CREATE, uuid(1))
    assert write_errno(root, CREATE, uuid(2)) == errno.ENOSPC
    assert list_faults(str(root)) == [
        {"path_glob": f"{P4}/mdev_supported_types/*/create", "errno": "ENOSPC", "after": 0, "times": 1}
    ]
    assert write_errno(root, CREATE, uuid(2)) == errno.ENOSPC
    k.write(CREATE, uuid(2))
    inject_fault(str(root), "*", "EBUSY", times=0)
    for _ in range(3):
        assert write_errno(root, f"{P4}/{uuid(1)}/remove", "1") == errno.EBUSY
    clear_faults(str(root))
    k.write(f"{P4}/{uuid(1)}/remove", "1")


def test_fault_reaches_the_tool_as_a_host_io_error(sim_host, cli):
    root = sim_host("p4")
    r = cli("sim", "fail", str(root), "*/driver_override", "eio")
    assert (r.code, r.out) == (
        0,
        f"writes matching */driver_override on {root} will fail with EIO (1 time(s), after 0 success(es))\n",
    )
    with pytest.raises(HostIOError) as info:
        open_sysfs(str(root)).write("/sys/bus/pci/devices/0000:01:00.0/driver_override", "vfio-pci\n")
    assert info.value.errno == errno.EIO
    assert info.value.message == (
        "writing 'vfio-pci' to /sys/bus/pci/devices/0000:01:00.0/driver_override failed: Input/output error (EIO)"
    )


def test_fault_cli_rejects_bad_input(sim_host, cli, tmp_path):
    root = sim_host("p4")
    r = cli("sim", "fail", str(root), "*/create", "ENOTANERRNO")
    assert (r.code, r.err) == (
        2,
        'error: Unknown errno name "ENOTANERRNO"\nhint: use a name such as EIO, EBUSY, EINVAL, ENOSPC\n',
    )
    r = cli("sim", "fail", str(tmp_path), "*/create", "EIO")
    assert r.code == 2 and r.err.startswith(f"error: {tmp_path} is not a simulated host")
    assert cli("sim", "fail", str(root), "--clear").code == 0


def test_sim_fail_stall_makes_writes_or_driver_reads_slow(sim_host, cli):
    """`sim fail DIR GLOB --stall S` (no errno): the matching writes, or nvidia-smi reads named as
    `/usr/bin/nvidia-smi ARGS`, take S seconds (sim/faults.py, sim/nvidia_smi.py)."""
    root = sim_host("p4")
    r = cli("sim", "fail", str(root), "/usr/bin/nvidia-smi vgpu*", "--stall", "2.5", "--times", "0")
    assert (r.code, r.out, r.err) == (0, f"writes and reads matching /usr/bin/nvidia-smi vgpu* on {root} will stall "
                                         "2.5 s (every time, after 0 success(es))\n", "")  # fmt: skip
    assert list_faults(str(root)) == [{"path_glob": "/usr/bin/nvidia-smi vgpu*", "stall": 2.5, "after": 0, "times": 0}]
    r = cli("sim", "fail", str(root), "*/create", "--stall", "900")
    assert (r.code, r.err) == (
        2,
        "error: stall=900.0 times=1 after=0\nhint: stall is 0-600 seconds; times, after ≥ 0\n",
    )


def _used_p4(root) -> None:
    k = SimKernel(str(root))
    k.write(CREATE, uuid(1))
    k.write("/sys/bus/pci/devices/0000:02:00.0/driver_override", "vfio-pci")
    k.write("/sys/bus/pci/drivers/nvidia/unbind", "0000:02:00.0")
    k.write("/sys/bus/pci/drivers_probe", "0000:02:00.0")
    assert os.path.exists(f"{root}/dev/vfio/2")


def test_reboot_drops_mdevs_overrides_and_vfio_binds(sim_host, cli):
    root = sim_host("p4")
    fresh = tree_state(root)
    _used_p4(root)
    inject_fault(str(root), "*/never", "EIO")
    r = cli("sim", "reboot", str(root))
    assert (r.code, r.out) == (0, f"rebooted simulated host {root}: runtime state dropped, native drivers bound\n")
    assert diff(fresh, tree_state(root)) == {}
    assert len(list_faults(str(root))) == 1  # faults are test instructions: they survive


@pytest.mark.parametrize("profile", ["a100-mdev-vf", "h200-vendor-vfio"])
def test_reboot_drops_vfs_and_their_vgpus(sim_host, tmp_path, profile):
    root = sim_host(profile)
    k = SimKernel(str(root))
    pf = "/sys/bus/pci/devices/" + ("0000:41:00.0" if profile == "a100-mdev-vf" else "0000:18:00.0")
    vf = pf[:-1] + "4"
    if profile == "a100-mdev-vf":
        k.write(f"{vf}/mdev_supported_types/nvidia-468/create", uuid(1))
    else:
        k.write(f"{vf}/nvidia/current_vgpu_type", "1420")
    k.write(pf[:-1] + "5/driver_override", "vfio-pci")
    k.write("/sys/bus/pci/drivers/nvidia/unbind", os.path.basename(pf[:-1] + "5"))
    reboot(str(root))
    assert not os.path.lexists(f"{root}{vf}")
    assert not any(e.startswith("virtfn") for e in os.listdir(f"{root}{pf}"))
    with open(f"{root}{pf}/sriov_numvfs") as f:
        assert f.read() == "0\n"
    assert os.listdir(f"{root}/dev/vfio") == []
    assert not os.path.isdir(f"{root}/sys/bus/mdev/devices") or os.listdir(f"{root}/sys/bus/mdev/devices") == []
    # the same as rebooting a freshly built host
    other = tmp_path / "fresh"
    build(profile, str(other))
    reboot(str(other))
    assert tree_state(root) == tree_state(other)


def test_reboot_refuses_a_real_root(tmp_path):
    with pytest.raises(UsageError) as info:
        reboot(str(tmp_path))
    assert info.value.message == f"{tmp_path} is not a simulated host (no vgpuadm-simulated-host.json)"
