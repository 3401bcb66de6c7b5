"""vgpu_allocation with `gpus:` (the plan file's keys), run ad hoc by real ansible-core on the simulated H200 host
against the real libvirtd: heterogeneous mode and the equal-share scheduler go first, the VM's vGPUs of two sizes get
placement IDs, a rerun is ok, and a bad combination fails with vgpuadm's message before any change."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt
GPUS = {"0000:18:00.0": {"heterogeneous": True, "scheduler": "equal-share", "timeslice_ms": 3}}


def test_gpus_option_sets_policies_then_places_mixed_sizes(ansible_lab: Any) -> None:
    lab = ansible_lab(["gpu-h200"])
    root = lab.root("gpu-h200")
    vm4 = vm8 = lab.vm("infer01")  # the lab host's one VM: it gets both sizes
    first = lab.module("gpu-h200", "vgpu_allocation", {"vm": vm4, "type": "H200X-4C", "count": 2, "gpus": GPUS})
    assert first["changed"] is True, first
    assert first["plan"][:2] == [
        "step 1/9 set the vGPU scheduler of GPU 0000:18:00.0 to equal-share, time slice 3 ms (nvidia-smi -i 0)",
        "step 2/9 enable heterogeneous (mixed-size) vGPU mode on GPU 0000:18:00.0 (nvidia-smi -i 0)",
    ]
    second = lab.module("gpu-h200", "vgpu_allocation", {"vm": vm8, "type": "H200X-8C", "gpus": GPUS})
    assert second["changed"] is True
    assert [d["options"]["placement_id"] for d in first["devices"]] == ["136", "132"]
    # the task names the VM's whole state: its 4 GiB vGPUs go, the 8 GiB one takes the high end
    assert [d["options"]["placement_id"] for d in second["devices"]] == ["128"]
    again = lab.module("gpu-h200", "vgpu_allocation", {"vm": vm8, "type": "H200X-8C", "gpus": GPUS})
    assert again["changed"] is False and again["plan"] == []
    ss = subprocess.run([f"{root}/usr/bin/nvidia-smi", "vgpu", "-ss"], capture_output=True, text=True, check=True)
    assert ss.stdout.splitlines()[2:] == ["        Scheduler Policy                  : Equal Share",
                                          "        Time Slice                        : 3 ms"]  # fmt: skip
    before = tree_state(root)
    bad = lab.module("gpu-h200", "vgpu_allocation", {"vm": vm8, "type": "H200X-8C", "count": 2,
                                                      "gpus": {"0000:18:00.0": {"scheduler": "fixed-share"}}})  # fmt: skip
    assert bad["status"] == "failed" and bad["error"] == "ConflictError"
    assert bad["msg"] == (
        "vgpu_allocation: gpus.0000:18:00.0: fixed-share scheduling does not work with mixed sizes (heterogeneous)"
    )
    assert tree_state(root) == before
