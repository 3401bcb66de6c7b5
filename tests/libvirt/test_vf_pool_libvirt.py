"""SR-IOV VF pools end to end: against a real libvirtd (qemu:///system, the `libvirtd` fixture) create on an Intel
Flex 170 whose VFs are off enables them and gives the domain one VF on vfio-pci (exact hostdev, metadata, sysfs),
destroy gives it back; on libvirt's embedded driver `apply -f` and `restore` after `vgpuadm sim reboot` treat the
pool like any mode. Domains on the daemon are throwaway (unique names, undefined in teardown)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import uuid as uuid_mod
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest
from embedded_host import _env, allocations, define, domain_xml, hostdev_keys, vgpuadm
from lxml import etree

from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import HostBuilder
from vgpuadm.sim.state import load_model
from vgpuadm.sim.tree import PciSpec
from vgpuadm.virt import xml

pytestmark = pytest.mark.libvirt

FLEX = "0000:4d:00.0"
VF1 = "0000:4d:00.1"


@pytest.fixture
def conn(libvirtd: str) -> Iterator[libvirt.virConnect]:
    c = libvirt.open(libvirtd)
    names: list[str] = []
    c.made = names  # type: ignore[attr-defined]
    yield c
    for name in names:
        with contextlib.suppress(libvirt.libvirtError):
            c.lookupByName(name).undefine()
    c.close()


def _sys(root: Path, rel: str) -> str:
    return (root / "sys/bus/pci/devices" / rel).read_text().strip()


def _driver(root: Path, vf: str) -> str | None:
    link = root / "sys/bus/pci/devices" / vf / "driver"
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def test_create_enables_the_pool_and_attaches_one_vf_then_destroy_gives_it_back(sim_host, cli, conn, libvirtd):
    root = sim_host("flex170-vf-pool")
    vm = f"vgpuadm-test-{uuid_mod.uuid4().hex[:10]}-pool"
    conn.defineXML(xml.domain_definition(vm, memory_mib=64))
    conn.made.append(vm)
    r = cli("--root", str(root), "--connect", libvirtd, "create", "--type", "vf-flex170", "--vm", vm)
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == f"attached pool vf-flex170 {VF1} on {FLEX} (to {vm})"
    assert (_sys(root, f"{FLEX}/sriov_numvfs"), _sys(root, f"{FLEX}/sriov_drivers_autoprobe")) == ("31", "0")
    assert (_driver(root, VF1), _sys(root, f"{VF1}/driver_override")) == ("vfio-pci", "vfio-pci")
    assert _driver(root, "0000:4d:00.2") is None  # the other VFs came up with no driver (autoprobe 0)
    doc = etree.fromstring(conn.lookupByName(vm).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).encode(),
                           etree.XMLParser(remove_blank_text=True))  # fmt: skip
    [hd] = doc.findall("devices/hostdev")
    hd.remove(hd.find("address"))  # the guest address libvirt assigns itself
    assert etree.tostring(hd, encoding="unicode") == (
        '<hostdev mode="subsystem" type="pci" managed="no">'
        '<source><address domain="0x0000" bus="0x4d" slot="0x00" function="0x1"/></source></hostdev>'
    )
    meta = conn.lookupByName(vm).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml.NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    meta, stamps = re.subn(r' changed="[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"', "", meta)
    assert stamps == 1  # when the change landed
    assert meta == (
        f'<vgpuadm version="1" host="sim:{root}">\n'
        f'  <device slot="0" mode="pool" type="vf-flex170" parent="{FLEX}" address="{VF1}">\n'
        '    <option name="host_driver" value=""/>\n'
        "  </device>\n"
        "</vgpuadm>"
    )
    r = cli("--root", str(root), "--connect", libvirtd, "destroy", "--vm", vm)
    assert r.code == 0, r.err
    assert (_driver(root, VF1), _sys(root, f"{VF1}/driver_override")) == (None, "(null)")
    assert _sys(root, f"{FLEX}/sriov_numvfs") == "31"  # the pool stays enabled
    doc = etree.fromstring(conn.lookupByName(vm).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).encode())
    assert doc.findall("devices/hostdev") == []


def test_apply_and_restore_after_a_reboot_treat_the_pool_like_any_mode(sim_host, tmp_path: Path) -> None:
    root = sim_host("flex170-vf-pool")  # i915 re-enables VFs through sriov_numvfs (GIM enables them at load instead)
    define(root, "a", "b")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  a:\n    type: vf-flex170\n    count: 2\n  b:\n    type: vf-flex170\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    assert hostdev_keys(root, "a") == ["0000:4d:00.1", "0000:4d:00.2"]
    assert hostdev_keys(root, "b") == ["0000:4d:00.3"]
    assert [a.mode for a in allocations(root, "a")] == ["pool", "pool"]
    again = vgpuadm(root, "apply", "-f", str(plan))
    assert again.code == 0, again.err
    assert hostdev_keys(root, "a") == ["0000:4d:00.1", "0000:4d:00.2"]  # idempotent
    inv = vgpuadm(root, "inventory", "--json")
    assert inv.code == 0, inv.err
    doc = json.loads(inv.out)
    validate("inventory-v1", doc)
    [row] = [t for t in doc["types"] if t["type_id"] == "vf-flex170"]
    assert (row["used"], row["free"], row["max"]) == (3, 28, 31)
    assert sorted((d["id"], d["kind"], d["domain"]) for d in doc["devices"]) == [
        ("0000:4d:00.1", "pool", "a"), ("0000:4d:00.2", "pool", "a"), ("0000:4d:00.3", "pool", "b")]  # fmt: skip
    assert doc["missing"] == []
    res = vgpuadm(root, "sim", "reboot", str(root))
    assert res.code == 0, res.err
    assert not (root / "sys/bus/pci/devices/0000:4d:00.1").exists()
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    assert [_driver(root, f"0000:4d:00.{f}") for f in (1, 2, 3)] == ["vfio-pci"] * 3
    assert _driver(root, "0000:4d:00.4") == "i915"  # autoprobe is 1 again after a reboot: the host driver took it


README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_vf_pool_example_runs_as_written(tmp_path: Path) -> None:
    """The sh block of README's "AMD and Intel SR-IOV GPUs (VF pools)" section, line by line in tmp_path, with its
    exact outputs; web01 is defined by the block's own `virsh -c … define` in the root's embedded driver
    (tests/libvirt/test_readme_examples.py runs the block too)."""
    text = README.read_text()
    section = text.split("## AMD and Intel SR-IOV GPUs (VF pools)", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    root = tmp_path / "flex"
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    statements: list[str] = []
    for line in filter(None, lines):  # a `virsh` statement goes on until the next vgpuadm line
        if line.startswith("vgpuadm") or not statements or not statements[-1].startswith("virsh"):
            statements.append(line)
        else:
            statements[-1] += "\n" + line
    outputs = []
    for line in statements:
        if line.startswith("virsh "):  # the README's own definition of web01 in the root's embedded libvirt
            done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=_env(), timeout=300,
                                  check=False, cwd=tmp_path)  # fmt: skip
            assert done.returncode == 0, done.stderr
            continue
        args = shlex.split(line)
        assert args[0] == "vgpuadm"
        proc = subprocess.run([sys.executable, "-m", "vgpuadm", *args[1:]], capture_output=True, text=True,
                              env=_env({"COLUMNS": "140"}), timeout=300, check=False, cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 0, (line, proc.stderr)
        outputs.append(proc.stdout)
    assert (
        "│ 0000:4d:00.0 │ Data Center GPU Flex 170 │ vf-pool │ vf-flex170 │ Flex170 VF │ 31       │ 31          │ 528             │"
        in outputs[1]
    )
    assert outputs[2].splitlines()[0] == f"attached pool vf-flex170 {VF1} on {FLEX} (to web01)"
    assert _driver(root, VF1) is None
    assert outputs[4].splitlines()[0] == "attached virtio-gl virtio-gl /dev/dri/renderD129 on 0000:4d:00.0 (to web01)"


MI300X = "0000:83:00.0"


def test_mi300x_restore_after_a_reboot_brings_the_gim_pool_back_exactly(sim_host) -> None:
    """GIM enables its VFs when it loads (vf_num; it has no sriov_configure, docs/reference/sriov-gpus.md §2): after
    `vgpuadm sim reboot` the VFs are back unbound, and `restore` binds the recorded ones to vfio-pci again; the
    domains keep their hostdevs; a second restore changes nothing."""
    root = sim_host("mi300x-vf-pool")
    define(root, "a", "b")
    assert vgpuadm(root, "create", "--type", "vf-mi300x", "--vm", "a", "--total", "2").code == 0
    assert vgpuadm(root, "create", "--type", "vf-mi300x", "--vm", "b").code == 0
    before = {vm: (hostdev_keys(root, vm), domain_xml(root, vm)) for vm in ("a", "b")}
    res = vgpuadm(root, "sim", "reboot", str(root))
    assert res.code == 0, res.err
    assert _sys(root, f"{MI300X}/sriov_numvfs") == "8"
    assert [_driver(root, f"0000:83:00.{f}") for f in (1, 2, 3)] == [None, None, None]
    res = vgpuadm(root, "restore")
    assert (res.code, res.err) == (0, "")
    assert res.out.splitlines() == [
        "vfio: set driver_override of 0000:83:00.1 to vfio-pci",
        "vfio: probe drivers for 0000:83:00.1 (expect vfio-pci)",
        "vfio: set driver_override of 0000:83:00.2 to vfio-pci",
        "vfio: probe drivers for 0000:83:00.2 (expect vfio-pci)",
        "vfio: set driver_override of 0000:83:00.3 to vfio-pci",
        "vfio: probe drivers for 0000:83:00.3 (expect vfio-pci)",
        "restored: 6 step(s) for 3 recorded device(s)",
    ]
    assert [_driver(root, f"0000:83:00.{f}") for f in (1, 2, 3, 4)] == ["vfio-pci"] * 3 + [None]
    assert sorted(os.listdir(root / "dev/vfio")) == ["22", "23", "24"]
    assert {vm: (hostdev_keys(root, vm), domain_xml(root, vm)) for vm in ("a", "b")} == before
    state = sorted(p.name for p in (root / "sys/bus/pci/drivers/vfio-pci").iterdir())
    again = vgpuadm(root, "restore")
    assert (again.code, again.out, again.err) == (0, "nothing to restore: all 3 recorded device(s) are in place\n", "")
    assert sorted(p.name for p in (root / "sys/bus/pci/drivers/vfio-pci").iterdir()) == state


def test_a_gim_pool_whose_vfs_are_off_is_one_error_naming_gims_vf_num(sim_host) -> None:
    """GIM loaded without vf_num: its VFs stay off after the reboot, and neither restore, `sriov enable` nor create
    writes sriov_numvfs (ENOENT); each names the module parameter instead, and nothing changes."""
    root = sim_host("mi300x-vf-pool")
    define(root, "a", "b")
    assert vgpuadm(root, "create", "--type", "vf-mi300x", "--vm", "a").code == 0
    (root / "sys/module/gim/parameters/vf_num").write_text("\n")  # `modprobe gim` with no vf_num at the next boot
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert _sys(root, f"{MI300X}/sriov_numvfs") == "0"
    error = f"{MI300X} is driven by gim, which enables its VFs only when it loads (sriov_numvfs cannot: ENOENT)"
    hint = ("hint: reload it with the VF count per GPU: `modprobe -r gim && modprobe gim vf_num=8` (no guest may use "
            "its VFs meanwhile), then run the command again")  # fmt: skip
    res = vgpuadm(root, "restore")
    assert res.code == 3
    assert res.out.splitlines() == [f"sriov: cannot restore: {MI300X}: {error}",
                                    "vfio: cannot restore: a: 0000:83:00.1: VF 0000:83:00.1 does not exist"]  # fmt: skip
    res = vgpuadm(root, "sriov", "enable", MI300X)
    assert (res.code, res.out, res.err.splitlines()) == (2, "", [f"error: {error}", hint])
    assert vgpuadm(root, "destroy", "--vm", "a").code == 0
    res = vgpuadm(root, "create", "--type", "vf-mi300x", "--vm", "b")
    assert (res.code, res.out, res.err.splitlines()) == (2, "", [f"error: {error}", hint])
    assert _sys(root, f"{MI300X}/sriov_numvfs") == "0"
    assert hostdev_keys(root, "b") == []


def test_a_vf_whose_iommu_group_holds_a_host_device_is_refused_like_passthrough(sim_host) -> None:
    """A NIC on i40e in the IOMMU group of the MI300X's first VF (a switch without ACS), laid down with the
    simulator's own builder: create refuses that VF with passthrough's one-line rule and changes nothing."""
    root = sim_host("mi300x-vf-pool")
    h = HostBuilder.attach(str(root), load_model(str(root)))
    h.tree.driver("i40e")
    h.pci(
        PciSpec("0000:84:00.0", "/sys/devices/pci0000:80/0000:80:01.0", "0x8086", "0x1572", "0x020000", "i40e", 22, 1)
    )
    h.finish()
    define(root, "a")
    res = vgpuadm(root, "create", "--type", "vf-mi300x", "--vm", "a")
    assert (res.code, res.out, res.err.splitlines()) == (6, "", [
        "error: IOMMU group 22 of 0000:83:00.1 also holds 0000:84:00.0 (class 0x020000, driver i40e), which the host "
        "uses",
        "hint: give the guest a VF of a GPU whose VFs have IOMMU groups of their own (ACS on the ports above it)",
    ])  # fmt: skip
    assert (_driver(root, "0000:83:00.1"), hostdev_keys(root, "a")) == (None, [])
