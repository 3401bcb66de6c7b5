"""`vgpuadm create --vm` (an mdev) and `vgpuadm passthrough` (an SR-IOV VF) against the libvirtd that
guest-entry.sh started in the guest: the domain XML vgpuadm writes must really start (`virsh start --paused`)."""

from __future__ import annotations

import json

from guest_virsh import URI, virsh
from lxml import etree

from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"


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
