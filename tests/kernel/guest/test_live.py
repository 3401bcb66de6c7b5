"""The domain XML vgpuadm writes really starts, and live attach and detach on the running domain, against the
libvirtd guest-entry.sh started (`virsh start --paused`: QEMU runs, the guest CPU does not). One domain start per
kind of device: an mdev (mdpy-vga, then mtty-2 live) and an SR-IOV NVMe VF through vfio-pci (vf0, then vf1 live).

`vgpuadm create --vm` (or `passthrough`) on the stopped domain writes a definition that starts, with QEMU holding the
device. On the running domain it hot-plugs the device into QEMU as well as writing the persistent definition, and
QEMU has it (`qom-list /machine/peripheral` through the monitor; a VF at a guest address libvirt picks: q35's root
bus cannot hot-plug).

Taking the device back while the domain runs: PCIe hot-unplug completes only when the guest OS acknowledges it, and
a paused guest runs none. libvirt returns "detach request sent" and QEMU keeps the device; vgpuadm must see that
(the live XML still has it after UNPLUG_WAIT s), fail the step with one line and change nothing: the mdev (or the
VF's vfio-pci bind) stays, the persistent definition is unchanged, no journal is left. Once the domain is stopped
the same command succeeds."""

from __future__ import annotations

import json
import os

import pytest
from guest_fork import Hung, forked
from guest_virsh import URI, dumpxml, virsh
from lxml import etree

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.handlers import UNPLUG_WAIT

PCI = "/sys/bus/pci/devices"


def _peripherals(name: str) -> dict[str, str]:
    """QEMU's user-created devices (id → QOM type). `query-pci` cannot be used: a guest started paused never ran its
    firmware, so its root ports have no bus numbers and query-pci lists nothing behind them."""
    request = '{"execute":"qom-list","arguments":{"path":"/machine/peripheral"}}'
    reply = json.loads(virsh("qemu-monitor-command", name, request).stdout)
    return {p["name"]: p["type"] for p in reply["return"] if p["type"].startswith("child<")}


def _hostdevs(name: str, *, inactive: bool = False) -> list[etree._Element]:
    doc = etree.fromstring(dumpxml(name, inactive=inactive).encode())
    return doc.findall("devices/hostdev")


def _hostdev_aliases(name: str, *, inactive: bool = False) -> list[tuple[str | None, str | None]]:
    out = []
    for h in _hostdevs(name, inactive=inactive):
        alias = h.find("alias")
        out.append((h.get("type"), None if alias is None else alias.get("name")))
    return out


def _start_paused(name: str) -> dict[str, str]:
    """Start the domain paused; QEMU's peripherals then."""
    virsh("start", "--paused", name)
    assert virsh("domstate", name).stdout.strip() == "paused"
    return _peripherals(name)


def _bounded(name: str, *args: str) -> tuple[int, str, str]:
    """`vgpuadm ARGS` in a forked child, bounded: had vgpuadm removed the device while QEMU still held it, the
    removal would wait in the kernel for QEMU to close it; stopping the domain then frees it, and the test fails
    saying so."""
    try:
        (outcome,) = forked([["--connect", URI, *args]], timeout=120 + UNPLUG_WAIT,
                            on_timeout=lambda: virsh("destroy", name, check=False))  # fmt: skip
    except Hung as hung:
        pytest.fail(f"vgpuadm {' '.join(args)} hung until the domain was stopped: {hung}")
    return outcome


def _refused_unplug(cli, name: str, what: str, *args: str) -> None:
    """`vgpuadm ARGS` on the running (paused) domain must fail its first step, the unplug, with exit 5 and exactly
    this error, and change nothing in libvirt's view (the live and the persistent definition)."""
    (first, *_rest) = json.loads(cli("--connect", URI, *args, "--dry-run", "--json").out)["steps"]
    live, persistent = dumpxml(name), dumpxml(name, inactive=True)
    code, out, err = _bounded(name, *args)
    assert (code, out, err.splitlines()) == (5, "", [
        f"error: {first} failed: the guest of domain {name} has not released {what} (PCIe unplug not acknowledged "
        f"within {UNPLUG_WAIT} s); nothing removed",
        f"hint: the guest OS must accept hot-unplug; or shut the domain down (virsh -c {URI} shutdown {name}) and "
        "run the command again; nothing was changed (the earlier steps were rolled back)",
    ])  # fmt: skip
    assert dumpxml(name, inactive=True) == persistent
    assert dumpxml(name) == live  # QEMU still has the device, under the same alias
    assert not os.path.exists("/var/lib/vgpuadm/journal.json")


