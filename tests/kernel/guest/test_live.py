"""The domain XML vgpuadm writes really starts, and live attach and detach on the running domain, against the
libvirtd guest-entry.sh started (`virsh start --paused`: QEMU runs, the guest CPU does not). One domain start per
kind of device: an mdev (mdpy-vga, then mtty-2 live) and an SR-IOV NVMe VF through vfio-pci (vf0, then vf1 live).

`vgpuadm create --vm` (or `passthrough`) on the stopped domain writes a definition that starts, with QEMU holding the
device. On the running domain it hot-plugs the device into QEMU as well as writing the persistent definition, and
QEMU has it (`qom-list /machine/peripheral` through the monitor; a VF at a guest address libvirt picks: q35's root
bus cannot hot-plug).

Taking a device back while the domain runs (the domains use the root ports' native PCIe hot-plug):
- the hot-plugged one sits in a slot the paused guest never powered on, and QEMU gives such a device back at once:
  `destroy`/`release` detaches it live, QEMU no longer has it, and only then is the mdev removed (the VF unbound);
- the mdev the domain started with sits in a powered slot, whose unplug completes only when the guest OS
  acknowledges it, and a paused guest runs none: libvirt returns "detach request sent" and QEMU keeps the device.
  vgpuadm must see that (the live XML still has it after UNPLUG_WAIT s), fail the step with one line and change
  nothing: the mdev stays, the persistent definition is unchanged, no journal is left;
- the VF the domain started with is on the root bus, where QEMU refuses the unplug: the same one line (libvirt's
  reason), the vfio-pci bind stays, nothing changed.
Once the domain is stopped the same commands succeed."""

from __future__ import annotations

import json
import os

import pytest
from guest_fork import Hung, forked
from guest_virsh import URI, domstate, dumpxml, monitor, virsh
from lxml import etree

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.conn import UNPLUG_WAIT

PCI = "/sys/bus/pci/devices"


def _peripherals(name: str) -> dict[str, str]:
    """QEMU's user-created devices (id → QOM type). `query-pci` cannot be used: a guest started paused never ran its
    firmware, so its root ports have no bus numbers and query-pci lists nothing behind them."""
    request = '{"execute":"qom-list","arguments":{"path":"/machine/peripheral"}}'
    reply = json.loads(monitor(name, request))
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
    assert domstate(name) == "paused"
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


def _refused_unplug(cli, name: str, because: tuple[str, str], *args: str) -> None:
    """`vgpuadm ARGS` on the running (paused) domain must fail its first step, the unplug, with exit 5 and exactly
    this error and hint (`because`: what follows "failed: " and "hint: "), and change nothing in libvirt's view (the
    live and the persistent definition)."""
    (first, *_rest) = json.loads(cli("--connect", URI, *args, "--dry-run", "--json").out)["steps"]
    live, persistent = dumpxml(name), dumpxml(name, inactive=True)
    code, out, err = _bounded(name, *args)
    assert (code, out, err.splitlines()) == (5, "", [f"error: {first} failed: {because[0]}", f"hint: {because[1]}"])
    assert dumpxml(name, inactive=True) == persistent
    assert dumpxml(name) == live  # QEMU still has the device, under the same alias
    assert not os.path.exists("/var/lib/vgpuadm/journal.json")


def _not_acknowledged(name: str, what: str) -> tuple[str, str]:
    return (f"the guest of domain {name} has not released {what} (PCIe unplug not acknowledged within {UNPLUG_WAIT} "
            "s); nothing removed", f"the guest OS must accept hot-unplug; or shut the domain down (virsh -c {URI} "
            f"shutdown {name}) and run the command again; nothing was changed (the earlier steps were rolled back)")  # fmt: skip


