"""The simulated driver's heterogeneous (mixed-size) time-sliced mode, placement IDs and vGPU scheduler
(vgpuadm/sim/hetero.py; facts in docs/reference/nvidia-host-policies.md): nvidia-smi's outputs and refusals, the
placement_id attribute's errno, and what a reboot keeps."""

from __future__ import annotations

import errno
import subprocess

import pytest

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.reboot import reboot

pytestmark = pytest.mark.process

DEV = "/sys/bus/pci/devices"


def smi(root, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([f"{root}/usr/bin/nvidia-smi", *args], capture_output=True, text=True, check=False)


def vf(fn: int) -> str:
    return f"{DEV}/0000:18:{fn // 8:02x}.{fn % 8}/nvidia"


def read(root, path: str) -> str:
    with open(f"{root}{path}") as f:
        return f.read()


def write_errno(root, path: str, data: str) -> int | None:
    try:
        SimKernel(str(root)).write(path, data)
    except OSError as exc:
        return exc.errno
    return None


def test_mode_is_off_when_built_and_q_reports_support(sim_host):
    root = sim_host("h200-vendor-vfio")
    out = smi(root, "-q").stdout
    assert "        vGPU Heterogeneous Mode           : Disabled\n" in out
    assert "        Heterogeneous Time-Slice Sizes    : Supported\n" in out
    assert read(root, f"{vf(4)}/placement_id") == "-1\n"


def test_mixed_sizes_take_the_placement_written_before_the_type(sim_host):
    root = sim_host("h200-vendor-vfio")
    assert smi(root, "vgpu", "-i", "0", "-shm", "1").stdout == (
        "Enabled vGPU heterogeneous mode for GPU 00000000:18:00.0.\nAll done.\n"
    )
    assert write_errno(root, f"{vf(4)}/placement_id", "4\n") is None
    assert write_errno(root, f"{vf(4)}/current_vgpu_type", "1422\n") == errno.EINVAL  # 8C: IDs 0, 8, 16 …
    assert read(root, f"{vf(4)}/current_vgpu_type") == "0\n"
    assert write_errno(root, f"{vf(4)}/placement_id", "8\n") is None
    assert write_errno(root, f"{vf(4)}/current_vgpu_type", "1422\n") is None
    assert write_errno(root, f"{vf(4)}/placement_id", "0\n") == errno.EBUSY
    assert write_errno(root, f"{vf(5)}/placement_id", "12\n") is None
    assert write_errno(root, f"{vf(5)}/current_vgpu_type", "1420\n") == errno.EINVAL  # overlaps the 8C at 8–15
    assert write_errno(root, f"{vf(5)}/placement_id", "141\n") == errno.EINVAL  # past the 141 slots
    assert write_errno(root, f"{vf(5)}/placement_id", "-1\n") is None
    assert write_errno(root, f"{vf(5)}/current_vgpu_type", "1420\n") is None  # 4C: the driver picks 0
    assert read(root, f"{vf(5)}/placement_id") == "0\n"
    out = smi(root, "vgpu", "-c", "-v").stdout
    assert (
        "    vGPU Type ID                          : 0x58e\n"
        "        Name                              : NVIDIA H200X-8C\n"
        "        Placement Size                    : 8\n"
        "        Creatable Placement IDs           : 16 24 32 40 48 56 64 72 80 88 96 104 112 120 128\n"
    ) in out
    supported = smi(root, "vgpu", "-s", "-v").stdout
    assert "        Supported Placement IDs           : 0 70\n" in supported  # H200X-70C
    # the mode cannot change while vGPUs exist; clearing a type frees its placement
    refused = smi(root, "vgpu", "-i", "0", "-shm", "0")
    assert (refused.returncode, refused.stderr) == (
        1,
        "Unable to set vGPU heterogeneous mode for GPU 00000000:18:00.0: In use by another client\n",
    )
    assert write_errno(root, f"{vf(4)}/current_vgpu_type", "0\n") is None
    assert read(root, f"{vf(4)}/placement_id") == "-1\n"


def test_scheduler_set_read_refused_busy_and_from_registry_after_reboot(sim_host):
    root = sim_host("rtxpro6000-mig")
    gpu = "00000000:81:00.0"
    assert smi(root, "vgpu", "-i", "0", "--set-vgpu-scheduler-state", "equalShare", "--timeslice", "3").returncode == 0
    assert smi(root, "vgpu", "-ss").stdout == (
        f"GPU {gpu}\n    vGPU Scheduler State\n"
        "        Scheduler Policy                  : Equal Share\n"
        "        Time Slice                        : 3 ms\n"
    )
    assert smi(root, "vgpu", "-i", "0", "-shm", "1").returncode == 0
    fixed = smi(root, "vgpu", "-i", "0", "--set-vgpu-scheduler-state", "fixedShare")
    assert (fixed.returncode, fixed.stderr) == (3, f"Unable to set vGPU scheduler state for GPU {gpu}: Not Supported\n")
    SimKernel(str(root)).write(f"{DEV}/0000:81:00.4/nvidia/current_vgpu_type", "2011\n")
    busy = smi(root, "vgpu", "-i", "0", "--set-vgpu-scheduler-state", "bestEffort")
    assert busy.stderr == f"Unable to set vGPU scheduler state for GPU {gpu}: In use by another client\n"
    (root / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/modprobe.d/nvidia.conf").write_text(
        'options nvidia NVreg_RegistryDwords="RmPVMRL=0x11"\n'
        'options nvidia NVreg_RegistryDwordsPerDevice="pci=0000:81:00.0;RmPVMRL=0x00050001"\n'
    )
    reboot(str(root))
    assert smi(root, "vgpu", "-ss").stdout.endswith("Equal Share\n        Time Slice                        : 5 ms\n")
    assert "vGPU Heterogeneous Mode           : Disabled\n" in smi(root, "-q").stdout


@pytest.mark.parametrize("args", [("-shm", "2"), ("--set-vgpu-scheduler-state", "fast")])
def test_bad_arguments_are_nvidia_smis_invalid_combination(sim_host, args):
    root = sim_host("h200-vendor-vfio")
    out = smi(root, "vgpu", "-i", "0", *args)
    assert (out.returncode, out.stderr) == (
        2,
        "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n",
    )
