"""`vgpuadm create --vm` (an mdev) and `vgpuadm passthrough` (an SR-IOV VF) against the libvirtd that
guest-entry.sh started in the guest: the domain XML vgpuadm writes must really start (`virsh start --paused`)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lxml import etree
from tenacity import Retrying, stop_after_delay, wait_fixed

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.xml import domain_definition

URI = "qemu:///system"
PCI = "/sys/bus/pci/devices"


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=900)
    if check:
        assert result.returncode == 0, f"virsh {' '.join(args)}: {result.stderr.strip()}"
    return result


@pytest.fixture(scope="module")
def libvirtd(results: Path) -> None:
    """guest-entry.sh started libvirtd in the background at boot; under TCG it needs ~35 s before it answers on a
    quiet host, several minutes on a slow one (the lane's timing.log records it)."""
    started = (results / "libvirtd.rc").read_text().strip()
    assert started == "0", f"libvirtd did not start: {(results / 'libvirtd.log').read_text().strip()}"
    for attempt in Retrying(stop=stop_after_delay(900), wait=wait_fixed(2), reraise=True):
        with attempt:
            virsh("version")


@pytest.fixture
def domain(libvirtd: None, cli) -> Iterator[Callable[[str], str]]:
    """A small diskless q35 guest without graphics, removed with every device vgpuadm gave it."""
    names: list[str] = []

    def define(name: str) -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
            f.write(domain_definition(name, vnc=False))
            f.flush()
            virsh("define", f.name)
        names.append(name)
        return name

    yield define
    for name in names:
        virsh("destroy", name, check=False)
        cli("destroy", "--vm", name, "--all")
        virsh("undefine", name, check=False)


def _hostdevs(name: str) -> list[etree._Element]:
    doc = etree.fromstring(virsh("dumpxml", "--inactive", name).stdout.encode())
    return doc.findall("devices/hostdev")


def _start_paused(name: str) -> None:
    virsh("start", "--paused", name)
    assert virsh("domstate", name).stdout.strip() == "paused"
    virsh("destroy", name)


def test_an_mdev_domain_starts(cli, sysfs: Sysfs, domain) -> None:
    name = domain("kl-mdev")
    result = cli("--connect", URI, "create", "--type", "mdpy-vga", "--vm", name, "--json")
    assert result.code == 0, result.err
    (device,) = json.loads(result.out)["devices"]
    assert (device["mode"], device["type_id"], device["parent"]) == ("mdev", "mdpy-vga", "mdpy")
    uuid = device["uuid"]
    assert sysfs.link_name(f"/sys/bus/mdev/devices/{uuid}/mdev_type") == "mdpy-vga"
    (hostdev,) = _hostdevs(name)
    assert (hostdev.get("type"), hostdev.get("model")) == ("mdev", "vfio-pci")
    assert hostdev.find("source/address").get("uuid") == uuid

    _start_paused(name)

    result = cli("--connect", URI, "destroy", "--vm", name, "--all")
    assert result.code == 0, result.err
    assert not sysfs.exists(f"/sys/bus/mdev/devices/{uuid}")
    assert _hostdevs(name) == []


def test_a_vf_domain_starts(cli, sysfs: Sysfs, domain, enabled_vfs: tuple[str, list[str]]) -> None:
    name = domain("kl-vf")
    pf, (vf0, _vf1) = enabled_vfs
    result = cli("--connect", URI, "passthrough", "--gpu", vf0, "--vm", name, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"
    (hostdev,) = _hostdevs(name)
    assert hostdev.get("type") == "pci"
    address = hostdev.find("source/address")
    assert (address.get("bus"), address.get("slot"), address.get("function")) == ("0x01", "0x00", "0x1")

    _start_paused(name)

    result = cli("--connect", URI, "release", "--gpu", vf0)
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") is None
    assert _hostdevs(name) == []
    assert cli("sriov", "disable", pf).code == 0
