"""MIG-backed vGPU on the simulated H200 (layout C): `create --type H200X-1-18C --vm` on GPU instances vgpuadm made,
then `sim reboot` (MIG mode stays, instances and VFs go) and `restore`: the same instances at the same placements,
then the types, each VF back on a GPU instance."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import attr, define, hostdev_keys, vgpuadm

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
