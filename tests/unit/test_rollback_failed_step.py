"""A failed step is never undone, only the steps before it: the refusal protected something (another VM's mdev
with that UUID, the vGPU on a busy VF). A refused write whose effect is already there exactly counts as done."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.errors import VgpuadmError
from vgpuadm.sim.faults import inject_fault
from vgpuadm.steps import CreateMdev, Plan, SetVfVgpuType

PARENT, OTHER = "0000:01:00.0", "0000:02:00.0"
UUID = "3b3b3b3b-1111-4222-8333-444444444444"
UUID2 = "3b3b3b3b-1111-4222-8333-555555555555"
VF = "0000:18:00.4"


def _mdevs(root: Path) -> dict[str, tuple[str, str]]:
    return {u: (m.parent, m.type_id) for u, m in api.discover(str(root)).mdevs.items()}


def test_create_of_an_existing_uuid_with_another_type_leaves_it(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    api.apply(Plan.of([CreateMdev(PARENT, "nvidia-63", UUID)], "another VM's mdev"), str(root))
    with pytest.raises(VgpuadmError, match="EEXIST"):
        api.apply(Plan.of([CreateMdev(PARENT, "nvidia-64", UUID)], ""), str(root))
    assert _mdevs(root) == {UUID: (PARENT, "nvidia-63")}
    with pytest.raises(VgpuadmError, match="EEXIST"):  # same type, another parent: not the same effect
        api.apply(Plan.of([CreateMdev(OTHER, "nvidia-63", UUID)], ""), str(root))
    assert _mdevs(root) == {UUID: (PARENT, "nvidia-63")}


def test_create_of_an_identical_mdev_counts_as_done(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    api.apply(Plan.of([CreateMdev(PARENT, "nvidia-63", UUID)], ""), str(root))
    api.apply(Plan.of([CreateMdev(PARENT, "nvidia-63", UUID)], ""), str(root))  # EEXIST, identical: success
    assert _mdevs(root) == {UUID: (PARENT, "nvidia-63")}
    # ...and a later failure does not undo it: it was there before this run.
    inject_fault(str(root), f"/sys/class/mdev_bus/{PARENT}/mdev_supported_types/nvidia-63/create", "EIO", after=1)
    plan = Plan.of([CreateMdev(PARENT, "nvidia-63", UUID), CreateMdev(PARENT, "nvidia-63", UUID2)], "")
    with pytest.raises(VgpuadmError, match="EIO"):
        api.apply(plan, str(root))
    assert _mdevs(root) == {UUID: (PARENT, "nvidia-63")}


def test_second_step_fails_first_is_undone_second_never(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    api.apply(Plan.of([CreateMdev(PARENT, "nvidia-63", UUID2)], "another VM's mdev"), str(root))
    plan = Plan.of([CreateMdev(PARENT, "nvidia-63", UUID), CreateMdev(PARENT, "nvidia-64", UUID2)], "")
    with pytest.raises(VgpuadmError, match=r"^step 2/2 .*EEXIST") as info:
        api.apply(plan, str(root))
    assert "rolled back" in (info.value.hint or "")
    assert _mdevs(root) == {UUID2: (PARENT, "nvidia-63")}  # step 1 undone, the other VM's mdev kept


@pytest.mark.process
def test_busy_vf_keeps_its_vgpu(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    api.apply(Plan.of([SetVfVgpuType(VF, 1420)], "another VM's vGPU"), str(root))
    with pytest.raises(VgpuadmError):
        api.apply(Plan.of([SetVfVgpuType(VF, 1421)], ""), str(root))
    assert api.discover(str(root)).vendor_vfs[VF].current_type == 1420
    api.apply(Plan.of([SetVfVgpuType(VF, 1420)], ""), str(root))  # the same type: counts as done
    assert api.discover(str(root)).vendor_vfs[VF].current_type == 1420
