"""The `gpus:` planner (plan/policies.py) on a real discovery of the simulated RTX PRO 6000 with the policies its
nvidia-smi reports: a scheduler change while a VM on the GPU runs is refused (libvirt's embedded driver cannot run a
guest, so the running VM is given as the planner's input); RmPVMRL values as NVIDIA documents them."""

from __future__ import annotations

import dataclasses

import pytest

from vgpuadm import api
from vgpuadm.catalog.hetero import rmpvmrl
from vgpuadm.errors import ConflictError
from vgpuadm.host import hetero as host_hetero
from vgpuadm.host.root import HostRoot
from vgpuadm.plan.policies import GpuSpec, plan_gpus
from vgpuadm.steps import SetVgpuScheduler, WriteManagedFile

GPU = "0000:81:00.0"


def _snap(root):
    snap = api.discover(str(root))
    return dataclasses.replace(snap, policies=host_hetero.read(HostRoot(str(root)), scheduler=True, placements=True))


@pytest.mark.process
def test_scheduler_change_is_refused_while_a_vm_on_the_gpu_runs(sim_host):
    snap = _snap(sim_host("rtxpro6000-mig"))
    spec = {GPU: GpuSpec(GPU, scheduler="equal-share", timeslice_ms=3, line=2)}
    with pytest.raises(ConflictError) as info:
        plan_gpus(snap, spec, {GPU: {"web01"}}, state_text=None, modprobe_text=None, source="plan.yaml")
    assert info.value.message == (
        "plan.yaml:2: gpus.0000:81:00.0: the vGPU scheduler cannot change while a VM on 0000:81:00.0 runs (web01)"
    )
    pp = plan_gpus(snap, spec, {}, state_text=None, modprobe_text=None, source="plan.yaml")
    assert pp.steps[0] == SetVgpuScheduler(GPU, 0, "equal-share", 3, "best-effort", 0)
    assert isinstance(pp.steps[-1], WriteManagedFile) and pp.steps[-1].text == (
        "# written by vgpuadm (`gpus:` in a plan file): the vGPU scheduler per GPU, read when nvidia loads\n"
        'options nvidia NVreg_RegistryDwordsPerDevice="pci=0000:81:00.0;RmPVMRL=0x30001"\n'
    )


@pytest.mark.parametrize(("policy", "ms", "value"), [("best-effort", 0, 0x00), ("equal-share", 0, 0x01),
                         ("equal-share", 3, 0x00030001), ("fixed-share", 0, 0x11), ("fixed-share", 10, 0x000A0011)])  # fmt: skip
def test_rmpvmrl_values(policy, ms, value):
    assert rmpvmrl(policy, ms) == value
