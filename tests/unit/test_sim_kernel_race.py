"""16 processes race for the last 4 instances on one simulated GPU: the per-root lock makes exactly 4 win and the
other 12 get the kernel's errno, and the tree ends consistent (4 mdevs, counts at 0)."""

from __future__ import annotations

import errno
import multiprocessing
import os

from vgpuadm.sim.kernel import SimKernel

P4 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"


def _create(args: tuple[str, int]) -> int:
    root, n = args
    try:
        SimKernel(root).write(f"{P4}/mdev_supported_types/nvidia-64/create", f"00000000-0000-4000-8000-{n:012x}\n")
    except OSError as exc:
        return exc.errno or -1
    return 0


def test_sixteen_processes_race_for_four_instances(sim_host):
    root = str(sim_host("p4"))  # nvidia-64 (GRID P4-2Q): max_instance 4
    with multiprocessing.get_context("fork").Pool(16) as pool:
        results = pool.map(_create, [(root, n) for n in range(16)], chunksize=1)
    assert sorted(results) == [0] * 4 + [errno.EINVAL] * 12
    assert len(os.listdir(f"{root}/sys/bus/mdev/devices")) == 4
    assert len(os.listdir(f"{root}{P4}/mdev_supported_types/nvidia-64/devices")) == 4
    with open(f"{root}{P4}/mdev_supported_types/nvidia-64/available_instances") as f:
        assert f.read() == "0\n"
    groups = sorted(os.path.basename(os.readlink(f"{root}/sys/bus/mdev/devices/{u}/iommu_group"))
                    for u in os.listdir(f"{root}/sys/bus/mdev/devices"))  # fmt: skip
    assert groups == ["100", "101", "102", "103"]
