"""libvirt's node-device driver as a second oracle: for every parent it reports with an `mdev_types` capability,
`vgpuadm types --json` must agree on type id, name, device API and available instances, before and after devices
are made; `virsh nodedev-list --cap mdev` and `vgpuadm devices --json` must list the same UUIDs. libvirt learns
about new mdevs from udev events, so its view is polled until it settles (bounded). The parents libvirt skips are
written to <results>/nodedev.txt for the lane's summary."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from guest_virsh import nodedev_dumpxml, virsh
from lxml import etree
from tenacity import Retrying, stop_after_delay, wait_fixed

from vgpuadm.host.sysfs import Sysfs

MDEV_BUS = "/sys/class/mdev_bus"


def _libvirt_types() -> dict[str, dict[str, tuple[str | None, str | None, int]]]:
    """Per parent sysfs path: type id -> (name, device API, available instances), as libvirt reports them."""
    found: dict[str, dict[str, tuple[str | None, str | None, int]]] = {}
    for name in virsh("nodedev-list", "--cap", "mdev_types").stdout.split():
        doc = etree.fromstring(nodedev_dumpxml(name).encode())
        types = {
            t.get("id"): (t.findtext("name"), t.findtext("deviceAPI"), int(t.findtext("availableInstances") or -1))
            for t in doc.iter("type")
            if t.getparent() is not None and t.getparent().get("type") == "mdev_types"
        }
        found[doc.findtext("path") or name] = types
    return found


def _vgpuadm_types(cli) -> dict[str, dict[str, tuple[str | None, str | None, int]]]:
    result = cli("types", "--json")
    assert result.code == 0, result.err
    out: dict[str, dict[str, tuple[str | None, str | None, int]]] = {}
    for r in json.loads(result.out):
        path = os.path.realpath(f"{MDEV_BUS}/{r['parent']}")
        out.setdefault(path, {})[r["type_id"]] = (r["name"], r["device_api"], r["available_instances"])
    return out


def _libvirt_mdevs() -> list[str]:
    uuids = []
    for name in virsh("nodedev-list", "--cap", "mdev").stdout.split():
        doc = etree.fromstring(nodedev_dumpxml(name).encode())
        uuids.append(doc.findtext("capability/uuid") or name)
    return sorted(uuids)


def _agree(cli, sysfs: Sysfs) -> dict[str, Any]:
    """Poll until libvirt's view equals vgpuadm's on every parent libvirt reports; returns the comparison."""
    ours: dict[str, Any] = {}
    for attempt in Retrying(stop=stop_after_delay(60), wait=wait_fixed(1), reraise=True):
        with attempt:
            theirs, ours = _libvirt_types(), _vgpuadm_types(cli)
            assert theirs, "libvirt reports no parent with mdev_types"
            for path, types in theirs.items():
                assert path in ours, f"libvirt reports {path}, vgpuadm does not"
                assert ours[path] == types, path
            devices = sorted(d["id"] for d in json.loads(cli("devices", "--json").out) if d.get("kind") == "mdev")
            assert _libvirt_mdevs() == devices == sorted(sysfs.listdir("/sys/bus/mdev/devices"))
    return {"libvirt": sorted(theirs), "vgpuadm": sorted(ours)}


def test_libvirt_nodedev_agrees_with_types_and_devices(cli, sysfs: Sysfs, libvirtd: None, results: Path) -> None:
    before = _agree(cli, sysfs)
    for type_id, count in (("mtty-2", 3), ("mtty-1", 2), ("mdpy-vga", 2), ("mbochs-medium", 1)):
        result = cli("mdev", "create", "--type", type_id, "--count", str(count))
        assert result.code == 0, result.err
    after = _agree(cli, sysfs)
    assert after == before
    skipped = [os.path.basename(p) for p in after["vgpuadm"] if p not in after["libvirt"]]
    reported = [os.path.basename(p) for p in after["libvirt"]]
    compared = sum(len(t) for t in _libvirt_types().values())
    (results / "nodedev.txt").write_text(
        f"libvirt nodedev: parents {', '.join(reported)} agree with vgpuadm ({compared} types, 8 mdevs, before and "
        f"after); libvirt skips {', '.join(skipped) or 'none'}\n"
    )
