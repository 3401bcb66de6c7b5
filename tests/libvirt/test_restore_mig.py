"""MIG-backed vGPU on the simulated H200 (layout C): `create --type H200X-1-18C --vm` on GPU instances vgpuadm made,
then `sim reboot` (MIG mode stays, instances and VFs go) and `restore`: the same instances at the same placements,
then the types, each VF back on a GPU instance."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, attr, define, hostdev_keys, vgpuadm

pytestmark = pytest.mark.libvirt

PF = "0000:18:00.0"


def _instances(root: Path) -> list[tuple[str, int, int]]:
    res = vgpuadm(root, "mig", "instances", "--json")
    assert res.code == 0, res.err
    return sorted((i["name"], i["start"], i["size"]) for i in json.loads(res.out))


def test_reboot_then_restore_brings_back_the_instances_and_the_vgpus(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-mig")
    assert vgpuadm(root, "mig", "enable", "--gpu", PF).code == 0
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "1g.18gb", "--count", "2").code == 0
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "2g.35gb").code == 0
    before = _instances(root)
    assert before == [("1g.18gb", 5, 1), ("1g.18gb", 6, 1), ("2g.35gb", 2, 2)]
    define(root, "mig01")
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "2", "--vm", "mig01")
    assert res.code == 0, res.err
    vfs = hostdev_keys(root, "mig01")
    assert len(vfs) == 2
    assert sorted(attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/gpu_instance_id") for vf in vfs) == ["1\n", "2\n"]
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert _instances(root) == []
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == f"sriov: run /usr/lib/nvidia/sriov-manage -e {PF}"
    assert lines[1:3] == [f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot 6 on {PF}",
                          f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot 5 on {PF}"]  # fmt: skip
    assert _instances(root) == [("1g.18gb", 5, 1), ("1g.18gb", 6, 1)]  # the 2g.35gb no VM used is not remade
    for vf in vfs:
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1414\n"
    assert sorted(attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/gpu_instance_id") for vf in vfs) == ["1\n", "2\n"]
    again = vgpuadm(root, "restore")
    assert (again.code, [x for x in again.out.splitlines() if x.startswith("mig:")]) == (0, [])


def test_create_plans_the_gpu_instances_a_mig_backed_type_needs(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-mig")
    assert vgpuadm(root, "mig", "enable", "--gpu", PF).code == 0
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "1g.18gb", "--placement", "0").code == 0
    define(root, "mig02")
    dry = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "3", "--vm", "mig02", "--dry-run")
    assert dry.code == 0, dry.err
    assert _instances(root) == [("1g.18gb", 0, 1)]  # a dry run changes nothing
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "3", "--vm", "mig02")
    assert res.code == 0, res.err
    # one free instance existed: two more are made where they keep larger profiles possible (slot 0 already rules
    # out 4g.71gb and 7g.141gb; 1 and 3 keep 3g.71gb at 4–7)
    assert _instances(root) == [("1g.18gb", 0, 1), ("1g.18gb", 1, 1), ("1g.18gb", 3, 1)]
    vfs = hostdev_keys(root, "mig02")
    assert sorted(attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/gpu_instance_id") for vf in vfs) == [
        "1\n",
        "2\n",
        "3\n",
    ]
    nothing = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "3", "--vm", "mig02")
    assert nothing.code == 0 and _instances(root) == [("1g.18gb", 0, 1), ("1g.18gb", 1, 1), ("1g.18gb", 3, 1)]


def test_restore_puts_each_recorded_instance_back_at_its_start_or_says_why_not(
    sim_host: Callable[[str], Path],
) -> None:
    """The instances `create` made are recorded (profile id:start); after a reboot restore makes them at those
    starts, not where the placement rule would put them now. A start that is taken since is one line naming the
    domain, and nothing is done on that GPU: no instance, no vGPU type."""
    root = sim_host("h200-mig")
    define(root, "m5")
    assert vgpuadm(root, "mig", "enable", "--gpu", PF).code == 0
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "1g.18gb", "--placement", "0").code == 0
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--count", "3", "--vm", "m5")
    assert res.code == 0, res.err
    assert _instances(root) == [("1g.18gb", 0, 1), ("1g.18gb", 1, 1), ("1g.18gb", 3, 1)]
    assert sorted(a.extra.get("mig_instance", "") for a in allocations(root, "m5")) == ["", "19:1", "19:3"]
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    # the two recorded at their starts; the vGPU that sat on the hand-made one gets one where the rule puts it
    assert [x for x in res.out.splitlines() if x.startswith("mig:")] == [
        f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot 1 on {PF}",
        f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot 3 on {PF}",
        f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot 2 on {PF}",
    ]
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert vgpuadm(root, "mig", "create", "--gpu", PF, "--profile", "2g.35gb", "--placement", "2").code == 0
    vfs = hostdev_keys(root, "m5")
    res = vgpuadm(root, "restore")
    assert res.code == 3
    assert res.err.splitlines()[0] == (
        "error: 1 device(s) could not be restored: mig: domain m5: GPU instance 1g.18gb recorded at slot 3 on "
        f"{PF}: 1g.18gb needs slot 3; 2 holds 2g.35gb (destroy what is in the way with `vgpuadm mig destroy`, or "
        "`vgpuadm destroy --vm m5` and create its vGPUs again)"
    )
    assert _instances(root) == [("2g.35gb", 2, 2)]
    assert [attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") for vf in vfs] == ["0\n"] * 3
