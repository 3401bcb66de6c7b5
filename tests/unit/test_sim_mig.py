"""The simulated nvidia-smi and driver with MIG (sim/mig.py, sim/nvidia_smi.py): MIG mode, GPU instances at the
real placements, and their effect on vGPU types on layout B (A100 80GB mdev on VFs) and layout C (H200, RTX PRO
6000 Blackwell). Outputs are read back with the product's parsers, which are tested on real outputs."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from vgpuadm.host.nvidia_smi_mig import parse_gi_profiles, parse_gpu_instances
from vgpuadm.host.nvidia_smi_vgpu import parse_query_xml, parse_type_blocks
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import build
from vgpuadm.sim.reboot import reboot

pytestmark = pytest.mark.process

H200_VF = "/sys/bus/pci/devices/0000:18:00.4"


def smi(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "usr/bin/nvidia-smi"), *args], capture_output=True, text=True, check=False)


def creatable(root: Path, vf: str) -> list[str]:
    return (root / vf.lstrip("/") / "nvidia/creatable_vgpu_types").read_text().splitlines()[1:]


def test_h200_offers_time_sliced_types_only_while_mig_is_off(tmp_path):
    build("h200-mig", str(tmp_path))
    names = [line.split(":", 1)[1].strip() for line in creatable(tmp_path, H200_VF)]
    assert names == ["NVIDIA H200X-4C", "NVIDIA H200X-7C", "NVIDIA H200X-8C", "NVIDIA H200X-14C", "NVIDIA H200X-17C",
                     "NVIDIA H200X-28C", "NVIDIA H200X-35C", "NVIDIA H200X-70C", "NVIDIA H200X-141C"]  # fmt: skip
    (gpu,) = parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())
    assert (gpu.address, gpu.mig_current, gpu.mig_pending, gpu.host_vgpu_mode) == ("0000:18:00.0", "Disabled",
                                                                                   "Disabled", "SR-IOV")  # fmt: skip
    blocks = {
        t.name: t.gi_profile_id for t in parse_type_blocks(smi(tmp_path, "vgpu", "-s", "-v").stdout)["0000:18:00.0"]
    }
    assert blocks["NVIDIA H200X-1-18C"] == 19 and blocks["NVIDIA H200X-141C"] is None  # vgpu -s lists every type


@pytest.mark.parametrize("profile", ["h200-vendor-vfio", "mixed"])
def test_every_simulated_h200_offers_mig_backed_types_only_in_mig_mode(tmp_path, cli, profile):
    """Issue 13: NVIDIA's vGPU documentation puts time-sliced vGPUs on a GPU not partitioned into GPU instances and
    MIG-backed ones on a GPU instance, so an H200 with MIG off offers no MIG-backed type and its driver refuses one
    (EINVAL: not in the VF's creatable list); after `mig enable` it offers those only, and writing one binds a free
    GPU instance of its profile, or fails with EIO when none is free."""
    build(profile, str(tmp_path))
    kernel = SimKernel(str(tmp_path))

    def h200_types() -> list[tuple[str, str | None]]:
        doc = json.loads(cli("--root", str(tmp_path), "types", "--json").out)
        return sorted({(t["type_id"], t["mig_profile"]) for t in doc if t["parent"].startswith("0000:18:")})

    assert h200_types() == [(f"nvidia-{n}", None) for n in range(1420, 1429)]
    with pytest.raises(OSError) as exc:
        kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "1414\n")
    assert exc.value.errno == errno.EINVAL
    assert (tmp_path / H200_VF.lstrip("/") / "nvidia/current_vgpu_type").read_text() == "0\n"

    assert cli("--root", str(tmp_path), "mig", "enable", "--gpu", "0000:18:00.0").code == 0
    assert h200_types() == [("nvidia-1413", "7g.141gb"), ("nvidia-1414", "1g.18gb"), ("nvidia-1415", "1g.18gb+me"),
                            ("nvidia-1416", "1g.35gb"), ("nvidia-1417", "2g.35gb"), ("nvidia-1418", "3g.71gb"),
                            ("nvidia-1419", "4g.71gb")]  # fmt: skip
    with pytest.raises(OSError) as exc:  # no GPU instance of 1g.18gb yet
        kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "1414\n")
    assert exc.value.errno == errno.EIO
    made = cli("--root", str(tmp_path), "mig", "create", "--gpu", "0000:18:00.0", "--profile", "1g.18gb")
    assert made.out == "done: step 1/1 create MIG GPU instance 1g.18gb (profile 19) at slot 6 on 0000:18:00.0\n"
    kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "1414\n")
    assert (tmp_path / H200_VF.lstrip("/") / "nvidia/gpu_instance_id").read_text() == "1\n"
    with pytest.raises(OSError) as exc:  # its one instance is taken: none free for a second vGPU
        kernel.write("/sys/bus/pci/devices/0000:18:00.5/nvidia/current_vgpu_type", "1414\n")
    assert exc.value.errno == errno.EIO


def test_h200_layout_c_mig_backed_type_binds_a_free_instance(tmp_path):
    build("h200-mig", str(tmp_path))
    kernel = SimKernel(str(tmp_path))
    assert smi(tmp_path, "-i", "0", "-mig", "1").stdout == "Enabled MIG Mode for GPU 00000000:18:00.0\nAll done.\n"
    lines = creatable(tmp_path, H200_VF)
    assert lines[:2] == ["1413  : NVIDIA H200X-7-141C", "1414  : NVIDIA H200X-1-18C"] and len(lines) == 7
    with pytest.raises(OSError) as exc:  # no GPU instance yet: the driver's EIO
        kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "1414\n")
    assert exc.value.errno == errno.EIO
    assert (tmp_path / H200_VF.lstrip("/") / "nvidia/current_vgpu_type").read_text() == "0\n"
    out = smi(tmp_path, "mig", "-i", "0", "-cgi", "19:6")
    assert out.stdout == "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 1g.18gb (ID 19)\n"
    kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "1414\n")
    assert (tmp_path / H200_VF.lstrip("/") / "nvidia/gpu_instance_id").read_text() == "1\n"
    busy = smi(tmp_path, "mig", "-i", "0", "-dgi", "-gi", "1")
    assert (busy.returncode, busy.stderr) == (1, "Unable to destroy GPU instance ID  1 from GPU  0: In use by another "
                                                 "client\n")  # fmt: skip
    off = smi(tmp_path, "-i", "0", "-mig", "0")
    assert off.returncode == 1 and "In use by another client" in off.stderr
    kernel.write(f"{H200_VF}/nvidia/current_vgpu_type", "0\n")
    assert not (tmp_path / H200_VF.lstrip("/") / "nvidia/gpu_instance_id").exists()
    assert smi(tmp_path, "mig", "-i", "0", "-dgi", "-gi", "1").returncode == 0


def test_h200_placements_refuse_an_overlap_whole(tmp_path):
    build("h200-mig", str(tmp_path))
    smi(tmp_path, "-i", "0", "-mig", "1")
    assert smi(tmp_path, "mig", "-i", "0", "-cgi", "19:0,19:2").returncode == 0
    bad = smi(tmp_path, "mig", "-i", "0", "-cgi", "19:4,14:0")  # 2g.35gb at 0 overlaps 1g.18gb at 0
    assert bad.returncode == 1 and "Insufficient Resources" in bad.stderr
    gis = parse_gpu_instances(smi(tmp_path, "mig", "-lgi").stdout)
    assert [(g.name, g.start, g.size) for g in gis] == [("1g.18gb", 0, 1), ("1g.18gb", 2, 1)]  # nothing kept
    free = {p.name: p.free for p in parse_gi_profiles(smi(tmp_path, "mig", "-lgip").stdout)}
    assert free == {"1g.18gb": 5, "1g.18gb+me": 1, "1g.35gb": 2, "2g.35gb": 1, "3g.71gb": 1, "4g.71gb": 0,
                    "7g.141gb": 0}  # fmt: skip


def test_a100d_layout_b_mig_pending_until_reset_and_types_follow_instances(tmp_path):
    build("a100d-mig", str(tmp_path))
    vf = tmp_path / "sys/bus/pci/devices/0000:41:00.4/mdev_supported_types"

    def avail(tid: str) -> str:
        return (vf / tid / "available_instances").read_text()

    assert (avail("nvidia-607"), avail("nvidia-602")) == ("0\n", "1\n")  # A100D-1-10C needs MIG; A100D-10C does not
    out = smi(tmp_path, "-i", "0", "-mig", "1")
    assert "pending enable state" in out.stdout
    assert parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())[0].mig_pending == "Enabled"
    assert avail("nvidia-602") == "1\n"  # still time-sliced until the reset
    assert "successfully reset" in smi(tmp_path, "-r", "-i", "0").stdout
    assert (avail("nvidia-607"), avail("nvidia-602")) == ("0\n", "0\n")
    smi(tmp_path, "mig", "-i", "0", "-cgi", "19")
    assert avail("nvidia-607") == "1\n"
    uuid = "6f6c2b9e-5a57-4b2b-9a8e-0d1c2e3f4a5b"
    SimKernel(str(tmp_path)).write(f"{vf.relative_to(tmp_path)}/nvidia-607/create".replace("sys/", "/sys/", 1), uuid)
    other = tmp_path / "sys/bus/pci/devices/0000:41:00.5/mdev_supported_types/nvidia-607/available_instances"
    assert other.read_text() == "0\n"  # the only 1g.10gb instance is taken
    reboot(str(tmp_path))  # MIG mode stays, instances go
    assert parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())[0].mig_current == "Enabled"
    assert smi(tmp_path, "mig", "-lgi").stdout == "No GPU instances found: Not Found\n"


def test_blackwell_time_sliced_mig_backed_vgpus_share_one_instance(tmp_path):
    build("rtxpro6000-mig", str(tmp_path))
    kernel = SimKernel(str(tmp_path))
    smi(tmp_path, "-i", "0", "-mig", "1")
    smi(tmp_path, "mig", "-i", "0", "-cgi", "1g.24gb")
    vfs = [f"/sys/bus/pci/devices/0000:81:00.{n}" for n in (4, 5, 6, 7)]
    for vf in vfs[:3]:  # DC-1-8C: three vGPUs on one 1g.24gb instance
        kernel.write(f"{vf}/nvidia/current_vgpu_type", "2005\n")
        assert (tmp_path / vf.lstrip("/") / "nvidia/gpu_instance_id").read_text() == "1\n"
    with pytest.raises(OSError) as exc:
        kernel.write(f"{vfs[3]}/nvidia/current_vgpu_type", "2005\n")
    assert exc.value.errno == errno.EIO


def test_a100_40gb_refuses_mig_backed_types_while_mig_is_off(tmp_path):
    """The a100-mdev-vf board, like the driver, lists its MIG-backed types (A100-1-5C …) with no free instance and
    refuses to create one while MIG is off; its time-sliced types stay creatable."""
    build("a100-mdev-vf", str(tmp_path))
    types = tmp_path / "sys/bus/pci/devices/0000:41:00.4/mdev_supported_types"
    assert (types / "nvidia-474/available_instances").read_text() == "0\n"
    assert (types / "nvidia-468/available_instances").read_text() == "1\n"
    kernel = SimKernel(str(tmp_path))
    with pytest.raises(OSError) as exc:
        kernel.write("/sys/bus/pci/devices/0000:41:00.4/mdev_supported_types/nvidia-474/create",
                     "0a0a0a0a-0000-4000-8000-000000000474")  # fmt: skip
    assert exc.value.errno == errno.EINVAL
    kernel.write("/sys/bus/pci/devices/0000:41:00.4/mdev_supported_types/nvidia-468/create",
                 "0a0a0a0a-0000-4000-8000-000000000468")  # fmt: skip
    (gpu,) = parse_query_xml(smi(tmp_path, "-q", "-x").stdout.encode())
    assert (gpu.address, gpu.product, gpu.mig_current) == ("0000:41:00.0", "NVIDIA A100-PCIE-40GB", "Disabled")
