"""What a MIG-backed type needs (catalog/mig.py MigHost.need, plan/devices.py mig_for_vgpus), on the simulated RTX PRO 6000
whose driver lists time-sliced MIG-backed types (`nvidia-smi vgpu -s -v`: GPU Instance Profile ID, Max Instances):
the profile is the driver's, not the name's, and one instance holds maximum / instance count of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.host import mig as host_mig
from vgpuadm.host.root import HostRoot
from vgpuadm.model import Allocation, DeviceMode
from vgpuadm.plan import devices as device_plans
from vgpuadm.steps import CreateGpuInstance, SetMigMode, SetVfVgpuType

pytestmark = pytest.mark.process

PF = "0000:81:00.0"


def test_the_driver_names_the_profile_and_the_vgpus_per_instance(sim_host: Callable[[str], Path]) -> None:
    mig = host_mig.read_host(HostRoot(str(sim_host("rtxpro6000-mig"))))
    needs = {t.name: mig.need(PF, f"nvidia-{t.type_id}", t.name) for t in mig.types[PF]}
    assert needs == {
        "NVIDIA DC-4-96C": ("4g.96gb", 1), "NVIDIA DC-2-48C": ("2g.48gb", 1), "NVIDIA DC-1-24C": ("1g.24gb", 1),
        "NVIDIA DC-2-24C": ("2g.48gb", 2), "NVIDIA DC-1-12C": ("1g.24gb", 2), "NVIDIA DC-1-8C": ("1g.24gb", 3),
        "NVIDIA DC-96C": None, "NVIDIA DC-48C": None, "NVIDIA DC-24C": None, "NVIDIA DC-12C": None,
        "NVIDIA DC-8C": None, "NVIDIA DC-4C": None,
    }  # fmt: skip


def test_three_time_sliced_vgpus_need_two_instances_recorded_on_the_vgpus_they_hold(
    sim_host: Callable[[str], Path],
) -> None:
    root = str(sim_host("rtxpro6000-mig"))
    mig = host_mig.read_host(HostRoot(root))
    snap = device_plans.mig_project(api.discover(root), mig, ["DC-1-12C"])
    vfs = ["0000:81:00.4", "0000:81:00.5", "0000:81:00.6"]
    steps = [SetVfVgpuType(vf, 2004) for vf in vfs]
    added = [Allocation("vm", DeviceMode.VF, "nvidia-2004", vf, address=vf, slot=i) for i, vf in enumerate(vfs)]
    out, recorded, after = device_plans.mig_for_vgpus(snap, mig, steps, added)
    assert out == [SetMigMode(PF, 0, True, effective=True), CreateGpuInstance(PF, 0, "1g.24gb", 14, 3),
                   CreateGpuInstance(PF, 0, "1g.24gb", 14, 2), *steps]  # fmt: skip
    assert [a.extra["mig_instance"] for a in recorded] == ["14:3", "14:3", "14:2"]
    (gpu,) = after.gpus
    assert gpu.enabled and sorted((gi.start, gi.users) for gi in gpu.instances) == [
        (2, ("0000:81:00.6",)), (3, ("0000:81:00.4", "0000:81:00.5"))]  # fmt: skip
