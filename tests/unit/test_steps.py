"""Steps are data: exact descriptions, JSON round-trip, plan numbering; the executor's dry-run and dispatch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.errors import UsageError
from vgpuadm.executor import errno_hint, execute, handler_for
from vgpuadm.sim.treestate import tree_state
from vgpuadm.steps import (
    STEP_KINDS,
    Bind,
    ClearVfVgpuType,
    CreateMdev,
    DriversProbe,
    ForgetDrivers,
    Plan,
    RecordDrivers,
    RemoveMdev,
    SetDriverOverride,
    SetNumVfs,
    SetVfVgpuType,
    SetVgpuParams,
    SriovManage,
    Unbind,
    step_from_dict,
)

U = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
EXAMPLES = [
    (CreateMdev("0000:01:00.0", "nvidia-63", U), f"create mdev {U} of type nvidia-63 on 0000:01:00.0"),
    (RemoveMdev("0000:01:00.0", U, "nvidia-63"), f"remove mdev {U} from 0000:01:00.0"),
    (SetVgpuParams("mdev", U, "frame_rate_limiter=0"), f'set vgpu_params of mdev {U} to "frame_rate_limiter=0"'),
    (SetVgpuParams("vf", "0000:18:00.4", "", "disable_vnc=1"), "clear vgpu_params of VF 0000:18:00.4"),
    (SetVfVgpuType("0000:18:00.4", 1420), "set vGPU type 1420 (nvidia-1420) on VF 0000:18:00.4"),
    (ClearVfVgpuType("0000:18:00.4", 1420), "clear vGPU type 1420 (nvidia-1420) from VF 0000:18:00.4"),
    (SetNumVfs("0000:41:00.0", 4, 0), "set sriov_numvfs of 0000:41:00.0 to 4 (was 0)"),
    (SriovManage("0000:18:00.0", True), "run /usr/lib/nvidia/sriov-manage -e 0000:18:00.0"),
    (SetDriverOverride("0000:65:00.0", "vfio-pci"), "set driver_override of 0000:65:00.0 to vfio-pci"),
    (SetDriverOverride("0000:65:00.0", "", "vfio-pci"), "clear driver_override of 0000:65:00.0"),
    (Unbind("0000:65:00.0", "nvidia"), "unbind 0000:65:00.0 from nvidia"),
    (Bind("0000:65:00.1", "snd_hda_intel"), "bind 0000:65:00.1 to snd_hda_intel"),
    (DriversProbe("0000:65:00.0", "vfio-pci"), "probe drivers for 0000:65:00.0 (expect vfio-pci)"),
    (RecordDrivers((("0000:65:00.0", "nvidia"), ("0000:65:00.1", ""))),
     "remember original drivers (0000:65:00.0=nvidia, 0000:65:00.1=none)"),
    (ForgetDrivers((("0000:65:00.0", "nvidia"),)), "forget original drivers of 0000:65:00.0"),
]  # fmt: skip


@pytest.mark.parametrize(("step", "text"), EXAMPLES)
def test_describe_and_json_round_trip(step, text) -> None:  # type: ignore[no-untyped-def]
    assert step.describe() == text
    doc = json.loads(json.dumps(step.to_dict()))
    assert doc["kind"] == step.kind
    assert step_from_dict(doc) == step
    handler_for(step)  # every kernel step has a registered handler


def test_every_kernel_step_kind_is_covered() -> None:
    mine = {type(s).kind for s, _ in EXAMPLES}
    assert mine <= set(STEP_KINDS)
    assert {"create-mdev", "remove-mdev", "set-vgpu-params", "set-vf-vgpu-type", "clear-vf-vgpu-type",
            "set-num-vfs", "sriov-manage", "set-driver-override", "unbind", "bind", "drivers-probe"} <= mine  # fmt: skip


def test_plan_numbering_and_round_trip() -> None:
    plan = Plan.of([s for s, _ in EXAMPLES[:2]], "two")
    assert plan.describe() == [f"step 1/2 {EXAMPLES[0][1]}", f"step 2/2 {EXAMPLES[1][1]}"]
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert Plan().empty and not plan.empty
    assert (plan + Plan.of([EXAMPLES[2][0]], "three")).summary == "two; three"


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(UsageError, match='Unknown step kind "nope" in journal'):
        step_from_dict({"kind": "nope"})


def test_errno_hints() -> None:
    create = EXAMPLES[0][0]
    assert errno_hint(create, 22).startswith("the type is incompatible with what already runs on that GPU")
    assert "vGPU manager" in errno_hint(create, 22)
    assert errno_hint(create, 87).startswith("no instances of that type are left")  # EUSERS
    assert errno_hint(create, 28).startswith("no instances of that type are left")  # ENOSPC
    assert errno_hint(Bind("0000:65:00.0", "vfio-pci"), 16) == "device busy: it already has a driver"
    assert errno_hint(create, None) == ""


def test_dry_run_changes_nothing(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    plan, ids = api.plan_create(api.discover(str(root)), "P4-2Q", 2, params="frame_rate_limiter=0")
    before = tree_state(root)
    result = api.apply(plan, str(root), dry_run=True)
    assert result.dry_run and not result.changed
    assert result.applied == tuple(plan.describe())
    assert tree_state(root) == before
    assert not (root / "run").exists() and not (root / "var").exists()
    assert len(ids) == 2


def test_empty_plan_takes_no_lock(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    sysfs = api.open_sysfs(str(root))
    from vgpuadm.executor import ExecContext

    result = execute(Plan(), ExecContext(sysfs, sysfs.root))
    assert not result.changed
    assert not (root / "run").exists()
