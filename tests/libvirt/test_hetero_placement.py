"""Mixed-size (heterogeneous) time-sliced vGPU on the simulated RTX PRO 6000 Blackwell and H200 (layout C): placement
IDs chosen so the largest size still fits after the small ones, recorded in the domain's metadata, and the refusals
(mode off: one size per GPU; no free placement) made before any change. Real CLI processes, the simulated kernel and
nvidia-smi, libvirt's embedded driver."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, attr, define, hostdev_keys, vgpuadm

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt
DEV = "/sys/bus/pci/devices"


def smi(root: Path, *args: str) -> str:
    return subprocess.run([f"{root}/usr/bin/nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


def creatable_ids(root: Path, name: str) -> str:
    """`Creatable Placement IDs` of type `name` in the simulated driver's `vgpu -c -v` ('' when not creatable)."""
    lines = smi(root, "vgpu", "-c", "-v").splitlines()
    for i, line in enumerate(lines):
        if line.endswith(f": {name}"):
            return lines[i + 2].split(":", 1)[1].strip()
    return ""


def placements(root: Path, vm: str) -> list[tuple[str, str, str]]:
    return [(vf, attr(root, f"{DEV}/{vf}/nvidia/current_vgpu_type").strip(),
             attr(root, f"{DEV}/{vf}/nvidia/placement_id").strip()) for vf in hostdev_keys(root, vm)]  # fmt: skip


def test_small_vgpus_pack_beside_a_hand_made_one_and_the_largest_still_fits(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("rtxpro6000-mig")
    define(root, "small", "mid")
    smi(root, "vgpu", "-i", "0", "-shm", "1")
    # someone's 4 GiB vGPU at slot 52, made by hand: the driver's own choice (-1: lowest free) for the next ones
    # would take 0 and block DC-48C at 0 — its only free ID besides 48, which slot 52 already blocks
    kernel = SimKernel(str(root))
    kernel.write(f"{DEV}/0000:81:01.7/nvidia/placement_id", "52\n")
    kernel.write(f"{DEV}/0000:81:01.7/nvidia/current_vgpu_type", "2011\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  small:\n    type: DC-4C\n    count: 2\n  mid:\n    type: DC-8C\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    assert res.out.splitlines()[:6] == [  # plan order: mid, then small; all in the half slot 52 already breaks
        "[1/8] set placement ID 64 on VF 0000:81:00.4",
        "[2/8] set vGPU type 2010 (nvidia-2010) on VF 0000:81:00.4",
        "[3/8] set placement ID 48 on VF 0000:81:00.5",
        "[4/8] set vGPU type 2011 (nvidia-2011) on VF 0000:81:00.5",
        "[5/8] set placement ID 60 on VF 0000:81:00.6",
        "[6/8] set vGPU type 2011 (nvidia-2011) on VF 0000:81:00.6",
    ]
    assert placements(root, "mid") == [("0000:81:00.4", "2010", "64")]
    assert placements(root, "small") == [("0000:81:00.5", "2011", "48"), ("0000:81:00.6", "2011", "60")]
    assert creatable_ids(root, "NVIDIA DC-48C") == "0"  # the largest size that can fit still does
    assert [a.extra for a in allocations(root, "small")] == [{"placement_id": "48"}, {"placement_id": "60"}]
    # the inventory: free slots 0–47, 56–59, 72–95
    inv = vgpuadm(root, "inventory")
    assert inv.code == 0, inv.err
    lines = [line.rstrip() for line in inv.out.splitlines()]
    start = lines.index("Mixed-size GPUs (heterogeneous mode): free framebuffer")
    assert lines[start + 4] == "│ 0000:81:00.0 │ 76 GiB free in 3 pieces; largest 48 GiB │ NVIDIA DC-48C          │"
    gpu = json.loads(vgpuadm(root, "inventory", "--json").out)["gpus"][0]
    assert (gpu["rule"], gpu["locked_to"], gpu["mixed_size"]) == ("mixed-size", [], {
        "free_mib": 77824, "pieces": 3, "largest_mib": 49152, "largest_type": "NVIDIA DC-48C",
        "summary": "76 GiB free in 3 pieces; largest 48 GiB"})  # fmt: skip
    # and one more plan takes it
    define(root, "big")
    res = vgpuadm(root, "create", "--vm", "big", "--type", "DC-48C")
    assert res.code == 0, res.err
    assert placements(root, "big") == [("0000:81:00.7", "2007", "0")]


def test_h200_mixes_4_and_8_gib_and_keeps_the_70_gib_placement(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    define(root, "vm4", "vm8")
    smi(root, "vgpu", "-i", "0", "-shm", "1")
    assert vgpuadm(root, "create", "--vm", "vm4", "--type", "H200X-4C", "--total", "2").code == 0
    assert vgpuadm(root, "create", "--vm", "vm8", "--type", "H200X-8C", "--total", "2").code == 0
    assert [p[2] for p in placements(root, "vm4") + placements(root, "vm8")] == ["136", "132", "120", "112"]
    assert creatable_ids(root, "NVIDIA H200X-70C") == "0"


def test_mode_off_refuses_a_second_size_before_any_change(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("rtxpro6000-mig")
    define(root, "a", "b")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  a:\n    type: DC-4C\n  b:\n    type: DC-8C\n")
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: plan.yaml:5: vms.b.type: No room for 1 × nvidia-2010: 0000:81:00.0: 1 vGPU of 4096 MiB runs on it "
        "(NVIDIA DC-4C) and NVIDIA DC-8C is 8192 MiB; one framebuffer size per GPU\n"
        "hint: ask for a 4096 MiB type (`vgpuadm types --available` lists what fits now)\n"
    )  # the VF a's DC-4C would take exists only in the plan: no command to free it is offered
    assert tree_state(root) == before


def test_no_free_placement_is_explained_before_any_change(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("rtxpro6000-mig")
    define(root, "a", "b")
    smi(root, "vgpu", "-i", "0", "-shm", "1")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  a:\n    type: DC-48C\n    count: 2\n  b:\n    type: DC-8C\n")
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: plan.yaml:6: vms.b.type: No room for 1 × nvidia-2010: no VF lists it in nvidia/creatable_vgpu_types "
        "(0000:81:00.0: 2 VFs host vGPUs, 14 free VFs do not list it; NVIDIA DC-8C needs 8 slots at 0, 8, 16, 24, 32, "
        "40, 48, 56, 64, 72, 80, 88; vGPUs hold 0000:81:00.4 at 48–95, 0000:81:00.5 at 0–47; 0 GiB free in 0 pieces; "
        "no vGPU fits)\n"
        "hint: the GPU is full or runs another framebuffer size; pick another type\n"
    )
    res = vgpuadm(root, "create", "--vm", "a", "--type", "DC-48C", "--total", "3")
    assert res.code == 4
    assert res.err.splitlines()[0] == (
        "error: No room for one more nvidia-2007 (NVIDIA DC-48C) on 0000:81:00.0: NVIDIA DC-48C needs 48 slots at "
        "0, 48; this plan takes 48–95, 0–47; 0 GiB free in 0 pieces; no vGPU fits"
    )
    assert tree_state(root) == before
    assert json.loads(vgpuadm(root, "devices", "--json").out) == []
