"""VF pools and virtio-gl through Ansible: real ansible-core runs the collection's vgpu_allocation module (ad hoc,
then inventory/provision.yml and release.yml) on a simulated Intel Flex 170 host (layout vf-pool, render node
renderD129) against the real libvirtd: check mode changes nothing, apply gives the VM a VF on vfio-pci and a
virtio-gpu, a rerun is ok, absent takes each back. The host is added to a copy of inventory/ for this test only
(the main playbook lane keeps its four hosts)."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.lab import REPO, Lab, ansible_env, inactive_xml
from vgpuadm.sim.profiles import build
from vgpuadm.sim.treestate import diff as tree_diff
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import domain_definition, parse_allocations, parse_hostdevs

pytestmark = pytest.mark.libvirt

HOST = "gpu-flex"
FLEX = "0000:4d:00.0"
VF1 = "0000:4d:00.1"
HOST_VARS = {
    "vgpuadm_profile": "flex170-vf-pool",
    "vgpu_allocations": [{"vm": "cad01", "type": "vf-flex170", "count": 1}, {"vm": "viz01", "virtio_gl": True}],
}


@pytest.fixture
def flex_lab(tmp_path: Path, libvirtd: str) -> Iterator[Lab]:
    import libvirt

    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory", inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["gpu_hosts"]["hosts"][HOST] = None
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "host_vars" / f"{HOST}.yml").write_text(yaml.safe_dump(HOST_VARS))
    lab = Lab(tmp_path, inventory, f"vgt{uuid.uuid4().hex[:6]}-", {HOST: HOST_VARS}, ansible_env(tmp_path))
    build("flex170-vf-pool", str(lab.root(HOST)))
    conn = libvirt.open(libvirtd)
    for vm in ("cad01", "viz01"):
        conn.defineXML(domain_definition(lab.vm(vm), memory_mib=64, vnc=False))
        lab.domains.append(lab.vm(vm))
    yield lab
    for name in lab.domains:
        with contextlib.suppress(libvirt.libvirtError):
            conn.lookupByName(name).undefine()
    conn.close()


def _driver(root: Path, bdf: str) -> str | None:
    link = root / "sys/bus/pci/devices" / bdf / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def _video(vm: str) -> list[str]:
    from lxml import etree

    doc = etree.fromstring(inactive_xml(vm).encode())
    return [m.get("type") for m in doc.findall("devices/video/model")]


def test_module_gives_and_takes_a_pool_vf_and_virtio_gl(flex_lab: Lab) -> None:
    lab, root, vm = flex_lab, flex_lab.root(HOST), flex_lab.vm("cad01")

    def alloc(check: bool = False, **args: Any) -> dict[str, Any]:
        return lab.module(HOST, "vgpu_allocation", {"vm": vm, **args}, check=check, diff=True)

    pristine, xml, video = tree_state(root), inactive_xml(vm), _video(vm)
    assert video == []  # the lab's domains have no <video>: taking the virtio-gpu back leaves none
    would = alloc(check=True, type="vf-flex170", virtio_gl=True)
    assert (would["status"], would["changed"]) == ("changed", True)
    assert [(d["mode"], d["type_id"], d["address"]) for d in would["diff"]["after"]["devices"]] == [
        ("pool", "vf-flex170", VF1), ("virtio-gl", "virtio-gl", None)]  # fmt: skip
    assert tree_diff(pristine, tree_state(root)) == {} and inactive_xml(vm) == xml

    made = alloc(type="vf-flex170", virtio_gl=True)
    assert (made["status"], made["changed"]) == ("changed", True)
    assert made["devices"] == would["diff"]["after"]["devices"]
    assert [(a.mode, a.address, a.extra.get("rendernode")) for a in parse_allocations(inactive_xml(vm))] == [
        ("pool", VF1, None), ("virtio-gl", None, "/dev/dri/renderD129")]  # fmt: skip
    assert (_driver(root, VF1), (root / f"sys/bus/pci/devices/{FLEX}/sriov_numvfs").read_text()) == ("vfio-pci", "31\n")
    assert [h.key for h in parse_hostdevs(inactive_xml(vm))] == [VF1] and _video(vm) == ["virtio"]

    for check in (True, False):  # idempotent, in check mode and not, with virtio_gl given or left out
        for args in ({"virtio_gl": True}, {}):
            again = alloc(check=check, type="vf-flex170", **args)
            assert (again["status"], again["changed"], again["plan"]) == ("ok", False, [])

    only_gl = alloc(virtio_gl=True, state="absent")
    assert (only_gl["changed"], [d["mode"] for d in only_gl["devices"]]) == (True, ["pool"])
    assert _video(vm) == video and _driver(root, VF1) == "vfio-pci"
    back = alloc(virtio_gl=True)  # virtio_gl alone keeps the VM's VF
    assert (back["changed"], [d["mode"] for d in back["devices"]]) == (True, ["pool", "virtio-gl"])
    assert alloc(virtio_gl=True)["changed"] is False

    gone = alloc(state="absent")
    assert (gone["changed"], gone["devices"]) == (True, [])
    assert parse_allocations(inactive_xml(vm)) == [] and parse_hostdevs(inactive_xml(vm)) == []
    assert _driver(root, VF1) is None and _video(vm) == video
    assert alloc(state="absent")["changed"] is False


def test_provision_and_release_playbooks_with_a_pool_and_virtio_gl(flex_lab: Lab) -> None:
    lab, root = flex_lab, flex_lab.root(HOST)
    pristine = tree_state(root)
    task = "Allocate GPUs to each VM"
    run = lab.playbook("provision.yml", check=True, diff=True)
    assert run.rc == 0, run.out
    assert [i["changed"] for i in run.items(HOST, task)] == [True, True]
    assert tree_diff(pristine, tree_state(root)) == {}
    run = lab.playbook("provision.yml", diff=True)
    assert run.rc == 0, run.out
    assert [[(d["mode"], d["type_id"]) for d in i["devices"]] for i in run.items(HOST, task)] == [
        [("pool", "vf-flex170")], [("virtio-gl", "virtio-gl")]]  # fmt: skip
    assert _driver(root, VF1) == "vfio-pci" and _video(lab.vm("viz01")) == ["virtio"]
    provisioned = tree_state(root)
    for check in (True, False):
        run = lab.playbook("provision.yml", check=check)
        assert (run.rc, run.changed(HOST)) == (0, 0), run.out
    assert tree_diff(provisioned, tree_state(root)) == {}
    run = lab.playbook("release.yml")
    assert (run.rc, run.changed(HOST)) == (0, 1), run.out
    assert lab.playbook("release.yml").changed(HOST) == 0
    assert [parse_allocations(inactive_xml(lab.vm(v))) for v in ("cad01", "viz01")] == [[], []]
    assert _driver(root, VF1) is None and _video(lab.vm("viz01")) == []
