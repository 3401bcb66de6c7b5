"""restore.py (pure): the phases, what each plans from recorded allocations on a rebooted simulated host, that a
restored host plans nothing, and the polling wait (polling.wait_until, no fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.inventory_setup import mig_on
from vgpuadm import modes
from vgpuadm.api import discover
from vgpuadm.model import Allocation
from vgpuadm.plan.restore import PHASES, RESTORE_ORDER, missing_devices, plan_phase
from vgpuadm.polling import wait_until
from vgpuadm.steps import (
    CreateMdev,
    DriversProbe,
    RecordDrivers,
    SetDriverOverride,
    SetNumVfs,
    SetVfVgpuType,
    SriovManage,
    Unbind,
)

VF = "0000:18:00.5"


def test_phase_order_is_driver_sriov_policies_mig_vgpu_params_vfio() -> None:
    assert PHASES == ("driver", "sriov", "policies", "mig", "vgpu", "params", "vfio")


def test_each_mode_names_a_device_phase_and_each_phase_declares_its_host_reads() -> None:
    """A mode's restore_phase is a device phase of the one order (planned by asking the modes); the reads a phase
    needs before it plans are declared with it, not by the caller comparing names."""
    devices = {p.name for p in RESTORE_ORDER if p.build is None}
    assert devices == {"vgpu", "vfio"}
    assert {m.name: m.restore_phase for m in modes.MODES} == {
        "mdev": "vgpu", "vf": "vgpu", "pci": "vfio", "sriov": None, "mig": None, "pool": "vfio", "virtio-gl": None,
    }  # fmt: skip
    reads = {p.name: (p.waits_for_devices, p.reads_mig, p.reads_policies) for p in RESTORE_ORDER}
    assert {k: v for k, v in reads.items() if any(v)} == {
        "policies": (False, False, True), "mig": (False, True, False), "vgpu": (True, False, False),
    }  # fmt: skip


def test_layout_c_needs_sriov_before_types(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    alloc = Allocation("web01", "vf", "nvidia-1420", VF, address=VF, params="enable_uvm=1")
    snap = discover(str(root))
    assert missing_devices([alloc], snap) == []
    assert [plan_phase(p, [alloc], snap, sriov_manage=True).steps for p in PHASES] == [
        [], [], [], [], [SetVfVgpuType(VF, 1420)], [], []
    ]  # fmt: skip
    # VFs gone (sriov_numvfs 0): the PF on the VF's bus gets sriov-manage, nothing else can be planned yet.
    from vgpuadm.sim.reboot import reboot

    reboot(str(root))
    snap = discover(str(root))
    assert missing_devices([alloc], snap) == [VF]
    assert plan_phase("sriov", [alloc], snap, sriov_manage=True).steps == [SriovManage("0000:18:00.0", True)]
    without = plan_phase("sriov", [alloc], snap, sriov_manage=False)
    assert without.steps == [] and "sriov-manage is not installed" in without.problems[0]
    vgpu = plan_phase("vgpu", [alloc], snap)
    assert vgpu.steps == [] and vgpu.problems == (f"web01: VF {VF} does not exist (SR-IOV not enabled on its GPU)",)


@pytest.mark.process
def test_mdev_plans_create_then_params_and_mig_types_are_reported(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    u = "0b0e5a8e-8f6c-5b8e-9d1e-3c2f8a7b6d01"
    allocs = [Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", u, params="frame_rate_limiter=0")]
    snap = discover(str(root))
    assert plan_phase("vgpu", allocs, snap).steps == [CreateMdev("0000:01:00.0", "nvidia-63", u)]
    assert plan_phase("params", allocs, snap).steps == []  # the mdev must exist first
    wrong = [Allocation("x", "mdev", "nvidia-63", "0000:09:00.0", u)]
    assert plan_phase("vgpu", wrong, snap).problems == (f"x: mdev {u} — parent 0000:09:00.0 has not registered",)
    h200_root = sim_host("h200-vendor-vfio")
    mig_on(h200_root)  # the GPU offers nvidia-1414 (H200X-1-18C) only in MIG mode
    h200 = discover(str(h200_root))
    mig = plan_phase("mig", [Allocation("m", "vf", "nvidia-1414", VF, address=VF)], h200)
    # no MIG state handed in (mig_gpus None: nvidia-smi not read): one problem line, no step
    assert mig.steps == [] and mig.problems == ("0000:18:00.0: nvidia-smi reports no GPU 0000:18:00.0",)


def test_vfio_phase_binds_a_passed_through_group_once_and_names_what_cannot_come_back(
    sim_host: Callable[[str], Path],
) -> None:
    """The vfio phase asks each device's mode: a passed-through GPU and its audio function are one group, bound
    once; a function the host lacks and a pool VF whose VFs are off are problems, one line each, naming the domain;
    the pool VF's recorded PF is the one the sriov phase enables."""
    snap = discover(str(sim_host("passthrough")))
    gpu, audio = "0000:65:00.0", "0000:65:00.1"
    allocs = [Allocation("g1", "pci", None, gpu, address=audio, slot=1),
              Allocation("g1", "pci", None, gpu, address=gpu, slot=0),
              Allocation("g2", "pci", None, "0000:66:00.0", address="0000:66:00.0")]  # fmt: skip
    vfio = plan_phase("vfio", allocs, snap)
    assert [u.summary for u in vfio.units] == [f"bind the IOMMU group of {gpu} to vfio-pci"]
    assert vfio.steps == [
        RecordDrivers(((gpu, "nvidia"), (audio, "snd_hda_intel"))),
        Unbind(gpu, "nvidia"), SetDriverOverride(gpu, "vfio-pci"), DriversProbe(gpu, "vfio-pci"),
        Unbind(audio, "snd_hda_intel"), SetDriverOverride(audio, "vfio-pci"), DriversProbe(audio, "vfio-pci"),
    ]  # fmt: skip
    assert vfio.problems == ("g2: PCI function 0000:66:00.0 does not exist",)
    assert [plan_phase(p, allocs, snap).steps for p in PHASES if p != "vfio"] == [[]] * 6
    pool_snap = discover(str(sim_host("uhd770-vf-pool")))
    pool = Allocation("g3", "pool", "xe-vf", "0000:00:02.0", address="0000:00:02.1")
    assert missing_devices([pool], pool_snap) == ["0000:00:02.1"]
    assert plan_phase("sriov", [pool], pool_snap).steps == [SetNumVfs("0000:00:02.0", 7, 0)]
    assert plan_phase("vfio", [pool], pool_snap).problems == ("g3: 0000:00:02.1: VF 0000:00:02.1 does not exist",)


def test_wait_until_polls_until_done_or_timeout() -> None:
    calls: list[int] = []

    def probe() -> int:
        calls.append(1)
        return len(calls)

    assert wait_until(probe, lambda n: n >= 3, timeout=5) == 3
    start = time.monotonic()
    assert wait_until(lambda: 0, lambda n: n > 0, timeout=0.2) == 0  # gives up, returns the last result
    assert 0.2 <= time.monotonic() - start < 2
