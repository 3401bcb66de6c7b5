"""The shipped inventory and playbooks, run by real ansible-playbook on four simulated GPU hosts (layouts A, B, C
and whole-GPU passthrough) against the real libvirtd: check mode, diff, idempotence, release, the fleet report,
and a host whose allocation cannot fit."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml

from tests.ansible.lab import URI, Lab, inactive_xml
from vgpuadm.sim.treestate import diff as tree_diff
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import parse_allocations, parse_hostdevs

TASK = "Allocate GPUs to each VM"
RELEASE_TASK = "Release each VM's GPUs"

# What inventory/host_vars declare, as devices per VM: (mode, type id) → count. Passthrough of 0000:65:00.0 gives
# the VM both functions of its IOMMU group (GPU + HD audio).
EXPECTED = {
    "gpu-p4": {"web01": {("mdev", "nvidia-63"): 2}, "web02": {("mdev", "nvidia-63"): 1}},
    "gpu-a100": {"train01": {("mdev", "nvidia-471"): 2}, "train02": {("mdev", "nvidia-471"): 1}},
    "gpu-h200": {"infer01": {("vf", "nvidia-1426"): 3}},
    "gpu-pt": {"render01": {("pci", None): 2}},
}
# The fleet's vGPU use per type once provisioned.
USED = {"nvidia-63": 3, "nvidia-471": 3, "nvidia-1426": 3}

pytestmark = pytest.mark.libvirt


def _state(lab: Lab) -> dict[str, Any]:
    """Everything a change could touch: each host's kernel tree and each VM's persistent domain XML."""
    return {
        **{f"tree:{h}": tree_state(lab.root(h)) for h in lab.hosts},
        **{f"xml:{d}": inactive_xml(d) for d in lab.domains},
    }


def _assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for key in before:
        if key.startswith("tree:"):
            assert tree_diff(before[key], after[key]) == {}, key
        else:
            assert before[key] == after[key], key


def _owned(lab: Lab, host: str) -> dict[str, Counter[tuple[str, str | None]]]:
    return {
        vm: Counter((a.mode, a.type_id) for a in parse_allocations(inactive_xml(lab.vm(vm)))) for vm in EXPECTED[host]
    }


def _read(root: Any, rel: str) -> str:
    return (root / rel).read_text()


def test_inventory_declares_what_the_lane_expects() -> None:
    """EXPECTED above mirrors inventory/host_vars; a changed inventory must change the expectations with it."""
    from tests.ansible.lab import REPO

    for host, vms in EXPECTED.items():
        hv = yaml.safe_load((REPO / "inventory" / "host_vars" / f"{host}.yml").read_text())
        declared = Counter()
        for a in hv["vgpu_allocations"]:
            declared[a["vm"]] += 2 if "passthrough" in a else a.get("count", 1)
        assert declared == Counter({vm: sum(c.values()) for vm, c in vms.items()}), host


def test_check_apply_idempotent_release_and_fleet_report(ansible_lab: Any) -> None:
    lab = ansible_lab()
    hosts = list(lab.hosts)
    assert len(hosts) >= 3
    pristine = _state(lab)

    # 1. check mode: every host would change, nothing changes; the diff predicts the devices.
    run = lab.playbook("provision.yml", check=True, diff=True)
    assert run.rc == 0, run.out
    for host in hosts:
        items = run.items(host, TASK)
        assert [i["changed"] for i in items] == [True] * len(items), host
        for item in items:
            vm = item["vm"][len(lab.prefix) :]
            assert item["diff"]["before"] == {"vm": item["vm"], "devices": []}
            predicted = Counter((d["mode"], d["type_id"]) for d in item["diff"]["after"]["devices"])
            assert predicted == EXPECTED[host][vm], (host, vm)
            assert item["plan"], "check mode reports the plan it would run"
    _assert_same(pristine, _state(lab))

    # 2. apply: every host changes, and the kernel and libvirt now show exactly the declared devices.
    run = lab.playbook("provision.yml", diff=True)
    assert run.rc == 0, run.out
    for host in hosts:
        assert [i["changed"] for i in run.items(host, TASK)] == [True] * len(run.items(host, TASK)), host
        assert _owned(lab, host) == {vm: Counter(c) for vm, c in EXPECTED[host].items()}, host
        for item in run.items(host, TASK):
            assert item["diff"]["after"]["devices"] == item["devices"]
    _assert_kernel_has_the_devices(lab)
    provisioned = _state(lab)

    # 3. check again: nothing to do. 4. apply again: nothing done.
    for check in (True, False):
        run = lab.playbook("provision.yml", check=check, diff=True)
        assert run.rc == 0, run.out
        for host in hosts:
            assert run.changed(host) == 0, (check, host)
            for item in run.items(host, TASK):
                assert item["plan"] == [] and item["diff"]["before"] == item["diff"]["after"]
        _assert_same(provisioned, _state(lab))

    # The fleet report sees every host with its devices.
    fleet = _fleet_report(lab)
    _assert_fleet(fleet, hosts, {h: sum(sum(c.values()) for c in EXPECTED[h].values()) for h in hosts}, USED)

    # 5. release, then release again: the second run changes nothing; the hosts are back to their first state.
    run = lab.playbook("release.yml")
    assert run.rc == 0, run.out
    assert all(run.changed(h) == 1 for h in hosts), run.stats
    run = lab.playbook("release.yml")
    assert run.rc == 0, run.out
    assert all(run.changed(h) == 0 for h in hosts), run.stats
    for host in hosts:
        assert all(not c for c in _owned(lab, host).values()), host
    for name in lab.domains:
        assert parse_hostdevs(inactive_xml(name)) == [], name
    released = _state(lab)
    for host in hosts:
        # mdevs, VF types and vfio binds are gone; the simulated kernel's group counter may have moved on.
        assert not any(k.startswith("sys/bus/mdev/devices/") for k in released[f"tree:{host}"]), host
        assert tree_diff(pristine[f"tree:{host}"], released[f"tree:{host}"]) == {}, host

    fleet = _fleet_report(lab)
    _assert_fleet(fleet, hosts, dict.fromkeys(hosts, 0), dict.fromkeys(USED, 0))


def _assert_kernel_has_the_devices(lab: Lab) -> None:
    p4, a100 = lab.root("gpu-p4"), lab.root("gpu-a100")
    for root, vms in ((p4, ("web01", "web02")), (a100, ("train01", "train02"))):
        for vm in vms:
            for a in parse_allocations(inactive_xml(lab.vm(vm))):
                dev = root / "sys/bus/mdev/devices" / str(a.uuid)
                assert (dev / "mdev_type").resolve().name == a.type_id
                if vm == "web01":
                    assert _read(dev, "nvidia/vgpu_params") == "frame_rate_limiter=0\n"
    for a in parse_allocations(inactive_xml(lab.vm("infer01"))):
        assert _read(lab.root("gpu-h200"), f"sys/bus/pci/devices/{a.address}/nvidia/current_vgpu_type") == "1426\n"
    pt = lab.root("gpu-pt")
    for fn in ("0000:65:00.0", "0000:65:00.1"):
        assert (pt / f"sys/bus/pci/devices/{fn}/driver").resolve().name == "vfio-pci", fn


def _fleet_report(lab: Lab) -> dict[str, Any]:
    run = lab.playbook("fleet-report.yml")
    assert run.rc == 0, run.out
    reports = lab.dir / "lab" / "reports"
    html = (reports / "fleet.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html")
    return dict(json.loads((reports / "fleet.json").read_text()))


def _assert_fleet(fleet: dict[str, Any], hosts: list[str], devices: dict[str, int], used: dict[str, int]) -> None:
    rows = {h["host"]: h for h in fleet["hosts"]}
    assert sorted(rows) == sorted(hosts)
    counts = {h: (rows[h]["devices"], rows[h]["owned"], rows[h]["unowned"], rows[h]["missing"]) for h in hosts}
    assert counts == {h: (devices[h], devices[h], 0, 0) for h in hosts}, fleet["hosts"]
    assert {t["type_id"]: t["used"] for t in fleet["types"] if t["type_id"] in used} == used


def test_allocation_that_cannot_fit_fails_that_host_only(ansible_lab: Any, cli: Any) -> None:
    """gpu-p4 asks for three P4-8Q (one fits per P4, it has two): that host fails with exactly what the vgpuadm
    CLI says for the same request, and nothing changes on it; gpu-h200 in the same run is provisioned."""
    from tests.ansible.lab import REPO

    lab = ansible_lab(["gpu-p4", "gpu-h200"])
    before = _state(lab)
    root = str(lab.root("gpu-p4"))
    r = cli("--root", root, "--connect", URI, "create", "--type", "nvidia-66", "--vm", lab.vm("web01"), "--count", "3")
    assert r.code == 4 and r.err.startswith("error: No room for 3 × nvidia-66"), r.err
    vgpuadm_says = tuple(line.split(": ", 1)[1] for line in r.err.splitlines())
    hv_file = lab.inventory / "host_vars" / "gpu-p4.yml"
    hv = yaml.safe_load(hv_file.read_text())
    hv["vgpu_allocations"] = [{"vm": "web01", "type": "nvidia-66", "count": 3}]
    hv_file.write_text(yaml.safe_dump(hv))
    assert (REPO / "inventory/host_vars/gpu-p4.yml").read_text() != hv_file.read_text()

    for check in (True, False):
        run = lab.playbook("provision.yml", check=check)
        assert run.rc == 2, run.out
        assert run.failed("gpu-p4") == 1 and run.failed("gpu-h200") == 0
        (item,) = run.items("gpu-p4", TASK)
        assert item["failed"] is True and item["changed"] is False
        assert item["error"] == "CapacityError"
        assert (item["msg"], item["hint"]) == vgpuadm_says, "the task carries vgpuadm's own message and hint"
        assert run.changed("gpu-h200") == 1
    after = _state(lab)
    assert tree_diff(before["tree:gpu-p4"], after["tree:gpu-p4"]) == {}
    assert after[f"xml:{lab.vm('web01')}"] == before[f"xml:{lab.vm('web01')}"]
    assert after[f"xml:{lab.vm('infer01')}"] != before[f"xml:{lab.vm('infer01')}"]
