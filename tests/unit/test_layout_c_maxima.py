"""Layout C maxima from NVIDIA's tables (vgpuadm/catalog/boards.py): the table itself, discovery filling
`max_instances` where the driver publishes none, and the inventory, placement and simulator all holding to it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.unit.inventory_setup import mig_on, recorded, set_vf_type
from vgpuadm import api
from vgpuadm.catalog.boards import MIG, TIME_SLICED, board_framebuffer_mib, equal_size_max
from vgpuadm.catalog.vendor_types import vendor_vf_types
from vgpuadm.errors import CapacityError, HostIOError
from vgpuadm.model import describe_nvidia_name
from vgpuadm.plan.devices import place
from vgpuadm.report.inventory import inventory
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import H200_MIG_PROFILE, H200_TYPES

GPU = "0000:18:00.0"
VFS = [f"0000:18:{d:02x}.{f}" for d in range(16) for f in range(8)][4:20]  # the profile's 16 VFs: 18:00.4 … 18:02.3
A2 = Path(__file__).resolve().parent.parent / "data" / "harvester-a2"


def _max(name: str) -> int | None:
    return equal_size_max(describe_nvidia_name(name))


def _doc(snap) -> dict:
    doc = inventory(snap, recorded([]), host="h1", generated_at="2026-11-29T12:00:00Z")
    validate("inventory-v1", doc)
    return doc


def _gpu_rows(doc: dict, type_id: str) -> list[dict]:
    return next(t for t in doc["types"] if t["type_id"] == type_id)["gpus"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H200X-35C", 4),
        ("NVIDIA H200-4C", 32),
        ("NVIDIA H200X-1-18CME", 1),  # MIG, media extensions
        ("NVIDIA H200X-1-18C", 7),
        ("NVIDIA H200X-3-71C", 2),  # MIG sizes are rounded: 2 × 71 GB on a 141 GB board
        ("NVIDIA H100-16C", 5),  # the doc's 6 would overflow 80 GB (see the module)
        ("NVIDIA H100XL-6C", 15),
        ("NVIDIA L40S-48Q", 1),  # Q shares the 48C maximum in equal-size mode
        ("NVIDIA L40S-8A", 6),
        ("NVIDIA RTX6000-Ada-4C", 12),
        ("NVIDIA A100D-16C", 5),
        ("NVIDIA L40S-1Q", None),  # no 1C in the table
        ("NVIDIA L40S-3B", None),
        ("NVIDIA A100D-1-10C", None),  # the table gives A100D's MIG names but not their maxima
        ("NVIDIA B200-4C", None),  # unknown board
        ("GRID P4-1Q", None),
    ],
)
def test_table_lookup(name, expected):
    assert _max(name) == expected


def test_no_board_holds_more_than_its_memory():
    """Every time-sliced size × maximum fits the board's memory (its largest type), so a table typo shows here."""
    for board, sizes in TIME_SLICED.items():
        total = board_framebuffer_mib(board)
        assert total is not None and all(gb * n * 1024 <= total for gb, n in sizes.items()), board
    assert set(MIG) <= set(TIME_SLICED)
    assert (board_framebuffer_mib("H200X"), board_framebuffer_mib("H100"), board_framebuffer_mib("B200")) == (
        141 * 1024, 80 * 1024, None)  # fmt: skip


@pytest.mark.process
def test_discovery_fills_layout_c_maxima_and_the_sim_uses_the_same_table(sim_host):
    root = sim_host("h200-vendor-vfio")
    time_sliced = sorted((t.type_id, t.max_instances) for t in api.discover(str(root)).types() if t.parent == VFS[0])
    mig_on(root)  # the MIG-backed types are offered only in MIG mode
    mig_backed = sorted((t.type_id, t.max_instances) for t in api.discover(str(root)).types() if t.parent == VFS[0])
    assert mig_backed == sorted((f"nvidia-{num}", mx) for num, p, mx in H200_TYPES if p in H200_MIG_PROFILE)
    assert sorted(time_sliced + mig_backed) == sorted((f"nvidia-{num}", mx) for num, _profile, mx in H200_TYPES)
    # the simulator's maxima are the reference's (§3.6), ids 1413 … 1428 in order
    assert [mx for _num, _p, mx in H200_TYPES] == [1, 7, 1, 4, 3, 2, 1, 32, 20, 16, 10, 8, 5, 4, 2, 1]


def test_captured_l40s_list_gets_maxima_by_size(sim_host):
    """The real L40S creatable list: sizes with a C type in the table get its maximum, others (1Q, 3B…) none."""
    root = sim_host("h200-vendor-vfio")
    vf = root / "sys/bus/pci/devices" / VFS[0]
    shutil.rmtree(vf / "nvidia")
    shutil.copytree(A2 / "testdata-sys/bus/pci/devices/0000:26:00.4/nvidia", vf.resolve() / "nvidia")
    types = {t.profile: t.max_instances for t in api.discover(str(root)).types() if t.parent == VFS[0]}
    assert {p: types[p] for p in ("L40S-48Q", "L40S-24A", "L40S-8Q", "L40S-4A", "L40S-1Q", "L40S-3B")} == {
        "L40S-48Q": 1, "L40S-24A": 2, "L40S-8Q": 6, "L40S-4A": 12, "L40S-1Q": None, "L40S-3B": None}  # fmt: skip


