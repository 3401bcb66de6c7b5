"""The guest commands against a real libvirtd (qemu:///system, started by the `libvirtd` fixture) and simulated host
roots: exact hostdev elements and vgpuadm metadata in XMLDesc(VIR_DOMAIN_XML_INACTIVE), exact sysfs state, and
nothing left behind when a step fails. Domains are throwaway (unique names, undefined in teardown)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.virt import xml

pytestmark = pytest.mark.libvirt

SCHEMA = "/usr/share/libvirt/schemas/domain.rng"


@pytest.fixture
def domain(daemon_domain: Callable[..., str]) -> Callable[..., str]:
    """A throwaway diskless domain (tests/conftest.py daemon_domain); returns its unique name."""
    return daemon_domain


def inactive_xml(conn: libvirt.virConnect, name: str) -> str:
    return str(conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def hostdevs(conn: libvirt.virConnect, name: str) -> list[str]:
    """The domain's hostdev elements as libvirt stores them, minus the guest address libvirt assigns itself."""
    parser = etree.XMLParser(remove_blank_text=True)
    doc = etree.fromstring(inactive_xml(conn, name).encode(), parser)
    out = []
    for hd in doc.findall("devices/hostdev"):
        addr = hd.find("address")
        if addr is not None and hd.get("type") == "mdev":
            hd.remove(addr)
        out.append(etree.tostring(hd, encoding="unicode"))
    return out


def metadata(conn: libvirt.virConnect, name: str) -> str | None:
    try:
        return str(conn.lookupByName(name).metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml.NS,
                                                    libvirt.VIR_DOMAIN_AFFECT_CONFIG))  # fmt: skip
    except libvirt.libvirtError:
        return None


def mdevs(root: Path) -> list[str]:
    d = root / "sys/bus/mdev/devices"
    return sorted(os.listdir(d)) if d.is_dir() else []


def expected_uuid(root: Path, conn: libvirt.virConnect, name: str, slot: int) -> str:
    return device_uuid(HostRoot(str(root)).machine_id(), conn.lookupByName(name).UUIDString(), slot)