def _detached_live(name: str, alias: str, *args: str) -> None:
    """`vgpuadm ARGS` on the running domain detaches the hot-plugged device `alias` live: exit 0, QEMU and the
    live definition no longer have it."""
    code, _out, err = _bounded(name, *args)
    assert code == 0, err
    assert alias not in _peripherals(name)
    assert alias not in [a for _, a in _hostdev_aliases(name)]
    assert domstate(name) == "paused"  # it still runs
    assert not os.path.exists("/var/lib/vgpuadm/journal.json")


def test_an_mdev_domain_starts_takes_another_mdev_live_and_gives_it_back_live(cli, sysfs: Sysfs, domain, mark) -> None:
    name = domain("kl-mdev", spare_ports=4, native_hotplug=True)
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
    hot = devices["mtty-2"]
    (_, (kind, alias)) = _hostdev_aliases(name)
    assert kind == "mdev" and alias not in before
    assert _peripherals(name)[alias] == "child<vfio-pci>"  # QEMU has the hot-plugged device (vfio-pci on the mdev)
    assert [k for k, _ in _hostdev_aliases(name, inactive=True)] == ["mdev", "mdev"]  # the definition keeps both

    mark("attached")
    _refused_unplug(cli, name, _not_acknowledged(name, f"mdev {cold}"), "destroy", "--vm", name, "--uuid", cold)
    mark("destroy of the started-with mdev refused")
    assert sorted(sysfs.listdir("/sys/bus/mdev/devices")) == sorted([cold, hot])
    assert _peripherals(name)[cold_alias] == "child<vfio-pci>"

    _detached_live(name, alias, "destroy", "--vm", name, "--uuid", hot)
    mark("hot-plugged mdev detached live")
    assert sysfs.listdir("/sys/bus/mdev/devices") == [cold]
    assert [a for _, a in _hostdev_aliases(name)] == [cold_alias]
    (hostdev,) = _hostdevs(name, inactive=True)
    assert hostdev.find("source/address").get("uuid") == cold

    virsh("destroy", name)  # QEMU gone: nothing holds the mdev any more, the command runs in-process
    result = cli("--connect", URI, "destroy", "--vm", name, "--all", "--json")
    mark(f"destroy: exit {result.code}")
    assert result.code == 0, result.err
    assert _hostdev_aliases(name, inactive=True) == []
    assert sysfs.listdir("/sys/bus/mdev/devices") == []


def test_a_vf_domain_starts_takes_another_vf_live_and_gives_it_back_live(
    cli, sysfs: Sysfs, domain, enabled_vfs: tuple[str, list[str]], mark
) -> None:
    name = domain("kl-vf", spare_ports=4, native_hotplug=True)
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
    # libvirt put the started-with VF on q35's root bus (pcie.0, as an integrated endpoint), which has no hot-plug
    not_hotpluggable = (f"domain '{name}' is running and libvirt cannot unplug the device: internal error: unable to "
                        "execute QEMU command 'device_del': Bus 'pcie.0' does not support hotplugging",
                        f"shut it down (virsh -c {URI} shutdown {name}) and run the command again; nothing was "
                        "changed (the earlier steps were rolled back)")  # fmt: skip
    _refused_unplug(cli, name, not_hotpluggable, "release", "--gpu", vf0)
    mark("release of the started-with VF refused")
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") == "vfio-pci"

    _detached_live(name, alias, "release", "--gpu", vf1)
    mark("hot-plugged VF released live")
    assert sysfs.link_name(f"{PCI}/{vf1}/driver") is None  # back to no driver (autoprobe is off), as it was
    assert [a for _, a in _hostdev_aliases(name)] == [cold_alias]

    virsh("destroy", name)
    result = cli("--connect", URI, "release", "--gpu", vf0, "--json")
    mark(f"release {vf0}: exit {result.code}")
    assert result.code == 0, result.err
    assert sysfs.link_name(f"{PCI}/{vf0}/driver") is None
    assert _hostdev_aliases(name, inactive=True) == []
    assert cli("sriov", "disable", pf).code == 0
