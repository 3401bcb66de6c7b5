"""The pure migration check (plan/migration.py): a running VM must move live unless the operator asks for a stopped
(cold) move; the whole VM moves as its least movable device; each mode answers for its own devices."""

from __future__ import annotations

from vgpuadm.catalog.migration import TargetGpu, TargetHost, board_pair, live_params
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import Allocation
from vgpuadm.plan.migration import check

UUID = "0a0a0a0a-0000-4000-8000-000000000001"
P4 = "0000:01:00.0"


def _target(free: int) -> TargetHost:
    gpu = TargetGpu(P4, "Tesla P4", "0x10de", "0x1bb3", False)
    return TargetHost("gpu2", {P4: gpu}, {"nvidia-63": ("GRID P4-1Q", ((P4, free),))})


def _mdev(params: str | None = None) -> Allocation:
    return Allocation("web01", "mdev", "nvidia-63", P4, UUID, params=params, slot=0)


def test_a_running_vm_with_a_cold_only_device_cannot_move_unless_offline(sim_host) -> None:
    snap = snapshot(Sysfs(str(sim_host("p4"))))
    running = check(snap, "web01", True, [_mdev("enable_debugging=1")], _target(1))
    assert (running.move, running.ok) == ("cold", False)
    offline = check(snap, "web01", True, [_mdev("enable_debugging=1")], _target(1), offline=True)
    assert (offline.move, offline.ok) == ("cold", True)
    live = check(snap, "web01", True, [_mdev("enable_debugging=0")], _target(1))
    assert (live.move, live.ok, live.devices[0].target_gpu) == ("live", True, P4)
    none = check(snap, "web01", True, [_mdev()], _target(0))
    assert (none.move, none.ok, none.devices[0].reasons) == ("no", False, ("no free nvidia-63 on the target",))
    assert check(snap, "idle", False, [], _target(0)).to_json()["move"] == "live"  # nothing recorded is in the way


def test_the_rules_the_modes_share() -> None:
    assert live_params("frame_rate_limiter=0, enable_uvm=0") is None
    assert live_params("enable_profiling=1 enable_uvm=1") == (
        "its vgpu_params enable enable_uvm, enable_profiling: NVIDIA allows no live migration then"
    )
    assert board_pair("H100 PCIe", "H100 NVL") == "a vGPU does not migrate between a H100 PCIe and a H100 NVL"
    assert board_pair("H200 SXM 141GB", "H200 SXM 141GB") is None
    assert board_pair("Tesla T4", "L4") is None  # no published rule: not refused here
