"""`vgpuadm create --type <MIG-backed> --vm` as a user types it, on the simulated MIG boards with MIG mode off: the
plan turns MIG mode on (a journaled step, rolled back with the rest), makes the GPU instances the vGPUs need — on
layout C (H200) and layout B (A100D, mdevs on VFs) alike — then the vGPUs; refused with one line while a vGPU runs on
the GPU or while the board needs a reset; `destroy` removes the instances it made and no other."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, attr, define, hostdev_keys, mdevs, vgpuadm

from vgpuadm.schemas import validate

pytestmark = pytest.mark.libvirt

H200 = "0000:18:00.0"
A100D = "0000:41:00.0"


def _instances(root: Path) -> list[tuple[str, int, int]]:
    res = vgpuadm(root, "mig", "instances", "--json")
    assert res.code == 0, res.err
    return sorted((i["name"], i["start"], i["size"]) for i in json.loads(res.out))


def _mode(root: Path) -> tuple[str, str]:
    res = vgpuadm(root, "mig", "status", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)[0]
    return doc["mig_current"], doc["mig_pending"]


def test_create_turns_mig_mode_on_then_makes_the_instances_and_the_vgpus(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-mig")
    define(root, "m1")
    assert _mode(root) == ("Disabled", "Disabled")
    dry = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "2", "--vm", "m1", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines()[:4] == [
        "would give domain m1 2 × nvidia-1414:",
        f"  step 1/6 enable MIG mode on GPU {H200} (nvidia-smi -i 0)",
        f"  step 2/6 create MIG GPU instance 1g.18gb (profile 19) at slot 6 on {H200}",
        f"  step 3/6 create MIG GPU instance 1g.18gb (profile 19) at slot 5 on {H200}",
    ]
    assert (_mode(root), _instances(root)) == (("Disabled", "Disabled"), [])  # a dry run changes nothing
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "2", "--vm", "m1")
    assert res.code == 0, res.err
    assert res.out.splitlines()[:2] == ["attached vf nvidia-1414 0000:18:00.4 (to m1)",
                                        "attached vf nvidia-1414 0000:18:00.5 (to m1)"]  # fmt: skip
    assert _mode(root) == ("Enabled", "Enabled")
    assert _instances(root) == [("1g.18gb", 5, 1), ("1g.18gb", 6, 1)]
    assert hostdev_keys(root, "m1") == ["0000:18:00.4", "0000:18:00.5"]
    for vf, gi in (("0000:18:00.4", "1\n"), ("0000:18:00.5", "2\n")):
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1414\n"
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/gpu_instance_id") == gi
    # each instance vgpuadm made is recorded on the vGPU it was made for (profile id:start)
    assert [a.extra for a in allocations(root, "m1")] == [{"mig_instance": "19:6"}, {"mig_instance": "19:5"}]
    # destroy takes the instances it made back, never one made by hand
    assert vgpuadm(root, "mig", "create", "--gpu", H200, "--profile", "2g.35gb", "--placement", "0").code == 0
    # who uses which instance, and which vgpuadm made: `mig instances` and the inventory (JSON and table)
    rows = json.loads(vgpuadm(root, "mig", "instances", "--json").out)
    assert sorted((r["instance_id"], r["name"], r["state"], r["owner"], r["made_for"], r["vgpus"]) for r in rows) == [
        (1, "1g.18gb", "used", "m1", "m1", ["0000:18:00.4"]),
        (2, "1g.18gb", "used", "m1", "m1", ["0000:18:00.5"]),
        (3, "2g.35gb", "by-hand", None, None, []),
    ]
    inv = vgpuadm(root, "inventory", "--json")
    assert inv.code == 0, inv.err
    doc = json.loads(inv.out)
    validate("inventory-v1", doc)
    occupancy = doc["gpus"][0]["mig"]
    assert {k: v for k, v in occupancy.items() if k != "instances"} == {
        "mode": "Enabled", "pending": "Enabled", "slots": 8, "slots_free": 4, "used": 2, "free": 1, "by_hand": 1}  # fmt: skip
    assert occupancy["instances"][0] == {"name": "2g.35gb", "profile_id": 14, "instance_id": 3, "start": 0, "size": 2,
                                         "state": "by-hand", "owner": None, "made_for": None, "vgpus": []}  # fmt: skip
    table = [line.rstrip() for line in vgpuadm(root, "inventory").out.splitlines()]
    at = table.index("MIG GPU instances (used / free / made by hand)")
    assert [[cell.strip() for cell in line.split("│")[1:-1]] for line in table[at + 4 : at + 7]] == [
        [H200, "Enabled", "4/8", "3", "2g.35gb", "0:2", "by-hand", "-", "-"],
        [H200, "Enabled", "4/8", "2", "1g.18gb", "5:1", "used", "m1", "m1"],
        [H200, "Enabled", "4/8", "1", "1g.18gb", "6:1", "used", "m1", "m1"],
    ]
    dry = vgpuadm(root, "destroy", "--vm", "m1", "--all", "--dry-run")
    assert dry.out.splitlines()[-2:] == [f"  step 4/5 destroy MIG GPU instance 1 (1g.18gb at slot 6) on {H200}",
                                         f"  step 5/5 destroy MIG GPU instance 2 (1g.18gb at slot 5) on {H200}"]  # fmt: skip
    res = vgpuadm(root, "destroy", "--vm", "m1", "--all")
    assert res.code == 0, res.err
    assert (_instances(root), hostdev_keys(root, "m1")) == ([("2g.35gb", 0, 2)], [])


def test_create_is_refused_while_a_vgpu_runs_on_a_gpu_with_mig_off(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-mig")
    define(root, "ts", "m2")
    assert vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "ts").code == 0
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--vm", "m2")
    assert (res.code, res.out) == (5, "")
    assert res.err.splitlines() == [
        f"error: cannot enable MIG mode on {H200}: 1 vGPU runs on it (0000:18:00.4)",
        f"hint: destroy them first (`vgpuadm devices --gpu {H200}` lists them)",
    ]
    assert (_mode(root), _instances(root), hostdev_keys(root, "m2")) == (("Disabled", "Disabled"), [], [])


def test_create_on_a_board_that_needs_a_reset_changes_nothing_and_says_so(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("a100d-mig")
    define(root, "m3")
    res = vgpuadm(root, "create", "--type", "A100D-1-10C", "--vm", "m3")
    assert (res.code, res.out) == (7, "")
    assert res.err.splitlines() == [
        f"error: step 1/4 enable MIG mode on GPU {A100D} (nvidia-smi -i 0) failed: MIG mode on {A100D} changes only "
        "after a GPU reset on this board",
        f"hint: run `vgpuadm mig enable --gpu {A100D}`, then `nvidia-smi -r -i 0` (no VM may use the GPU) or reboot, "
        "and run this command again; nothing was changed (the earlier steps were rolled back)",
    ]
    assert (_mode(root), _instances(root), mdevs(root), hostdev_keys(root, "m3")) == (
        ("Disabled", "Disabled"), [], [], [])  # fmt: skip
    # the change the hint names, while it waits for the reset: one line again
    assert vgpuadm(root, "mig", "enable", "--gpu", A100D).code == 0
    assert _mode(root) == ("Disabled", "Enabled")
    pending = vgpuadm(root, "create", "--type", "A100D-1-10C", "--vm", "m3")
    assert pending.code == 5
    assert pending.err.splitlines() == [
        f"error: MIG mode on {A100D} is pending until a GPU reset",
        "hint: reset the GPU (`nvidia-smi -r -i 0`, no VM may use it) or reboot, then run this command again",
    ]


def test_layout_b_create_makes_the_gpu_instances_its_mdevs_need(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("a100d-mig")
    define(root, "m4")
    assert vgpuadm(root, "mig", "enable", "--gpu", A100D).code == 0
    reset = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-r", "-i", "0"], capture_output=True, check=False)
    assert reset.returncode == 0  # the reset the board needs
    assert (_mode(root), _instances(root)) == (("Enabled", "Enabled"), [])
    res = vgpuadm(root, "create", "--type", "A100D-1-10C", "--count", "2", "--vm", "m4")
    assert res.code == 0, res.err
    assert _instances(root) == [("1g.10gb", 5, 1), ("1g.10gb", 6, 1)]
    uuids = sorted(a.uuid or "" for a in allocations(root, "m4"))
    assert mdevs(root) == uuids and len(uuids) == 2
    for a in allocations(root, "m4"):
        assert (a.type_id, a.parent) in {("nvidia-607", "0000:41:00.4"), ("nvidia-607", "0000:41:00.5")}
        assert attr(root, f"/sys/bus/mdev/devices/{a.uuid}/mdev_type/name") == "NVIDIA A100D-1-10C\n"
    assert sorted(a.extra["mig_instance"] for a in allocations(root, "m4")) == ["19:5", "19:6"]
    res = vgpuadm(root, "destroy", "--vm", "m4", "--all")
    assert res.code == 0, res.err
    assert (_instances(root), mdevs(root), _mode(root)) == ([], [], ("Enabled", "Enabled"))


def test_mixed_mig_profiles_share_a_gpu_by_the_placement_rule(sim_host: Callable[[str], Path]) -> None:
    """1g.18gb and 2g.35gb vGPUs on one H200: placed by the GPU-instance rule (catalog/capacity.py), not refused by
    one framebuffer size per GPU; the simulated driver (the oracle) binds each to its instance. A third profile that
    no placement holds fails before any change, naming the slots in the way."""
    root = sim_host("h200-mig")
    define(root, "a", "b")
    assert vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "2", "--vm", "a").code == 0
    res = vgpuadm(root, "create", "--type", "H200X-2-35C", "--vm", "b")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == "attached vf nvidia-1417 0000:18:00.6 (to b)"
    assert _instances(root) == [("1g.18gb", 5, 1), ("1g.18gb", 6, 1), ("2g.35gb", 2, 2)]
    assert attr(root, "/sys/bus/pci/devices/0000:18:00.6/nvidia/current_vgpu_type") == "1417\n"
    assert attr(root, "/sys/bus/pci/devices/0000:18:00.6/nvidia/gpu_instance_id") == "3\n"
    no = vgpuadm(root, "create", "--type", "H200X-3-71C", "--vm", "b")
    assert (no.code, no.out) == (4, "")
    assert no.err.splitlines() == [
        "error: 3g.71gb needs slots 0/4; 2 holds 2g.35gb; 5 and 6 hold 1g.18gb",
        "hint: destroy the instances in the way (`vgpuadm mig instances` lists them) or pick another profile",
    ]
    assert (_instances(root), hostdev_keys(root, "b")) == (
        [("1g.18gb", 5, 1), ("1g.18gb", 6, 1), ("2g.35gb", 2, 2)], ["0000:18:00.6"])  # fmt: skip
