"""`gpus:` in a plan file on the simulated RTX PRO 6000 Blackwell and H200 (layout C): heterogeneous mode and the
vGPU scheduler applied before the VMs' mixed-size vGPUs, shown by --check, kept in the modprobe file (0644) and the
state file (0600); after `sim reboot` (mode off, scheduler from RmPVMRL) `restore` brings back the mode, the same
placement IDs and the scheduler; bad combinations refused before any change. Real CLI processes, the simulated
kernel and nvidia-smi, libvirt's embedded driver."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import attr, define, hostdev_keys, vgpuadm

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt
DEV = "/sys/bus/pci/devices"
PLAN = """gpus:
  {gpu}:
    heterogeneous: true
    scheduler: equal-share
    timeslice_ms: 3
vms:
  small:
    type: {small}
    count: 2
  mid:
    type: {mid}
"""


def smi(root: Path, *args: str) -> str:
    return subprocess.run([f"{root}/usr/bin/nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


def vgpus(root: Path) -> list[tuple[str, str, str, str]]:
    return [(vm, vf, attr(root, f"{DEV}/{vf}/nvidia/current_vgpu_type").strip(),
             attr(root, f"{DEV}/{vf}/nvidia/placement_id").strip())
            for vm in ("mid", "small") for vf in hostdev_keys(root, vm)]  # fmt: skip


def mode_and_scheduler(root: Path) -> tuple[str, str]:
    mode = next(line for line in smi(root, "-q").splitlines() if "vGPU Heterogeneous Mode" in line)
    return mode.split(":")[1].strip(), " ".join(smi(root, "vgpu", "-ss").split("\n", 2)[2].split())


@pytest.mark.parametrize(
    ("profile", "gpu", "small", "mid", "placed", "largest"),
    [
        ("rtxpro6000-mig", "0000:81:00.0", "DC-4C", "DC-8C",
         [("mid", "0000:81:00.4", "2010", "88"), ("small", "0000:81:00.5", "2011", "84"),
          ("small", "0000:81:00.6", "2011", "80")], "80 GiB free in 1 piece; largest 48 GiB"),
        ("h200-vendor-vfio", "0000:18:00.0", "H200X-4C", "H200X-8C",
         [("mid", "0000:18:00.4", "1422", "128"), ("small", "0000:18:00.5", "1420", "136"),
          ("small", "0000:18:00.6", "1420", "124")], "125 GiB free in 2 pieces; largest 70 GiB"),
    ],
)  # fmt: skip
def test_plan_with_gpus_section_survives_reboot_and_restore_exactly(
    sim_host: Callable[[str], Path], tmp_path: Path, profile: str, gpu: str, small: str, mid: str,
    placed: list[tuple[str, str, str, str]], largest: str,
) -> None:  # fmt: skip
    root = sim_host(profile)
    define(root, "small", "mid")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(gpu=gpu, small=small, mid=mid))
    check = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert check.code == 0, check.err
    assert check.out.splitlines()[:2] == [
        f"~ gpu {gpu}: heterogeneous off → on",
        f"~ gpu {gpu}: scheduler best-effort → equal-share (time slice 3 ms)",
    ]
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    assert res.out.splitlines()[:4] == [
        f"[1/12] set the vGPU scheduler of GPU {gpu} to equal-share, time slice 3 ms (nvidia-smi -i 0)",
        f"[2/12] enable heterogeneous (mixed-size) vGPU mode on GPU {gpu} (nvidia-smi -i 0)",
        "[3/12] write /var/lib/vgpuadm/gpus.json",
        "[4/12] write /etc/modprobe.d/vgpuadm-nvidia.conf",
    ]
    modprobe = root / "etc/modprobe.d/vgpuadm-nvidia.conf"
    assert modprobe.read_text().splitlines()[1] == (
        f'options nvidia NVreg_RegistryDwordsPerDevice="pci={gpu};RmPVMRL=0x30001"'
    )
    state = root / "var/lib/vgpuadm/gpus.json"
    assert json.loads(state.read_text()) == {
        "version": 1, "gpus": {gpu: {"heterogeneous": True, "scheduler": "equal-share", "timeslice_ms": 3}}}  # fmt: skip
    assert (stat.S_IMODE(modprobe.stat().st_mode), stat.S_IMODE(state.stat().st_mode)) == (0o644, 0o600)
    assert vgpus(root) == placed
    assert mode_and_scheduler(root) == ("Enabled", "Scheduler Policy : Equal Share Time Slice : 3 ms")
    inv = json.loads(vgpuadm(root, "inventory", "--json").out)["gpus"][0]["mixed_size"]["summary"]
    assert inv == largest
    assert vgpuadm(root, "apply", "-f", str(plan)).out == "nothing to do: the host matches the plan\n"

    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert mode_and_scheduler(root) == ("Disabled", "Scheduler Policy : Equal Share Time Slice : 3 ms")  # RmPVMRL
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    assert res.out.splitlines()[:2] == [
        f"sriov: run /usr/lib/nvidia/sriov-manage -e {gpu}",
        f"policies: enable heterogeneous (mixed-size) vGPU mode on GPU {gpu} (nvidia-smi -i 0)",
    ]
    assert [line for line in res.out.splitlines() if "placement" in line] == [
        f"vgpu: set placement ID {pid} on VF {vf}" for _vm, vf, _t, pid in placed
    ]
    assert vgpus(root) == placed
    assert mode_and_scheduler(root) == ("Enabled", "Scheduler Policy : Equal Share Time Slice : 3 ms")
    assert vgpuadm(root, "restore").out == "nothing to restore: all 3 recorded device(s) are in place\n"


def test_fixed_share_with_mixed_sizes_is_refused_before_any_change(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("rtxpro6000-mig")
    define(root, "small", "mid")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(gpu="81:00.0", small="DC-4C", mid="DC-8C").replace("equal-share", "fixed-share"))
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (5, "")
    assert res.err == (
        "error: plan.yaml:2: gpus.0000:81:00.0: fixed-share scheduling does not work with mixed sizes (heterogeneous)\n"
        "hint: use scheduler: equal-share or best-effort, or heterogeneous: false\n"
    )
    assert tree_state(root) == before
    assert not (root / "etc/modprobe.d/vgpuadm-nvidia.conf").exists()


def test_mode_change_on_a_gpu_with_vgpus_is_refused_and_frame_rate_limiter_warned(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("rtxpro6000-mig")
    define(root, "small", "mid")
    assert vgpuadm(root, "create", "--vm", "small", "--type", "DC-4C").code == 0
    plan = tmp_path / "plan.yaml"
    plan.write_text("gpus:\n  0000:81:00.0:\n    heterogeneous: true\nvms:\n  small:\n    type: DC-4C\n")
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (5, "")
    assert res.err == (
        "error: plan.yaml:2: gpus.0000:81:00.0: heterogeneous mode changes only on a GPU without vGPUs; 1 run on "
        "0000:81:00.0 (0000:81:00.4)\n"
        "hint: give the vGPUs back first (`vgpuadm destroy --vm NAME`), then apply again\n"
    )
    assert tree_state(root) == before
    # a scheduler change on a GPU with vGPUs (no VM running): the modprobe file only, and the frame-rate limiter note
    plan.write_text("gpus:\n  0000:81:00.0:\n    scheduler: equal-share\n"
                    "vms:\n  small:\n    type: DC-4C\n    params: {frame_rate_limiter: 1}\n")  # fmt: skip
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert res.code == 0, res.err
    assert [line for line in res.out.splitlines() if line.startswith("warning")] == [
        "warning: GPU 0000:81:00.0 has vGPUs: the equal-share scheduler is written to the modprobe file and takes "
        "effect when the vGPU manager restarts (a reboot)",
        "warning: GPU 0000:81:00.0: the frame-rate limiter is off under equal-share; frame_rate_limiter=1 has no "
        "effect there",
    ]


def test_gpus_section_turns_mig_on_through_the_mig_mode(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("h200-mig")
    plan = tmp_path / "plan.yaml"
    plan.write_text("gpus:\n  0000:18:00.0:\n    mig: {enabled: true}\n    heterogeneous: true\nvms: {}\n")
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert (res.code, res.err) == (5, (
        "error: plan.yaml:2: gpus.0000:18:00.0: heterogeneous time-sliced sizes and MIG mode do not mix on one GPU\n"
        "hint: choose mig: {enabled: true} or heterogeneous: true for this GPU\n"))  # fmt: skip
    plan.write_text("gpus:\n  0000:18:00.0:\n    mig: {enabled: true}\nvms: {}\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    assert res.out.splitlines()[:2] == [
        "[1/2] enable MIG mode on GPU 0000:18:00.0 (nvidia-smi -i 0)",
        "[2/2] write /var/lib/vgpuadm/gpus.json",
    ]
    assert json.loads(vgpuadm(root, "mig", "status", "--json").out)[0]["mig_current"] == "Enabled"
    assert vgpuadm(root, "apply", "-f", str(plan)).out == "nothing to do: the host matches the plan\n"