def test_kernel_reported_maximum_wins_on_layout_b(sim_host):
    """Layout B's max_instance comes from the driver's description, never from the table (A100-4C: table 10)."""
    root = sim_host("a100-mdev-vf")
    desc = root / "sys/class/mdev_bus/0000:41:00.4/mdev_supported_types/nvidia-468/description"
    desc.resolve().write_text(desc.read_text().replace("max_instance=10", "max_instance=6"))
    types = {(t.parent, t.type_id): t.max_instances for t in api.discover(str(root)).types()}
    assert (types[("0000:41:00.4", "nvidia-468")], types[("0000:41:00.5", "nvidia-468")]) == (6, 10)


@pytest.mark.process
def test_busy_h200x_free_count_is_the_table_maximum_minus_running(sim_host):
    root = sim_host("h200-vendor-vfio")
    set_vf_type(root, VFS[0], 1426)  # H200X-35C, max 4; the 15 other VFs all still list it
    snap = api.discover(str(root))
    doc = _doc(snap)
    assert [(t["type_id"], t["used"], t["max"], t["free"]) for t in doc["types"] if t["used"] or t["free"]] == [
        ("nvidia-1426", 1, 4, 3)
    ]
    assert _gpu_rows(doc, "nvidia-1426") == [
        {"gpu": GPU, "used": 1, "free": 3, "max": 4, "stranded": 0, "reserved": 0, "reason": None}
    ]
    gpu = doc["gpus"][0]
    assert (gpu["framebuffer_total_mib"], gpu["framebuffer_used_mib"], gpu["framebuffer_free_mib"]) == (
        144384, 35840, 108544)  # fmt: skip

    # The driver drops other sizes from every list; were one still listed (a list read mid-update), it holds 0.
    idle_list = tuple((num, f"NVIDIA {p}") for num, p, _mx in H200_TYPES)
    vfs = dict(snap.vendor_vfs)
    vfs[VFS[1]] = dataclasses.replace(vfs[VFS[1]], creatable=idle_list, offered=vendor_vf_types(VFS[1], idle_list))
    doc = _doc(dataclasses.replace(snap, vendor_vfs=vfs))
    assert _gpu_rows(doc, "nvidia-1427") == [  # H200X-70C: 106 GiB free would hold 1 of its 2
        {"gpu": GPU, "used": 0, "free": 0, "max": 2, "stranded": 1, "reserved": 0,
         "reason": "runs nvidia-1426 (35840 MiB; one framebuffer size per GPU)"}
    ]  # fmt: skip
    assert _gpu_rows(doc, "nvidia-1426")[0]["free"] == 3


@pytest.mark.process
def test_idle_h200x_free_is_the_table_maximum_bounded_by_vfs(sim_host):
    root = sim_host("h200-vendor-vfio")
    doc = _doc(api.discover(str(root)))
    got = {t["name"].split()[-1]: (t["max"], t["free"]) for t in doc["types"]}
    assert {p: got[p] for p in ("H200X-4C", "H200X-8C", "H200X-14C", "H200X-35C", "H200X-141C")} == {
        "H200X-4C": (16, 16),  # table 32, 16 VFs
        "H200X-8C": (16, 16),
        "H200X-14C": (10, 10),
        "H200X-35C": (4, 4),
        "H200X-141C": (1, 1),
    }
    assert doc["gpus"][0]["framebuffer_total_mib"] == 141 * 1024
    mig_on(root)
    got = {t["name"].split()[-1]: (t["max"], t["free"]) for t in _doc(api.discover(str(root)))["types"]}
    assert got["H200X-3-71C"] == (2, 2)  # the table's MIG maximum, not 141 // 71


@pytest.mark.process
def test_placement_and_the_simulated_driver_stop_at_the_maximum(sim_host):
    root = sim_host("h200-vendor-vfio")
    for vf in VFS[:3]:
        set_vf_type(root, vf, 1426)
    snap = api.discover(str(root))
    assert [p for p, _ in place(snap, "H200X-35C").choices] == [VFS[3]]
    with pytest.raises(CapacityError) as info:
        place(snap, "H200X-35C", 2)
    assert info.value.message == (
        f"No room for 2 × nvidia-1426 (only 1 fit): 3 VFs of {GPU}: VF already hosts a vGPU (nvidia-1426); one vGPU "
        f"per VF; {VFS[3]}: no free instances of nvidia-1426 left after this request; {GPU} (GPU): at most "
        "4 × nvidia-1426 per GPU"
    )
    assert _gpu_rows(_doc(snap), "nvidia-1426")[0]["free"] == 1
    set_vf_type(root, VFS[3], 1426)
    with pytest.raises(HostIOError):  # the simulated driver refuses the fifth (EINVAL: no longer listed)
        set_vf_type(root, VFS[4], 1426)
