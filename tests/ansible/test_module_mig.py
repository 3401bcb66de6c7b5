"""vgpu_allocation with a MIG-backed type, run ad hoc by real ansible-core against the real libvirtd on the
simulated H200 with MIG mode off (`h200-mig`): check mode shows create's plan (MIG mode on, the GPU instance, the
type) and changes nothing; the task applies it; a rerun is ok; `state: absent` takes the vGPU and the instance
vgpuadm made away again."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from vgpuadm.sim.profiles import build
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt
PF = "0000:18:00.0"


def _instances(root: Any) -> list[tuple[str, int]]:
    out = subprocess.run([f"{root}/usr/bin/nvidia-smi", "mig", "-lgi"], capture_output=True, text=True, check=False)
    return sorted((line.split()[3], int(line.split()[6].split(":")[0])) for line in out.stdout.splitlines()
                  if line.startswith("|") and "MIG" in line)  # fmt: skip


def test_a_mig_backed_type_turns_mig_on_once_and_goes_away_with_its_instance(ansible_lab: Any) -> None:
    lab = ansible_lab(["gpu-h200"])
    root = lab.root("gpu-h200")
    shutil.rmtree(root)
    build("h200-mig", str(root))  # the lab's H200 host, with MIG mode off
    vm = lab.vm("infer01")
    args = {"vm": vm, "type": "H200X-1-18C"}
    before = tree_state(root)
    check = lab.module("gpu-h200", "vgpu_allocation", args, check=True)
    assert check["changed"] is True, check
    assert check["plan"] == [
        f"step 1/4 enable MIG mode on GPU {PF} (nvidia-smi -i 0)",
        f"step 2/4 create MIG GPU instance 1g.18gb (profile 19) at slot 6 on {PF}",
        "step 3/4 set vGPU type 1414 (nvidia-1414) on VF 0000:18:00.4",
        "step 4/4 attach nvidia-1414 0000:18:00.4 to domain " + vm + ", and record 1 vgpuadm device(s) in its metadata",
    ]
    assert tree_state(root) == before
    done = lab.module("gpu-h200", "vgpu_allocation", args)
    assert done["changed"] is True, done
    assert [d["options"] for d in done["devices"]] == [{"mig_instance": "19:6"}]
    xml = subprocess.run([f"{root}/usr/bin/nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True)
    assert "<current_mig>Enabled</current_mig>" in xml.stdout
    assert _instances(root) == [("1g.18gb", 6)]
    after = tree_state(root)
    again = lab.module("gpu-h200", "vgpu_allocation", args)
    assert (again["changed"], again["plan"]) == (False, [])
    assert tree_state(root) == after
    gone = lab.module("gpu-h200", "vgpu_allocation", {**args, "state": "absent"})
    assert gone["changed"] is True, gone
    assert gone["plan"][-1] == f"step 3/3 destroy MIG GPU instance 1 (1g.18gb at slot 6) on {PF}"
    assert (gone["devices"], _instances(root)) == ([], [])
