"""`vgpuadm sim reset DIR GPU` and `sim reload-driver DIR [DRIVER]` (sim/reset.py): the simulated driver forgets one
GPU's runtime state as a GPU reset or a recovered Xid does — mdevs, VFs with their vGPU types and params, GPU
instances, MIG mode on Hopper (not on Ampere), heterogeneous mode, vfio binds — and writes nothing of another GPU
(its files keep their bytes, inodes and mtimes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.trees import written
from vgpuadm.errors import UsageError
from vgpuadm.host.nvidia_smi_vgpu import parse_query_xml
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import build
from vgpuadm.sim.reset import reload_driver, reset, set_ecc

pytestmark = pytest.mark.process  # the simulated nvidia-smi runs as a process

P4 = "0000:03:00.0"
H200 = "0000:18:00.0"
A100 = "0000:41:00.0"
U1 = "11111111-2222-4333-8444-555555555555"
U2 = "11111111-2222-4333-8444-666666666666"


def smi(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "usr/bin/nvidia-smi"), *args], capture_output=True, text=True, check=False)


def read(root: Path, host_path: str) -> str:
    return (root / host_path.lstrip("/")).read_text()


def test_a_reset_forgets_that_gpu_only(tmp_path: Path) -> None:
    build("mixed", str(tmp_path))
    k = SimKernel(str(tmp_path))
    k.write(f"/sys/bus/pci/devices/{P4}/mdev_supported_types/nvidia-63/create", U1)
    a100_vf = f"/sys/bus/pci/devices/{A100[:-1]}4"
    k.write(f"{a100_vf}/mdev_supported_types/nvidia-470/create", U2)
    h200_vf = f"/sys/bus/pci/devices/{H200[:-1]}4"
    k.write(f"{h200_vf}/nvidia/current_vgpu_type", "1420\n")
    k.write(f"{h200_vf}/nvidia/vgpu_params", "enable_uvm=1\n")
    others = {pf: written(tmp_path, pf) for pf in (P4, A100)}
    assert reset(str(tmp_path), "18:00.0") == (H200, ["8 VF(s) (1 with a vGPU type)"])
    assert read(tmp_path, f"/sys/bus/pci/devices/{H200}/sriov_numvfs") == "0\n"
    assert not (tmp_path / h200_vf.lstrip("/")).exists()
    assert sorted(os.listdir(tmp_path / "sys/bus/mdev/devices")) == [U1, U2]
    assert {pf: written(tmp_path, pf) for pf in (P4, A100)} == others
    assert reset(str(tmp_path), P4) == (P4, ["1 mdev(s)"])
    assert sorted(os.listdir(tmp_path / "sys/bus/mdev/devices")) == [U2]
    assert read(tmp_path, f"/sys/bus/pci/devices/{P4}/mdev_supported_types/nvidia-63/available_instances") == "8\n"
    assert reset(str(tmp_path), P4) == (P4, [])


def test_hopper_loses_mig_mode_and_instances(tmp_path: Path) -> None:
    build("h200-mig", str(tmp_path))
    assert smi(tmp_path, "-i", "0", "-mig", "1").returncode == 0
    assert smi(tmp_path, "mig", "-i", "0", "-cgi", "19:6,19:5").returncode == 0
    SimKernel(str(tmp_path)).write(f"/sys/bus/pci/devices/{H200[:-1]}4/nvidia/current_vgpu_type", "1414\n")
    assert reset(str(tmp_path), H200) == (H200, ["16 VF(s) (1 with a vGPU type)", "2 GPU instance(s)", "MIG mode"])
    (gpu,) = parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())
    assert (gpu.mig_current, gpu.mig_pending) == ("Disabled", "Disabled")
    assert smi(tmp_path, "mig", "-lgi").stdout == "No MIG-enabled devices found.\n"


def test_a_reset_through_the_pci_core_keeps_the_vfs(tmp_path: Path) -> None:
    build("h200-vendor-vfio", str(tmp_path))
    vf = f"/sys/bus/pci/devices/{H200[:-1]}5"
    k = SimKernel(str(tmp_path))
    k.write(f"{vf}/nvidia/current_vgpu_type", "1426\n")
    k.write(f"{vf}/nvidia/vgpu_params", "enable_uvm=1\n")
    assert reset(str(tmp_path), H200, keep_vfs=True) == (H200, ["1 VF vGPU type(s)"])
    assert read(tmp_path, f"/sys/bus/pci/devices/{H200}/sriov_numvfs") == "16\n"
    assert (read(tmp_path, f"{vf}/nvidia/current_vgpu_type"), read(tmp_path, f"{vf}/nvidia/vgpu_params")) == ("0\n",
                                                                                                          "\n")  # fmt: skip


def test_ampere_keeps_mig_mode_and_loses_instances(tmp_path: Path) -> None:
    build("a100d-mig", str(tmp_path))
    assert "pending enable state" in smi(tmp_path, "-i", "0", "-mig", "1").stdout
    assert reset(str(tmp_path), A100) == (A100, ["16 VF(s)"])  # the reset makes the pending mode take effect
    assert smi(tmp_path, "mig", "-i", "0", "-cgi", "19").returncode == 0
    assert reset(str(tmp_path), A100) == (A100, ["1 GPU instance(s)"])
    (gpu,) = parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())
    assert (gpu.mig_current, gpu.mig_pending) == ("Enabled", "Enabled")


def test_heterogeneous_mode_goes_and_the_scheduler_is_the_registrys(tmp_path: Path) -> None:
    build("h200-vendor-vfio", str(tmp_path))
    assert smi(tmp_path, "vgpu", "-i", "0", "--set-vgpu-scheduler-state", "equalShare").returncode == 0
    assert smi(tmp_path, "vgpu", "-i", "0", "-shm", "1").returncode == 0
    assert reset(str(tmp_path), H200) == (H200, ["16 VF(s)", "heterogeneous mode", "scheduler equal-share"])


def test_vfio_binds_of_the_gpus_functions_go(tmp_path: Path) -> None:
    build("passthrough", str(tmp_path))
    k = SimKernel(str(tmp_path))
    for fn in ("0000:65:00.0", "0000:65:00.1"):
        k.write(f"/sys/bus/pci/devices/{fn}/driver_override", "vfio-pci")
        k.write(f"/sys/bus/pci/devices/{fn}/driver/unbind", fn)
        k.write("/sys/bus/pci/drivers_probe", fn)
    assert reset(str(tmp_path), "65:00.0") == ("0000:65:00.0", ["2 bind(s) to another driver"])
    assert (tmp_path / "sys/bus/pci/devices/0000:65:00.0/driver").resolve().name == "nvidia"
    assert (tmp_path / "sys/bus/pci/devices/0000:65:00.1/driver").resolve().name == "snd_hda_intel"
    assert read(tmp_path, "/sys/bus/pci/devices/0000:65:00.1/driver_override") == "(null)\n"


def test_a_driver_reload_resets_every_gpu_it_drives(tmp_path: Path) -> None:
    build("p4", str(tmp_path))
    k = SimKernel(str(tmp_path))
    k.write("/sys/bus/pci/devices/0000:01:00.0/mdev_supported_types/nvidia-63/create", U1)
    k.write("/sys/bus/pci/devices/0000:02:00.0/mdev_supported_types/nvidia-63/create", U2)
    assert reload_driver(str(tmp_path)) == {"0000:01:00.0": ["1 mdev(s)"], "0000:02:00.0": ["1 mdev(s)"]}
    assert not os.listdir(tmp_path / "sys/bus/mdev/devices")
    build("mtty", str(tmp_path / "mtty"))
    SimKernel(str(tmp_path / "mtty")).write("/sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-1/create", U1)
    assert reload_driver(str(tmp_path / "mtty"), "mtty") == {"mtty": ["1 mdev(s)"]}


def test_what_is_no_gpu_is_refused_with_the_hosts_gpus(tmp_path: Path) -> None:
    build("p4", str(tmp_path))
    with pytest.raises(UsageError) as exc:
        reset(str(tmp_path), "0000:09:00.0")
    assert (exc.value.message, exc.value.hint) == (
        f"0000:09:00.0 is no GPU of the simulated host {tmp_path}",
        "its GPUs: 0000:01:00.0, 0000:02:00.0",
    )
    with pytest.raises(UsageError) as exc:
        reload_driver(str(tmp_path), "amdgpu")
    assert exc.value.message == f"no device of the simulated host {tmp_path} uses the driver 'amdgpu'"


def test_ecc_and_a_driver_upgrade_show_in_what_nvidia_smi_reports(tmp_path: Path) -> None:
    """`sim ecc` and `sim reload-driver --version`: the simulated driver's `-q -x` reports them from then on (ECC
    per GPU, the release for all); values out of their grammar are refused before anything changes."""
    build("h200-vendor-vfio", str(tmp_path))

    def reported() -> list[tuple[str, str, str | None]]:
        return [
            (g.address, g.ecc, g.driver_version) for g in parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())
        ]

    assert reported() == [(H200, "Enabled", "580.159.04")]
    assert set_ecc(str(tmp_path), "18:00.0", False) == H200
    assert reload_driver(str(tmp_path), version="590.44.01") == {H200: ["16 VF(s)"]}
    assert reported() == [(H200, "Disabled", "590.44.01")]
    for bad, message in (("590.44.01\n<x/>", "'590.44.01\\n<x/>' is no nvidia driver release"),
                         ("latest", "'latest' is no nvidia driver release")):  # fmt: skip
        with pytest.raises(UsageError) as exc:
            reload_driver(str(tmp_path), version=bad)
        assert (exc.value.message, exc.value.hint) == (message, "a release reads like 580.159.04")
    with pytest.raises(UsageError) as exc:
        reload_driver(str(tmp_path), "mtty", version="1.0")
    assert exc.value.message == "--version is for the nvidia driver, not mtty"
    with pytest.raises(UsageError) as exc:
        set_ecc(str(tmp_path), "0000:09:00.0", True)
    assert exc.value.message == f"0000:09:00.0 is no GPU of the simulated host {tmp_path}"
    assert reported() == [(H200, "Disabled", "590.44.01")]
