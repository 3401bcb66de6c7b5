"""Every MIG-backed type on every simulated MIG board (`h200-mig` layout C, `a100d-mig` layout B whose MIG mode needs
a GPU reset, `rtxpro6000-mig` layout C with several vGPUs per instance), through the CLI as a user types it, with the
simulated driver as the oracle: the maximum of each type is created and released and the GPU-instance table is the
starting one again; a mix that does not fit fails before any change; `sim reboot` → `restore` brings back the same
instances (same starts) and the same vGPUs (same VFs, same mdev UUIDs), and a second restore does nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import attr, define, hostdev_keys, mdevs, vgpuadm

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

# board → (PF, MIG-backed types with the most a GPU holds (the simulated driver's maxima, sim/profiles.py))
BOARDS = {
    "h200-mig": ("0000:18:00.0", [("H200X-7-141C", 1), ("H200X-1-18C", 7), ("H200X-1-18CME", 1), ("H200X-1-35C", 4),
                                  ("H200X-2-35C", 3), ("H200X-3-71C", 2), ("H200X-4-71C", 1)]),
    "a100d-mig": ("0000:41:00.0", [("A100D-7-80C", 1), ("A100D-1-10C", 7), ("A100D-1-10CME", 1), ("A100D-1-20C", 4),
                                   ("A100D-2-20C", 3), ("A100D-3-40C", 2), ("A100D-4-40C", 1)]),
    # time-sliced MIG-backed: DC-2-24C, DC-1-12C and DC-1-8C put 2, 2 and 3 vGPUs on one instance
    "rtxpro6000-mig": ("0000:81:00.0", [("DC-4-96C", 1), ("DC-2-48C", 2), ("DC-1-24C", 4), ("DC-2-24C", 4),
                                        ("DC-1-12C", 8), ("DC-1-8C", 12)]),
}  # fmt: skip


def _instances(root: Path) -> list[tuple[str, int, int, int]]:
    """(profile, start, size, vGPUs on it) per GPU instance."""
    res = vgpuadm(root, "mig", "instances", "--json")
    assert res.code == 0, res.err
    return sorted((i["name"], i["start"], i["size"], len(i["vgpus"])) for i in json.loads(res.out))


def _board(sim_host: Callable[[str], Path], profile: str, *vms: str) -> tuple[Path, str]:
    """The board with MIG mode off, or — on the A100D, whose `-mig 1` waits for a GPU reset — on after the reset
    (`nvidia-smi -r`, the simulated driver's)."""
    root = sim_host(profile)
    pf = BOARDS[profile][0]
    define(root, *vms)
    if profile == "a100d-mig":
        assert vgpuadm(root, "mig", "enable", "--gpu", pf).code == 0
        reset = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-r", "-i", "0"], capture_output=True, check=False)
        assert reset.returncode == 0, reset.stderr
    return root, pf


@pytest.mark.parametrize("profile", sorted(BOARDS))
def test_the_maximum_of_each_mig_backed_type_is_made_and_released(
    sim_host: Callable[[str], Path], profile: str
) -> None:
    root, _pf = _board(sim_host, profile, "vm")
    start = _instances(root)
    assert start == []
    for type_name, most in BOARDS[profile][1]:
        res = vgpuadm(root, "create", "--type", type_name, "--count", str(most), "--vm", "vm")
        assert res.code == 0, (type_name, res.err)
        made = _instances(root)
        assert sum(n for *_, n in made) == most, (type_name, made)  # every vGPU sits on an instance
        assert len(hostdev_keys(root, "vm")) == most
        assert len(mdevs(root)) == (most if profile == "a100d-mig" else 0)
        res = vgpuadm(root, "destroy", "--vm", "vm", "--all")
        assert res.code == 0, (type_name, res.err)
        assert (_instances(root), mdevs(root), hostdev_keys(root, "vm")) == (start, [], []), type_name


def test_layout_b_vgpus_made_one_at_a_time_each_get_their_own_instance(sim_host: Callable[[str], Path]) -> None:
    """Layout B mdevs name no GPU instance in sysfs: the planner must learn from the driver (`vgpu -q`) which
    instances the running vGPUs hold, or the second create counts the first one's instance as free and the
    driver refuses its mdev."""
    root, _pf = _board(sim_host, "a100d-mig", "v1", "v2", "v3")
    for vm in ("v1", "v2", "v3"):
        res = vgpuadm(root, "create", "--type", "A100D-1-10C", "--vm", vm)
        assert res.code == 0, (vm, res.err)
    assert _instances(root) == [("1g.10gb", 4, 1, 1), ("1g.10gb", 5, 1, 1), ("1g.10gb", 6, 1, 1)]
    rows = json.loads(vgpuadm(root, "mig", "instances", "--json").out)
    assert sorted((r["start"], r["owner"], r["made_for"], r["state"]) for r in rows) == [
        (4, "v3", "v3", "used"), (5, "v2", "v2", "used"), (6, "v1", "v1", "used")]  # fmt: skip
    assert vgpuadm(root, "destroy", "--vm", "v2", "--all").code == 0
    assert _instances(root) == [("1g.10gb", 4, 1, 1), ("1g.10gb", 6, 1, 1)]


def test_time_sliced_mig_backed_vgpus_share_their_instances(sim_host: Callable[[str], Path]) -> None:
    """RTX PRO 6000: 8 DC-1-12C take the 4 1g.24gb instances, two each, and one more does not fit."""
    root, pf = _board(sim_host, "rtxpro6000-mig", "vm")
    res = vgpuadm(root, "create", "--type", "DC-1-12C", "--count", "8", "--vm", "vm")
    assert res.code == 0, res.err
    assert _instances(root) == [("1g.24gb", s, 1, 2) for s in range(4)]
    vfs = hostdev_keys(root, "vm")
    ids = sorted(attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/gpu_instance_id").strip() for vf in vfs)
    assert ids == ["1", "1", "2", "2", "3", "3", "4", "4"]
    before = tree_state(root)
    more = vgpuadm(root, "create", "--type", "DC-1-12C", "--count", "9", "--vm", "vm")  # 9 in all
    assert (more.code, more.err.splitlines()) == (4, [
        f"error: {pf} holds at most 4 1g.24gb GPU instances (4 exist)",
        "hint: destroy one first (`vgpuadm mig destroy`) or pick a smaller profile",
    ])  # fmt: skip
    assert tree_state(root) == before


MIXES = {  # a plan whose VMs do not fit together, and the one line that says why
    "h200-mig": ({"a": ("H200X-1-18C", 4), "b": ("H200X-3-71C", 2)},
                 "plan.yaml:7: vms.b.count: 3g.71gb needs slots 0/4; 3, 4, 5 and 6 hold 1g.18gb"),
    "a100d-mig": ({"a": ("A100D-2-20C", 2), "b": ("A100D-4-40C", 1)},
                  "plan.yaml:6: vms.b.type: 4g.40gb needs slot 0; 2 holds 2g.20gb"),
    "rtxpro6000-mig": ({"a": ("DC-1-12C", 5), "b": ("DC-2-48C", 2)},
                       "plan.yaml:7: vms.b.count: 2g.48gb needs slots 0/2; 1, 2 and 3 hold 1g.24gb"),
}  # fmt: skip


def _plan(tmp: Path, vms: dict[str, tuple[str, int]]) -> Path:
    text = "vms:\n" + "".join(
        f"  {vm}:\n    type: {t}\n" + (f"    count: {n}\n" if n > 1 else "") for vm, (t, n) in vms.items()
    )
    path = tmp / "plan.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("profile", sorted(MIXES))
def test_a_mix_that_does_not_fit_fails_before_any_change(
    sim_host: Callable[[str], Path], tmp_path: Path, profile: str
) -> None:
    vms, why = MIXES[profile]
    root, _pf = _board(sim_host, profile, *vms)
    plan = _plan(tmp_path, vms)
    before = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (4, "")
    assert res.err.splitlines() == [
        f"error: {why}",
        "hint: destroy the instances in the way (`vgpuadm mig instances` lists them) or pick another profile",
    ]
    assert tree_state(root) == before  # MIG mode included: still off on the H200 and the RTX PRO 6000
    assert all(hostdev_keys(root, vm) == [] for vm in vms)


REBOOT = {  # a mix that fits: VM a and VM b on one GPU
    "h200-mig": {"a": ("H200X-1-18C", 2), "b": ("H200X-2-35C", 1)},
    "a100d-mig": {"a": ("A100D-1-10C", 2), "b": ("A100D-2-20C", 1)},
    "rtxpro6000-mig": {"a": ("DC-1-12C", 3), "b": ("DC-2-48C", 1)},
}


@pytest.mark.parametrize("profile", sorted(REBOOT))
def test_reboot_then_restore_brings_back_the_same_instances_and_vgpus(
    sim_host: Callable[[str], Path], profile: str
) -> None:
    vms = REBOOT[profile]
    root, _pf = _board(sim_host, profile, *vms)
    for vm, (type_name, count) in vms.items():
        res = vgpuadm(root, "create", "--type", type_name, "--count", str(count), "--vm", vm)
        assert res.code == 0, res.err
    instances, devices, uuids = _instances(root), {vm: hostdev_keys(root, vm) for vm in vms}, mdevs(root)
    assert sum(n for *_, n in instances) == sum(n for _, n in vms.values())
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert (_instances(root), mdevs(root)) == ([], [])
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    assert (_instances(root), {vm: hostdev_keys(root, vm) for vm in vms}, mdevs(root)) == (instances, devices, uuids)
    again = vgpuadm(root, "restore")
    assert (again.code, again.out) == (0, f"nothing to restore: all {sum(n for _, n in vms.values())} recorded "
                                          "device(s) are in place\n")  # fmt: skip