def test_an_mdev_domain_starts_takes_another_mdev_live_and_destroy_waits_for_the_guest(
    cli, sysfs: Sysfs, domain, mark
) -> None:
    name = domain("kl-mdev", spare_ports=4)
    result = cli("--connect", URI, "create", "--type", "mdpy-vga", "--vm", name, "--json")
    assert result.code == 0, result.err
    (device,) = json.loads(result.out)["devices"]
    assert (device["mode"], device["type_id"], device["parent"]) == ("mdev", "mdpy-vga", "mdpy")
    cold = device["uuid"]
    assert sysfs.link_name(f"/sys/bus/mdev/devices/{cold}/mdev_type") == "mdpy-vga"
    (hostdev,) = _hostdevs(name, inactive=True)
    assert (hostdev.get("type"), hostdev.get("model")) == ("mdev", "vfio-pci")
    assert hostdev.find("source/address").get("uuid") == cold

    before = _start_paused(name)
    mark("started")
    ((_, cold_alias),) = _hostdev_aliases(name)
    assert before[cold_alias] == "child<vfio-pci>"  # the definition vgpuadm wrote started, QEMU holds the mdev

    result = cli("--connect", URI, "create", "--type", "mtty-2", "--vm", name, "--json")
    assert result.code == 0, result.err
    devices = {d["type_id"]: d["uuid"] for d in json.loads(result.out)["devices"]}
    assert devices.keys() == {"mdpy-vga", "mtty-2"}  # the VM's devices: the one it had and the new one
    uuid = devices["mtty-2"]
    (_, (kind, alias)) = _hostdev_aliases(name)
    assert kind == "mdev" and alias not in before
    assert _peripherals(name)[alias] == "child<vfio-pci>"  # QEMU has the hot-plugged device (vfio-pci on the mdev)
    assert [k for k, _ in _hostdev_aliases(name, inactive=True)] == ["mdev", "mdev"]  # the definition keeps both

    mark("attached")
    _refused_unplug(cli, name, f"mdev {uuid}", "destroy", "--vm", name, "--uuid", uuid)
    mark("destroy refused")
    assert sorted(sysfs.listdir("/sys/bus/mdev/devices")) == sorted([cold, uuid])
    assert sysfs.link_name(f"/sys/bus/mdev/devices/{uuid}/mdev_type") == "mtty-2"
    assert _peripherals(name)[alias] == "child<vfio-pci>"

    virsh("destroy", name)  # QEMU gone: nothing holds the mdevs any more, the command runs in-process
    result = cli("--connect", URI, "destroy", "--vm", name, "--all", "--json")
    mark(f"destroy: exit {result.code}")
    assert result.code == 0, result.err
    assert _hostdev_aliases(name, inactive=True) == []
    assert sysfs.listdir("/sys/bus/mdev/devices") == []


def test_a_vf_domain_starts_takes_another_vf_live_and_release_waits_for_the_guest(
    cli, sysfs: Sysfs, domain, enabled_vfs: tuple[str, list[str]], mark
) -> None:
    name = domain("kl-vf", spare_ports=4)
    pf, (vf0, vf1) = enabled_vfs
    result = cli("--connect", URI, "passthrough", "--gpu", vf0, "--vm", name, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"
    (hostdev,) = _hostdevs(name, inactive=True)
    assert hostdev.get("type") == "pci"
    address = hostdev.find("source/address")
    assert (address.get("bus"), address.get("slot"), address.get("function")) == ("0x01", "0x00", "0x1")

    before = _start_paused(name)
    mark("started")
    ((_, cold_alias),) = _hostdev_aliases(name)
    assert before[cold_alias] == "child<vfio-pci>"  # QEMU holds vf0

    result = cli("--connect", URI, "passthrough", "--gpu", vf1, "--vm", name, "--json")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf1}/driver") == "vfio-pci"
    (_, (kind, alias)) = _hostdev_aliases(name)
    assert kind == "pci" and alias not in before
    assert _peripherals(name)[alias] == "child<vfio-pci>"  # QEMU has the hot-plugged VF

    mark("passed through")
    _refused_unplug(cli, name, f"PCI device {vf1}", "release", "--gpu", vf1)
    mark("release refused")
    assert sysfs.link_name(f"{PCI}/{vf1}/driver") == "vfio-pci"

    virsh("destroy", name)
    for vf in (vf1, vf0):
        result = cli("--connect", URI, "release", "--gpu", vf, "--json")
        mark(f"release {vf}: exit {result.code}")
        assert result.code == 0, result.err
        assert sysfs.link_name(f"{PCI}/{vf}/driver") is None
    assert _hostdev_aliases(name, inactive=True) == []
    assert cli("sriov", "disable", pf).code == 0