def test_create_attaches_and_records(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    r = cli("--root", str(root), "--connect", libvirtd, "create", "--type", "nvidia-63", "--vm", vm)
    assert r.code == 0, r.err
    u = expected_uuid(root, conn, vm, 0)
    assert r.out.splitlines()[0] == f"attached mdev nvidia-63 {u} on 0000:01:00.0 (to {vm})"
    assert mdevs(root) == [u]
    assert os.readlink(root / f"sys/bus/mdev/devices/{u}/mdev_type").endswith("/nvidia-63")
    assert hostdevs(conn, vm) == [
        '<hostdev mode="subsystem" type="mdev" managed="no" model="vfio-pci" display="off">'
        f'<source><address uuid="{u}"/></source></hostdev>'
    ]
    meta, stamps = re.subn(r' changed="[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"', "", metadata(conn, vm))
    assert stamps == 1  # when the change landed
    assert meta == (
        f'<vgpuadm version="1" host="sim:{root}">\n'
        f'  <device slot="0" mode="mdev" type="nvidia-63" parent="0000:01:00.0" uuid="{u}">\n'
        '    <option name="display" value="off"/>\n'
        "  </device>\n"
        "</vgpuadm>"
    )
    assert [(a.slot, a.uuid, a.type_id) for a in xml.parse_allocations(inactive_xml(conn, vm))] == [(0, u, "nvidia-63")]


def test_create_twice_makes_one_device_and_count_adds(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain(vnc=True)
    base = ("--root", str(root), "--connect", libvirtd, "create", "--type", "nvidia-63", "--vm", vm)
    assert cli(*base).code == 0
    again = cli(*base)
    assert (again.code, again.out) == (0, f"nothing to do: domain {vm} already has 1 × nvidia-63\n")
    assert len(mdevs(root)) == 1
    two = cli(*base, "--count", "3", "--display", "on", "--ramfb", "--param", "frame_rate_limiter=0")
    assert (two.code, two.err.splitlines()[0]) == (
        2,
        f"error: domain {vm} would have 2 vGPUs with ramfb on; libvirt allows one",
    )  # libvirt refuses that definition; an attach-device --config per device used to let it through
    assert len(mdevs(root)) == 1
    more = cli(*base, "--count", "2", "--display", "on", "--ramfb", "--param", "frame_rate_limiter=0")
    assert more.code == 0, more.err
    more = cli(*base, "--count", "3", "--display", "on", "--param", "frame_rate_limiter=0")
    assert more.code == 0, more.err
    uuids = [expected_uuid(root, conn, vm, s) for s in range(3)]
    assert mdevs(root) == sorted(uuids)
    allocs = xml.parse_allocations(inactive_xml(conn, vm))
    assert [(a.slot, a.uuid, a.params, a.extra) for a in allocs] == [
        (0, uuids[0], None, {"display": "off"}),
        (1, uuids[1], "frame_rate_limiter=0", {"display": "on", "ramfb": "on"}),
        (2, uuids[2], "frame_rate_limiter=0", {"display": "on"}),
    ]
    assert (root / f"sys/bus/mdev/devices/{uuids[1]}/nvidia/vgpu_params").read_text() == "frame_rate_limiter=0\n"
    shown = {h.split('uuid="')[1][:36]: h.split(">")[0] for h in hostdevs(conn, vm)}
    assert (
        shown[uuids[1]] == '<hostdev mode="subsystem" type="mdev" managed="no" model="vfio-pci" display="on" ramfb="on"'
    )


def test_destroy_all_detaches_removes_and_clears_metadata(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    assert (
        cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--count", "2").code == 0
    )
    r = cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--all")
    assert r.code == 0, r.err
    assert (mdevs(root), hostdevs(conn, vm), metadata(conn, vm)) == ([], [], None)
    again = cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--all")
    assert (again.code, again.out) == (0, f"nothing to do: domain {vm} owns no vgpuadm devices\n")


def test_destroy_one_uuid_keeps_the_other(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    assert (
        cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--count", "2").code == 0
    )
    u0, u1 = (expected_uuid(root, conn, vm, s) for s in (0, 1))
    assert cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--uuid", u0).code == 0
    assert mdevs(root) == [u1]
    assert [a.uuid for a in xml.parse_allocations(inactive_xml(conn, vm))] == [u1]
    assert [h.split('uuid="')[1][:36] for h in hostdevs(conn, vm)] == [u1]


def test_destroy_refuses_a_device_another_domain_uses(sim_host, cli, conn, domain, libvirtd):
    root, vm, other = sim_host("p4"), domain(), domain("web02")
    assert cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm).code == 0
    u = expected_uuid(root, conn, vm, 0)
    conn.lookupByName(other).attachDeviceFlags(xml.mdev_hostdev(u), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    before = inactive_xml(conn, vm)
    r = cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--all")
    assert r.code == 5
    assert r.err.splitlines() == [
        f"error: mdev {u} (nvidia-63) is also used by domain {other}",
        f"hint: if one of {vm} and {other} is a copy of the other, drop the copy's claim with "
        "`vgpuadm destroy --vm COPY --forget` (the device and the other VM stay as they are)",
    ]
    assert (mdevs(root), inactive_xml(conn, vm)) == ([u], before)


def test_display_on_without_graphics_is_refused_before_any_change(sim_host, cli, conn, domain, libvirtd):
    """display=on needs a <graphics> device and the domain has none: libvirt would refuse the attach after the mdev
    was created, so the planner refuses first and nothing runs. (A failed attach rolling back the new mdev is
    test_running_domain_refuses_hotplug_and_leaves_nothing.)"""
    root, vm = sim_host("p4"), domain()
    before = inactive_xml(conn, vm)
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--display", "on")
    assert r.code == 2
    assert r.err.splitlines() == [
        f"error: domain {vm} has no <graphics> device, which a vGPU with display on needs",
        f"hint: add one (virsh edit {vm}, then <graphics type='vnc'/> or <graphics type='spice'/> under <devices>), "
        "or use --display off",
    ]
    assert (mdevs(root), inactive_xml(conn, vm), metadata(conn, vm)) == ([], before, None)
    assert not (root / "var/lib/vgpuadm/journal.json").exists()


def test_foreign_hostdev_with_the_derived_uuid_is_refused_before_any_change(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    u = expected_uuid(root, conn, vm, 0)
    conn.lookupByName(vm).attachDeviceFlags(xml.mdev_hostdev(u), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    before = inactive_xml(conn, vm)
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm)
    assert r.code == 5
    assert r.err.splitlines()[0] == (
        f"error: domain {vm} already has a hostdev for mdev {u} that its vgpuadm metadata does not record"
    )
    assert (mdevs(root), inactive_xml(conn, vm)) == ([], before)


def test_running_domain_refuses_hotplug_and_leaves_nothing(sim_host, cli, conn, domain, libvirtd):
    """A diskless domain runs under TCG; libvirtd cannot hot-plug an mdev that does not exist in the real /sys."""
    root, vm = sim_host("p4"), domain(machine="pc")
    conn.lookupByName(vm).create()
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm)
    assert r.code == 5
    first, hint = r.err.splitlines()
    assert (
        first.startswith("error: step 2/2 attach mdev ")
        and f"domain '{vm}' is running and libvirt cannot hot-plug" in first
    )
    assert hint == (
        f"hint: shut it down (virsh -c {libvirtd} shutdown {vm}) and run the command again; nothing was changed "
        "(the earlier steps were rolled back)"
    )
    assert (mdevs(root), hostdevs(conn, vm), metadata(conn, vm)) == ([], [], None)


def test_unknown_vm_and_injection_attempt(sim_host, cli, conn, libvirtd):
    root = sim_host("p4")
    names = ("nope-vgpuadm-test", "web01'/><disk type='file'")
    for name in names:
        r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", name)
        assert r.code == 3
        assert r.err.splitlines() == [
            f"error: No domain named '{name}'",
            f"hint: list the domains with `virsh -c {libvirtd} list --all`",
        ]
    # No domain came into being (other tests define and undefine their own domains meanwhile, so only these names
    # are checked, not the whole list).
    assert not [d.name() for d in conn.listAllDomains() if d.name() in names or "<disk" in d.name()]
    assert mdevs(root) == []


def test_unknown_type_and_type_the_gpu_cannot_host(sim_host, cli, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-999", "--vm", vm)
    assert r.code == 3 and r.err.startswith('error: Unknown type "nvidia-999"')
    assert cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm,
               "--gpu", "0000:01:00.0").code == 0  # fmt: skip
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-64", "--vm", vm, "--gpu", "0000:01:00.0")
    assert r.code == 4, r.err
    assert len(r.err.splitlines()) == 2 and r.err.startswith("error: ")
    assert len(mdevs(root)) == 1


def test_params_with_xml_metacharacters_stay_escaped(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    nasty = "frame_rate_limiter='\"<>&"
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--param", nasty)
    assert r.code == 0, r.err
    doc = etree.fromstring(inactive_xml(conn, vm).encode())
    assert etree.RelaxNG(etree.parse(SCHEMA)).validate(doc)
    assert [a.params for a in xml.parse_allocations(inactive_xml(conn, vm))] == [nasty]
    assert len(doc.findall("devices/hostdev")) == 1 and doc.find("devices/disk") is None


def test_passthrough_binds_group_and_attaches_one_multifunction_slot(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("passthrough"), domain()
    r = cli("--root", str(root), "-c", libvirtd, "passthrough", "--gpu", "0000:65:00.0", "--vm", vm)
    assert r.code == 0, r.err
    for fn in ("0000:65:00.0", "0000:65:00.1"):
        assert os.path.basename(os.readlink(root / f"sys/bus/pci/devices/{fn}/driver")) == "vfio-pci"
    assert hostdevs(conn, vm) == [
        '<hostdev mode="subsystem" type="pci" managed="yes"><driver name="vfio"/><source>'
        f'<address domain="0x0000" bus="0x65" slot="0x00" function="0x{f}"/></source>'
        f'<address type="pci" domain="0x0000" bus="0x00" slot="0x10" function="0x{f}"{mf}/></hostdev>'
        for f, mf in (("0", ' multifunction="on"'), ("1", ""))
    ]
    allocs = xml.parse_allocations(inactive_xml(conn, vm))
    assert [(a.slot, a.mode, a.parent, a.address, a.extra.get("host_driver")) for a in allocs] == [
        (0, "pci", "0000:65:00.0", "0000:65:00.0", "nvidia"),
        (1, "pci", "0000:65:00.0", "0000:65:00.1", "snd_hda_intel"),
    ]
    other = domain("db01")
    r = cli("--root", str(root), "-c", libvirtd, "passthrough", "--gpu", "65:00.0", "--vm", other)
    assert r.code == 5 and r.err.startswith(f"error: 0000:65:00.0 is already given to domain {vm}")

    r = cli("--root", str(root), "-c", libvirtd, "release", "--gpu", "0000:65:00.0")
    assert r.code == 0, r.err
    assert (hostdevs(conn, vm), metadata(conn, vm)) == ([], None)
    assert os.path.basename(os.readlink(root / "sys/bus/pci/devices/0000:65:00.0/driver")) == "nvidia"
    assert os.path.basename(os.readlink(root / "sys/bus/pci/devices/0000:65:00.1/driver")) == "snd_hda_intel"


def test_dry_run_changes_nothing(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("p4"), domain()
    before = inactive_xml(conn, vm)
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "P4-1Q", "--vm", vm, "--dry-run")
    u = expected_uuid(root, conn, vm, 0)
    assert r.code == 0
    assert r.out.splitlines() == [
        f"would give domain {vm} 1 × nvidia-63:",
        f"  step 1/2 create mdev {u} of type nvidia-63 on 0000:01:00.0",
        f"  step 2/2 attach mdev {u} (nvidia-63) to domain {vm}, and record 1 vgpuadm device(s) in its metadata",
    ]
    assert (mdevs(root), inactive_xml(conn, vm)) == ([], before)


def test_layout_c_vf_is_attached_unmanaged_and_cleared_on_destroy(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("h200-vendor-vfio"), domain()
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "H200X-4C", "--vm", vm, "--json")
    assert r.code == 0, r.err
    [added] = json.loads(r.out)["added"]
    vf = added["address"]
    assert (added["mode"], added["type_id"]) == ("vf", "nvidia-1420")
    assert (root / f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type").read_text() == "1420\n"
    [hd] = etree.fromstring(inactive_xml(conn, vm).encode()).findall("devices/hostdev")
    assert (hd.get("mode"), hd.get("type"), hd.get("managed"), hd.find("driver")) == ("subsystem", "pci", "no", None)
    assert [(r.kind, r.key) for r in xml.parse_hostdevs(inactive_xml(conn, vm))] == [("pci", vf)]
    assert cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--uuid", vf).code == 0
    assert (root / f"sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type").read_text() == "0\n"
    assert (hostdevs(conn, vm), metadata(conn, vm)) == ([], None)


def test_crash_after_attach_is_rolled_back_by_recover(sim_host, conn, domain, libvirtd):
    """A vgpuadm killed right after the definition step (test hook VGPUADM_TEST_CRASH_AFTER_STEP) leaves a
    journal; the hostdev and its record came in one write. `vgpuadm recover` opens libvirt itself, defines the
    domain back without either and removes the mdev."""
    root, vm = sim_host("p4"), domain()
    env = {**os.environ, "VGPUADM_TEST_CRASH_AFTER_STEP": "2"}
    base = [sys.executable, "-m", "vgpuadm", "--root", str(root), "-c", libvirtd]
    r = subprocess.run([*base, "create", "--type", "nvidia-63", "--vm", vm], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 99
    u = expected_uuid(root, conn, vm, 0)
    assert (mdevs(root), len(hostdevs(conn, vm)), len(xml.parse_allocations(inactive_xml(conn, vm)))) == ([u], 1, 1)
    env.pop("VGPUADM_TEST_CRASH_AFTER_STEP")
    r = subprocess.run([*base, "recover"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (mdevs(root), hostdevs(conn, vm), metadata(conn, vm)) == ([], [], None)
    assert not (root / "var/lib/vgpuadm/journal.json").exists()


def test_destroy_of_a_passed_through_gpu_gives_it_back(sim_host, cli, conn, domain, libvirtd):
    root, vm = sim_host("passthrough"), domain()
    assert cli("--root", str(root), "-c", libvirtd, "passthrough", "--gpu", "0000:01:00.0", "--vm", vm).code == 0
    assert os.path.basename(os.readlink(root / "sys/bus/pci/devices/0000:01:00.0/driver")) == "vfio-pci"
    r = cli("--root", str(root), "-c", libvirtd, "destroy", "--vm", vm, "--uuid", "0000:01:00.0")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        f"removed pci 0000:01:00.0 (from {vm})",
        f"removed pci 0000:01:00.1 on 0000:01:00.0 (from {vm})",
    ]
    assert (hostdevs(conn, vm), metadata(conn, vm)) == ([], None)
    assert os.path.basename(os.readlink(root / "sys/bus/pci/devices/0000:01:00.0/driver")) == "nvidia"
    assert os.path.basename(os.readlink(root / "sys/bus/pci/devices/0000:01:00.1/driver")) == "snd_hda_intel"


def test_on_demand_create_on_a_running_domain_is_refused_before_any_change(sim_host, cli, conn, domain, libvirtd):
    """An on-demand device is made by the hook as its domain starts: a running domain would never get it. Refused up
    front, before any step (it used to fail late, on libvirt's hot-plug error)."""
    root, vm = sim_host("p4"), domain(machine="pc")
    conn.lookupByName(vm).create()
    before = inactive_xml(conn, vm)
    r = cli("--root", str(root), "-c", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--on-demand")
    assert (r.code, r.out) == (5, "")
    assert r.err.splitlines() == [
        f"error: domain {vm} is running; an on-demand device is made when its domain starts",
        f"hint: shut it down first (virsh shutdown {vm}), or give it the device now without --on-demand",
    ]
    assert (mdevs(root), inactive_xml(conn, vm)) == ([], before)
