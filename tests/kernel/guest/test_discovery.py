"""Discovery of the real sample mdev drivers through vgpuadm's library and its `types` command."""

from __future__ import annotations

import json

from vgpuadm import api
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import Layout

EXPECTED = {
    # parent: {type: (name, description, available_instances)} — reference §4.4, mbochs loaded with count=96
    "mtty": {"mtty-1": ("Single port serial", "", 24), "mtty-2": ("Dual port serial", "", 12)},
    "mdpy": {
        "mdpy-hd": ("mdpy-hd", "virtual display, 1920x1080 framebuffer", 4),
        "mdpy-vga": ("mdpy-vga", "virtual display, 640x480 framebuffer", 4),
        "mdpy-xga": ("mdpy-xga", "virtual display, 1024x768 framebuffer", 4),
    },
    "mbochs": {
        "mbochs-large": ("mbochs-large", "virtual display, 64 MB video memory", 1),
        "mbochs-medium": ("mbochs-medium", "virtual display, 16 MB video memory", 6),
        "mbochs-small": ("mbochs-small", "virtual display, 4 MB video memory", 24),
    },
}


def test_sample_parents_and_types_are_discovered(sysfs: Sysfs) -> None:
    snap = api.discover(None)
    assert snap.warnings == ()
    assert sorted(snap.mdev_parents) == ["mbochs", "mdpy", "mtty"]
    for name, types in EXPECTED.items():
        parent = snap.mdev_parents[name]
        assert parent.sysfs_path == f"/sys/devices/virtual/{name}/{name}"
        assert parent.layout is Layout.MDEV_PF
        assert parent.pci_address is None
        got = {t.type_id: (t.name, t.description, t.available_instances) for t in parent.types}
        assert got == types
        assert {t.device_api for t in parent.types} == {"vfio-pci"}
    assert snap.mdevs == {}


def test_types_command_lists_the_sample_types(cli) -> None:
    result = cli("types", "--json")
    assert result.code == 0, result.err
    rows = {(r["parent"], r["type_id"]): r for r in json.loads(result.out)}
    for parent, types in EXPECTED.items():
        for type_id, (name, _description, available) in types.items():
            row = rows[(parent, type_id)]
            assert (row["name"], row["available_instances"], row["layout"]) == (name, available, "mdev-pf")


def test_discovery_sees_a_created_mdev(sysfs: Sysfs) -> None:
    uuid = "5d0b1a8e-1111-4222-8333-444455556666"
    sysfs.write("/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-hd/create", uuid)
    snap = api.discover(None)
    mdev = snap.mdevs[uuid]
    assert (mdev.parent, mdev.type_id) == ("mdpy", "mdpy-hd")
    assert mdev.iommu_group is not None
    # one count shared by the three mdpy types
    assert {t.type_id: t.available_instances for t in snap.mdev_parents["mdpy"].types} == {
        "mdpy-hd": 3, "mdpy-vga": 3, "mdpy-xga": 3,
    }  # fmt: skip
