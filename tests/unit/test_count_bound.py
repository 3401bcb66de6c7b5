"""Counts are bounded by what the host could ever hold (issue #20): `mdev create --count`, `create --count` and the
counts of a plan file are refused at once, in one line naming the host's maximum, when they exceed the sum of what
every parent could hold (catalog/capacity.py host_maximum) — not only above the fixed 4096 a command may ask for."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libvirt"))
from embedded_host import define, vgpuadm

from vgpuadm.catalog.capacity import host_maximum
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs

HINT = "hint: ask for what the host can hold: `vgpuadm types --available` lists the free instances"


@pytest.mark.parametrize(
    ("profile", "most"), [("p4", 16), ("t4", 16), ("a100-mdev-vf", 16), ("h200-vendor-vfio", 16), ("mtty", 24)]
)
def test_host_maximum_is_what_the_simulated_kernel_could_hold(
    sim_host: Callable[[str], Path], profile: str, most: int
) -> None:
    assert host_maximum(snapshot(Sysfs(str(sim_host(profile))))) == most


def test_a_count_above_the_host_maximum_is_refused_at_once(cli: Any, sim_host: Callable[[str], Path]) -> None:
    res = cli("--root", str(sim_host("p4")), "mdev", "create", "--type", "P4-1Q", "--count", "17", "--dry-run")
    assert res.code == 4
    assert res.err == f"error: 17 instances are more than this host could ever hold (16 vGPU devices in all)\n{HINT}\n"


@pytest.mark.process
def test_a_vm_count_above_the_host_maximum_is_refused_at_once(sim_host: Callable[[str], Path]) -> None:
    """Through a real (embedded) libvirt domain, in a child process: one embedded driver per process."""
    root = sim_host("p4")
    define(root, "web01")
    res = vgpuadm(root, "create", "--vm", "web01", "--type", "P4-1Q", "--count", "17", "--dry-run")
    assert res.code == 4
    assert res.err == f"error: 17 devices are more than this host could ever hold (16 vGPU devices in all)\n{HINT}\n"


@pytest.mark.process
def test_a_plan_asking_for_more_than_the_host_maximum_is_refused(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    """Per VM, where the plan names the count (a plan's total is bounded by its size and the schema's 64 per VM)."""
    root = sim_host("p4")
    define(root, "vm0")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  vm0:\n    type: P4-1Q\n    count: 17\n")
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert res.code == 4
    assert res.err == (
        "error: plan.yaml:4: vms.vm0.count: 17 instances are more than this host could ever hold (16 vGPU devices "
        f"in all)\n{HINT}\n"
    )
