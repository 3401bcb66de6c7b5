"""Discovery on every simulated profile: exact layouts, type counts, parsed descriptions, companions, SR-IOV links,
and golden `gpus --json` / `types --json` (regenerate with VGPUADM_UPDATE_GOLDENS=1)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.goldens import golden
from vgpuadm.api import discover
from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.model import HostSnapshot, Layout
from vgpuadm.sim.profiles import PROFILES, build

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "read"
# The profiles with goldens; a newly added profile gets its goldens (and its line here) with its own tests.
GOLDEN_PROFILES = ["p4", "t4", "a100-mdev-vf", "h200-vendor-vfio", "gvt-g", "mtty", "passthrough", "mixed"]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("profiles")
    out = {}
    for name in PROFILES:
        build(name, str(base / name))
        out[name] = base / name
    return out


def snap(hosts: dict[str, Path], profile: str) -> HostSnapshot:
    s = discover(str(hosts[profile]))
    assert s.warnings == ()
    return s


def layouts(s: HostSnapshot) -> dict[str, str]:
    return {k: v.value for k, v in sorted(s.layouts.items())}


def test_p4_two_pfs_layout_a_with_parsed_descriptions(hosts):
    s = snap(hosts, "p4")
    assert layouts(s) == {"0000:01:00.0": "mdev-pf", "0000:02:00.0": "mdev-pf"}
    assert Counter(t.parent for t in s.types()) == {"0000:01:00.0": 14, "0000:02:00.0": 14}
    t = next(t for t in s.types() if t.type_id == "nvidia-64")
    assert (t.name, t.profile, t.framebuffer_mib, t.max_instances, t.available_instances) == (
        "GRID P4-2Q", "P4-2Q", 2048, 4, 4
    )  # fmt: skip
    assert t.attributes == {
        "board": "P4", "series": "Q", "num_heads": 4, "frl_config": 60, "framebuffer_mib": 2048,
        "max_resolution": "7680x4320", "max_instance": 4,
    }  # fmt: skip
    b4 = next(t for t in s.types() if t.type_id == "nvidia-214")
    assert (b4.profile, b4.attributes["variant"], b4.attributes["frl_config"]) == ("P4-2B4", "4", 45)
    assert s.functions["0000:01:00.0"].numa_node == 0 and s.functions["0000:02:00.0"].numa_node == 1
    assert s.mdevs == {} and s.vendor_vfs == {}


def test_t4_one_pf_17_types(hosts):
    s = snap(hosts, "t4")
    assert layouts(s) == {"0000:3b:00.0": "mdev-pf"}
    types = s.types()
    assert [t.numeric_id for t in types] == [*range(222, 235), 252, 319, 320, 321]
    t16q = next(t for t in types if t.profile == "T4-16Q")
    assert (t16q.type_id, t16q.framebuffer_mib, t16q.max_instances, t16q.attributes["num_heads"]) == (
        "nvidia-234", 16384, 1, 4
    )  # fmt: skip


def test_a100_layout_b_follows_virtfn_links(hosts):
    s = snap(hosts, "a100-mdev-vf")
    pf = s.functions["0000:41:00.0"]
    vfs = [f"0000:41:{(4 + i) // 8:02x}.{(4 + i) % 8}" for i in range(16)]
    assert pf.virtfns == tuple(vfs)
    assert (pf.sriov_total_vfs, pf.sriov_num_vfs) == (16, 16)
    assert layouts(s) == {"0000:41:00.0": "mdev-vf", **{vf: "mdev-vf" for vf in vfs}}
    assert all(s.functions[vf].physfn == "0000:41:00.0" for vf in vfs)
    assert Counter(t.parent for t in s.types()) == {vf: 11 for vf in vfs}
    assert {s.mdev_parents[vf].layout for vf in vfs} == {Layout.MDEV_VF}
    mig = next(t for t in s.types() if t.type_id == "nvidia-475" and t.parent == vfs[0])
    assert (mig.profile, mig.attributes["mig_slices"], mig.framebuffer_mib, mig.max_instances) == (
        "A100-2-10C", 2, 10240, 3
    )  # fmt: skip
    assert {t.available_instances for t in s.types() if "mig_slices" not in t.attributes} == {1}
    assert {t.available_instances for t in s.types() if "mig_slices" in t.attributes} == {0}  # MIG is off
    assert s.physical_gpu(vfs[5]) == "0000:41:00.0"


def test_h200_layout_c_vendor_vfio(hosts):
    s = snap(hosts, "h200-vendor-vfio")
    vfs = s.functions["0000:18:00.0"].virtfns
    assert len(vfs) == 16 and vfs[0] == "0000:18:00.4" and vfs[-1] == "0000:18:02.3"
    assert {layouts(s)[vf] for vf in vfs} == {"vendor-vfio"}
    assert s.mdev_parents == {} and s.mdevs == {}
    vf = s.vendor_vfs["0000:18:00.4"]
    # MIG off: the 9 time-sliced types; the 7 MIG-backed H200X-<n>-<GB>C only with MIG on (test_sim_mig.py)
    assert (vf.current_type, vf.physfn, len(vf.creatable)) == (0, "0000:18:00.0", 9)
    assert vf.creatable[0] == (1420, "NVIDIA H200X-4C")
    assert len(s.types()) == 16 * 9
    t = next(t for t in s.types() if t.type_id == "nvidia-1428" and t.parent == "0000:18:00.4")
    assert (t.layout, t.profile, t.framebuffer_mib, t.available_instances) == (
        Layout.VENDOR_VFIO, "H200X-141C", 141 * 1024, 1
    )  # fmt: skip


def test_gvt_g_pool_types_parse_aperture_lines(hosts):
    s = snap(hosts, "gvt-g")
    assert layouts(s) == {"0000:00:02.0": "mdev-pf"}
    gpu = s.functions["0000:00:02.0"]
    assert (gpu.driver, gpu.boot_vga, gpu.numa_node, gpu.class_code) == ("i915", True, -1, "0x030000")
    by_id = {t.type_id: t for t in s.types()}
    assert sorted(by_id) == ["i915-GVTg_V5_1", "i915-GVTg_V5_2", "i915-GVTg_V5_4", "i915-GVTg_V5_8"]
    v54 = by_id["i915-GVTg_V5_4"]
    assert (v54.name, v54.profile, v54.max_instances, v54.framebuffer_mib) == ("GVTg_V5_4", "GVTg_V5_4", None, None)
    assert v54.attributes == {"low_gm_mib": 128, "high_gm_mib": 512, "fence": 4, "resolution": "1920x1200",
                              "weight": 4}  # fmt: skip
    assert {k: t.available_instances for k, t in by_id.items()} == {
        "i915-GVTg_V5_1": 0, "i915-GVTg_V5_2": 0, "i915-GVTg_V5_4": 1, "i915-GVTg_V5_8": 2,
    }  # fmt: skip


def test_mtty_virtual_parent_without_description_files(hosts):
    s = snap(hosts, "mtty")
    root = hosts["mtty"]
    assert not (root / "sys/devices/virtual/mtty/mtty/mdev_supported_types/mtty-1/description").exists()
    assert s.functions == {} and layouts(s) == {"mtty": "mdev-pf"}
    p = s.mdev_parents["mtty"]
    assert (p.pci_address, p.sysfs_path) == (None, "/sys/devices/virtual/mtty/mtty")
    assert [(t.type_id, t.name, t.description, t.attributes, t.available_instances) for t in p.types] == [
        ("mtty-1", "Single port serial", "", {}, 24),
        ("mtty-2", "Dual port serial", "", {}, 12),
    ]


def test_passthrough_companions_and_bridge_in_group(hosts):
    s = snap(hosts, "passthrough")
    assert layouts(s) == {"0000:01:00.0": "passthrough", "0000:65:00.0": "passthrough"}
    assert [g.address for g in s.gpus] == ["0000:01:00.0", "0000:65:00.0"]
    assert s.group_members("0000:65:00.0") == ("0000:65:00.0", "0000:65:00.1")
    audio = s.functions["0000:65:00.1"]
    assert (audio.class_code, audio.driver, audio.is_display) == ("0x040300", "snd_hda_intel", False)
    assert s.group_members("0000:01:00.0") == ("0000:00:01.0", "0000:01:00.0", "0000:01:00.1")
    port = s.functions["0000:00:01.0"]
    assert (port.is_bridge, port.driver) == (True, "pcieport")
    assert s.types() == []


def test_mixed_host_keeps_every_layout(hosts):
    s = snap(hosts, "mixed")
    lay = layouts(s)
    assert lay["0000:18:00.4"] == "vendor-vfio" and lay["0000:41:00.4"] == "mdev-vf" and lay["mtty"] == "mdev-pf"
    assert lay["0000:65:00.0"] == "passthrough"
    assert Counter(t.layout.value for t in s.types()) == {"mdev-pf": 14 + 2, "mdev-vf": 8 * 11, "vendor-vfio": 8 * 9}
    assert len(s.functions["0000:41:00.0"].virtfns) == 8 and len(s.functions["0000:18:00.0"].virtfns) == 8


def test_mixed_host_p4_is_not_overwritten(hosts):
    s = snap(hosts, "mixed")
    assert s.functions["0000:03:00.0"].device_id == "0x1bb3"
    assert s.layouts["0000:03:00.0"] == "mdev-pf"
    assert (s.functions["0000:01:00.0"].device_id, s.layouts["0000:01:00.0"]) == ("0x1e04", "passthrough")


def _cli_json(root: Path, command: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert run(["--root", str(root), command, "--json"], Console(out, err)) == 0, err.getvalue()
    assert err.getvalue() == ""
    return out.getvalue()


@pytest.mark.parametrize("command", ["gpus", "types"])
@pytest.mark.parametrize("profile", GOLDEN_PROFILES)
def test_golden_json(hosts, profile, command):
    text = _cli_json(hosts[profile], command)
    path = GOLDEN / f"{profile}.{command}.json"
    assert json.loads(text) == json.loads(golden(path, text)), f"regenerate with VGPUADM_UPDATE_GOLDENS=1: {path}"


def test_types_of_the_same_texts_share_one_copy_of_their_attributes_per_snapshot(sim_host):
    """Every VF of a layout B GPU lists the same types: in one snapshot they share one attributes dict per type
    (20 copies, not one per VF), equal to what each type's texts say; a caller changing it changes no later
    snapshot (the process-wide cache of parsed texts hands out copies)."""
    root = str(sim_host("a100-mdev-vf"))
    snap = discover(root)
    by_id: dict[str, list] = {}
    for t in snap.types():
        by_id.setdefault(t.type_id, []).append(t)
    assert all(len(ts) > 1 for ts in by_id.values())
    for ts in by_id.values():
        assert all(t.attributes is ts[0].attributes for t in ts)
    first = by_id[next(iter(by_id))][0]
    kept = dict(first.attributes)
    first.attributes["framebuffer_mib"] = -1
    again = discover(root)
    assert all(t.attributes is not first.attributes for t in again.types())
    assert next(t for t in again.types() if t.type_id == first.type_id).attributes == kept
