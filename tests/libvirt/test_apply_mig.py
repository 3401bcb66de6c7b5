"""`apply -f` with MIG-backed types on the simulated H200 (`h200-mig`, MIG mode off): the plan is create's — MIG mode
on, the GPU instances where the placement rule puts them, then the types — shown by `--check --diff`, applied once
(a second apply changes nothing), and `--prune` removes the instances vgpuadm made, never one made by hand. A GPU
with a vGPU running cannot turn MIG on: the one line `create` prints, nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define, hostdev_keys, vgpuadm

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

PF = "0000:18:00.0"
PLAN = "vms:\n  web01:\n    type: H200X-1-18C\n    count: 2\n  web02:\n    type: H200X-2-35C\n"


def _instances(root: Path) -> list[tuple[str, int, str | None]]:
    res = vgpuadm(root, "mig", "instances", "--json")
    assert res.code == 0, res.err
    return sorted((i["name"], i["start"], i["made_for"]) for i in json.loads(res.out))


def test_apply_turns_mig_on_makes_the_instances_and_prunes_only_its_own(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("h200-mig")
    define(root, "web01", "web02")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    before = tree_state(root)
    check = vgpuadm(root, "apply", "-f", str(plan), "--check", "--diff")
    assert check.code == 0, check.err
    assert check.out.splitlines() == [
        f"~ gpu {PF}: MIG off → on",
        f"+ gpu {PF}: MIG GPU instance 1g.18gb at slot 6",
        f"+ gpu {PF}: MIG GPU instance 1g.18gb at slot 5",
        f"+ gpu {PF}: MIG GPU instance 2g.35gb at slot 2",
        "+ web01: nvidia-1414 ×2",
        "+ web02: nvidia-1417 ×1",
        "would run 9 step(s); nothing was changed (--check)",
    ]
    assert tree_state(root) == before
    res = vgpuadm(root, "apply", "-f", str(plan), "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["steps"][:4] == [
        f"step 1/9 enable MIG mode on GPU {PF} (nvidia-smi -i 0)",
        f"step 2/9 create MIG GPU instance 1g.18gb (profile 19) at slot 6 on {PF}",
        f"step 3/9 create MIG GPU instance 1g.18gb (profile 19) at slot 5 on {PF}",
        "step 4/9 set vGPU type 1414 (nvidia-1414) on VF 0000:18:00.4",
    ]
    assert _instances(root) == [("1g.18gb", 5, "web01"), ("1g.18gb", 6, "web01"), ("2g.35gb", 2, "web02")]
    assert [a.extra for a in allocations(root, "web01")] == [{"mig_instance": "19:6"}, {"mig_instance": "19:5"}]
    applied = tree_state(root)
    again = vgpuadm(root, "apply", "-f", str(plan))
    assert (again.code, again.out) == (0, "nothing to do: the host matches the plan\n")
    assert tree_state(root) == applied
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "1g.18gb", "--placement", "0").code == 0
    plan.write_text("vms:\n  web01:\n    type: H200X-1-18C\n")
    pruned = vgpuadm(root, "apply", "-f", str(plan), "--prune", "--diff")
    assert pruned.code == 0, pruned.err
    assert [line for line in pruned.out.splitlines() if line.startswith("- ")] == [
        f"- gpu {PF}: MIG GPU instance 1g.18gb at slot 5",
        f"- gpu {PF}: MIG GPU instance 2g.35gb at slot 2",
        "- web01: nvidia-1414 0000:18:00.5",
        "- web02: nvidia-1417 0000:18:00.6",
    ]
    assert _instances(root) == [("1g.18gb", 0, None), ("1g.18gb", 6, "web01")]  # the hand-made one stays
    assert (hostdev_keys(root, "web01"), hostdev_keys(root, "web02")) == (["0000:18:00.4"], [])


def test_apply_cannot_turn_mig_on_while_a_vgpu_runs(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("h200-mig")
    define(root, "ts", "m2")
    assert vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "ts").code == 0
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  m2:\n    type: H200X-1-18C\n")
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (5, "")
    assert res.err.splitlines() == [  # create's words (tests/libvirt/test_create_mig.py)
        f"error: cannot enable MIG mode on {PF}: 1 vGPU runs on it (0000:18:00.4)",
        f"hint: destroy them first (`vgpuadm devices --gpu {PF}` lists them)",
    ]
    assert tree_state(root) == before


def test_a_gpus_section_turning_mig_on_and_a_mig_backed_vm_make_one_mode_change(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    root = sim_host("h200-mig")
    define(root, "web01")
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"gpus:\n  {PF}:\n    mig: {{enabled: true}}\nvms:\n  web01:\n    type: H200X-1-18C\n")
    check = vgpuadm(root, "apply", "-f", str(plan), "--check", "--diff")
    assert check.code == 0, check.err
    assert check.out.splitlines() == [
        f"~ gpu {PF}: MIG off → on",
        f"+ gpu {PF}: MIG GPU instance 1g.18gb at slot 6",
        "+ web01: nvidia-1414 ×1",
        "would run 5 step(s); nothing was changed (--check)",
    ]
    res = vgpuadm(root, "apply", "-f", str(plan), "--json")
    assert res.code == 0, res.err
    assert [line.split(" ", 2)[2] for line in json.loads(res.out)["steps"]] == [
        f"enable MIG mode on GPU {PF} (nvidia-smi -i 0)",
        "write /var/lib/vgpuadm/gpus.json",
        f"create MIG GPU instance 1g.18gb (profile 19) at slot 6 on {PF}",
        "set vGPU type 1414 (nvidia-1414) on VF 0000:18:00.4",
        "attach nvidia-1414 0000:18:00.4 to domain web01, and record 1 vgpuadm device(s) in its metadata",
    ]
    assert _instances(root) == [("1g.18gb", 6, "web01")]
    assert vgpuadm(root, "apply", "-f", str(plan), "--check").out.splitlines() == [
        "nothing to do: the host matches the plan"
    ]
