"""Live attach and detach on a running domain (`virsh start --paused`: QEMU runs, the guest CPU does not):
`vgpuadm create --vm` hot-plugs the mdev into QEMU as well as writing the persistent definition, QEMU lists the
device (`query-pci` through the monitor), and `vgpuadm destroy` unplugs it again before removing the mdev. The same
for an SR-IOV NVMe VF given with `vgpuadm passthrough` (vfio-pci) and taken back with `release`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from guest_virsh import URI, virsh
from lxml import etree

from vgpuadm.host.sysfs import Sysfs

PCI = "/sys/bus/pci/devices"
MTTY_ID = (0x4348, 0x3253)  # mtty's PCI vendor/device (samples/vfio-mdev/mtty.c)


def _pci_devices(name: str) -> list[dict[str, Any]]:
    """Every device QEMU's `query-pci` lists, behind bridges and root ports too."""
    reply = json.loads(virsh("qemu-monitor-command", name, '{"execute":"query-pci"}').stdout)

    def walk(devices: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for d in devices:
            yield d
            yield from walk(d.get("pci_bridge", {}).get("devices", []))

    return [d for bus in reply["return"] for d in walk(bus["devices"])]


def _qdev_ids(name: str) -> set[str]:
    return {d["qdev_id"] for d in _pci_devices(name)}


def _hostdev_aliases(name: str, *, inactive: bool = False) -> list[tuple[str | None, str | None]]:
    doc = etree.fromstring(virsh("dumpxml", *(["--inactive"] if inactive else []), name).stdout.encode())
    out = []
    for h in doc.findall("devices/hostdev"):
        alias = h.find("alias")
        out.append((h.get("type"), None if alias is None else alias.get("name")))
    return out


def _bounded(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`vgpuadm ARGS` in a child, bounded: if the guest never lets go of the device, removing it would wait in
    the kernel for QEMU to close it; stopping the domain then frees it, and the test fails saying so."""
    p = subprocess.Popen([sys.executable, "-m", "vgpuadm", "--connect", URI, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        virsh("destroy", name, check=False)
        out, err = p.communicate(timeout=300)
        pytest.fail(f"vgpuadm {' '.join(args)} hung until the domain was stopped: {err.strip()}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_create_attaches_an_mdev_to_a_running_domain_and_destroy_unplugs_it(cli, sysfs: Sysfs, domain, mark) -> None:
    name = domain("kl-live")
    virsh("start", "--paused", name)
    mark("started")
    before = _qdev_ids(name)
    seen = _pci_devices(name)

    result = cli("--connect", URI, "create", "--type", "mtty-2", "--vm", name, "--json")
    assert result.code == 0, result.err
    (device,) = json.loads(result.out)["devices"]
    uuid = device["uuid"]
    ((kind, alias),) = _hostdev_aliases(name)
    assert kind == "mdev" and alias
    now = _pci_devices(name)
    added = [(d["id"]["vendor"], d["id"]["device"]) for d in now if d not in seen]
    assert MTTY_ID in added, (alias, now)  # QEMU has the mtty device
    assert [k for k, _ in _hostdev_aliases(name, inactive=True)] == ["mdev"]  # and the definition keeps it

    mark("attached")
    result = _bounded(name, "destroy", "--vm", name, "--all", "--json")
    mark(f"destroy: exit {result.returncode}")
    assert result.returncode == 0, result.stderr
    assert _qdev_ids(name) == before
    assert _hostdev_aliases(name) == [] and _hostdev_aliases(name, inactive=True) == []
    assert not sysfs.exists(f"/sys/bus/mdev/devices/{uuid}")
    virsh("destroy", name)


def test_passthrough_attaches_a_vf_live_and_release_unplugs_it(
    cli, sysfs: Sysfs, domain, enabled_vfs: tuple[str, list[str]], mark
) -> None:
    name = domain("kl-live-vf")
    pf, (vf0, _vf1) = enabled_vfs
    virsh("start", "--paused", name)
    before = _qdev_ids(name)

    result = cli("--connect", URI, "passthrough", "--gpu", vf0, "--vm", name, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"
    ((kind, alias),) = _hostdev_aliases(name)
    assert kind == "pci" and alias in _qdev_ids(name) - before
    vendor = int(sysfs.read(f"{PCI}/{vf0}/vendor"), 16)
    assert [d["id"]["vendor"] for d in _pci_devices(name) if d["qdev_id"] == alias] == [vendor]

    mark("passed through")
    result = _bounded(name, "release", "--gpu", vf0, "--json")
    mark(f"release: exit {result.returncode}")
    assert result.returncode == 0, result.stderr
    assert _qdev_ids(name) == before
    assert _hostdev_aliases(name) == [] and _hostdev_aliases(name, inactive=True) == []
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") is None
    virsh("destroy", name)
    assert cli("sriov", "disable", pf).code == 0
