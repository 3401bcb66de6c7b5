"""The inventory document on simulated hosts: exact capacity under each layout's sharing rule, owners and leaks,
and the published JSON schema. vGPUs are made by writing sysfs (tests/unit/inventory_setup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import create_mdev, domain_xml, mig_on, recorded, set_vf_type
from tests.unit.inventory_setup import p4_busy as make_p4_busy
from vgpuadm import api
from vgpuadm.model import Allocation
from vgpuadm.report.inventory import inventory
from vgpuadm.schemas import validate

WHEN = "2026-11-29T12:00:00Z"


def _doc(root: Path, allocations: list[Allocation] | None) -> dict:
    doc = inventory(api.discover(str(root)), recorded(allocations), host="h1", generated_at=WHEN)
    validate("inventory-v1", doc)
    return doc


def _type(doc: dict, type_id: str) -> dict:
    return next(t for t in doc["types"] if t["type_id"] == type_id)


@pytest.fixture
def p4_busy(sim_host):
    root = sim_host("p4")
    return root, make_p4_busy(root)


def test_idle_p4_offers_every_type_on_both_gpus(sim_host):
    doc = _doc(sim_host("p4"), [])
    t = _type(doc, "nvidia-63")
    assert (t["used"], t["free"], t["max"], t["stranded"], t["framebuffer_free_mib"]) == (0, 16, 16, 0, 16384)
    assert [(g["gpu"], g["free"], g["max"]) for g in t["gpus"]] == [("0000:01:00.0", 8, 8), ("0000:02:00.0", 8, 8)]
    assert [(g["address"], g["layout"], g["driver"], g["numa_node"], g["iommu_group"], g["framebuffer_total_mib"])
            for g in doc["gpus"]] == [("0000:01:00.0", "mdev-pf", "nvidia", 0, 1, 8192),
                                      ("0000:02:00.0", "mdev-pf", "nvidia", 1, 2, 8192)]  # fmt: skip
    assert doc["summary"]["types_offered"] == 14


def test_p4_one_type_per_gpu_capacity(p4_busy):
    root, allocations = p4_busy
    doc = _doc(root, allocations)
    q1 = _type(doc, "nvidia-63")  # `gone`'s recorded nvidia-63, absent now, holds one: reserved, not free
    assert (q1["used"], q1["reserved"], q1["free"], q1["max"], q1["stranded"]) == (2, 1, 5, 16, 6)
    assert (q1["framebuffer_used_mib"], q1["framebuffer_free_mib"]) == (2048, 5120)
    assert q1["gpus"] == [
        {"gpu": "0000:01:00.0", "used": 2, "free": 5, "max": 8, "stranded": 0, "reserved": 1, "reason": None},
        {"gpu": "0000:02:00.0", "used": 0, "free": 0, "max": 8, "stranded": 6, "reserved": 0,
         "reason": "runs nvidia-64 (one type per GPU)"},
    ]  # fmt: skip
    q2 = _type(doc, "nvidia-64")
    assert [(g["gpu"], g["free"], g["reason"]) for g in q2["gpus"]] == [
        ("0000:01:00.0", 0, "runs nvidia-63 (one type per GPU)"),
        ("0000:02:00.0", 3, None),
    ]
    q8 = _type(doc, "nvidia-66")  # 8 GiB: no room anywhere, and nothing stranded (6 GiB free per GPU)
    assert (q8["free"], q8["stranded"]) == (0, 0)
    assert [(g["address"], g["devices"], g["locked_to"], g["framebuffer_used_mib"], g["domains"])
            for g in doc["gpus"]] == [("0000:01:00.0", 2, ["nvidia-63"], 2048, ["web01"]),
                                      ("0000:02:00.0", 1, ["nvidia-64"], 2048, ["db02"])]  # fmt: skip


def test_owners_leaks_and_missing(p4_busy):
    root, allocations = p4_busy
    doc = _doc(root, allocations)
    assert [(d["id"], d["type_id"], d["name"], d["physical_gpu"], d["domain"], d["owned"]) for d in doc["devices"]] == [
        (U[0], "nvidia-63", "GRID P4-1Q", "0000:01:00.0", "web01", True),
        (U[1], "nvidia-63", "GRID P4-1Q", "0000:01:00.0", None, False),
        (U[2], "nvidia-64", "GRID P4-2Q", "0000:02:00.0", "db02", True),
    ]
    assert doc["missing"] == [{"domain": "gone", "mode": "mdev", "type_id": "nvidia-63", "parent": "0000:01:00.0",
                               "uuid": U[5], "address": None}]  # fmt: skip
    s = doc["summary"]
    assert (s["devices"], s["owned"], s["unowned"], s["missing"]) == (3, 2, 1, 1)
    assert (s["framebuffer_total_mib"], s["framebuffer_used_mib"], s["framebuffer_locked_free_mib"]) == (
        16384, 4096, 11264)  # fmt: skip
    assert (s["framebuffer_free_mib"], s["framebuffer_reserved_mib"]) == (11264, 1024)
    assert [f["devices"] for f in doc["functions"]] == [[U[0], U[1]], [U[2]]]


def test_unknown_ownership_is_not_a_leak(p4_busy):
    root, _ = p4_busy
    doc = _doc(root, None)
    assert {d["owned"] for d in doc["devices"]} == {None}
    assert (doc["summary"]["owned"], doc["summary"]["unowned"], doc["ownership_source"]) == (None, None, "none")


def test_a100_layout_b_one_size_per_gpu(sim_host):
    root = sim_host("a100-mdev-vf")
    create_mdev(root, "0000:41:00.4", "nvidia-468", U[0])  # A100-4C, 4 GiB, max 10
    create_mdev(root, "0000:41:00.5", "nvidia-468", U[1])
    doc = _doc(root, [])
    c4 = _type(doc, "nvidia-468")
    assert (c4["used"], c4["free"], c4["max"]) == (2, 8, 10)  # 14 free VFs, but max_instance 10 − 2
    c8 = _type(doc, "nvidia-470")  # A100-8C: another size, blocked; 32 GiB free would hold 4
    assert c8["gpus"] == [{"gpu": "0000:41:00.0", "used": 0, "free": 0, "max": 5, "stranded": 4, "reserved": 0,
                           "reason": "runs nvidia-468 (4096 MiB; one framebuffer size per GPU)"}]  # fmt: skip
    gpu = doc["gpus"][0]
    assert (gpu["layout"], gpu["vfs_enabled"], gpu["locked_to"], gpu["framebuffer_free_mib"]) == (
        "mdev-vf", 16, ["4096 MiB"], 32768)  # fmt: skip
    assert [f["address"] for f in doc["functions"] if f["devices"]] == ["0000:41:00.4", "0000:41:00.5"]
    assert {(f["kind"], f["layout"]) for f in doc["functions"]} == {("pf", "mdev-vf"), ("vf", "mdev-vf")}


@pytest.mark.process
def test_h200_layout_c_idle_is_bounded_by_framebuffer(sim_host):
    root = sim_host("h200-vendor-vfio")
    doc = _doc(root, [])
    wanted = ("nvidia-1414", "nvidia-1420", "nvidia-1428")
    # MIG off: the time-sliced types only; the MIG-backed H200X-1-18C once MIG is on
    assert [(t["type_id"], t["free"]) for t in doc["types"] if t["type_id"] in wanted] == [("nvidia-1420", 16),
                                                                                        ("nvidia-1428", 1)]  # fmt: skip
    assert doc["gpus"][0]["framebuffer_total_mib"] == 141 * 1024
    mig_on(root)
    doc = _doc(root, [])
    assert [(t["type_id"], t["free"]) for t in doc["types"] if t["type_id"] in wanted] == [("nvidia-1414", 7)]


@pytest.mark.process
def test_h200_layout_c_typed_vf_is_a_device(sim_host):
    root = sim_host("h200-vendor-vfio")
    set_vf_type(root, "0000:18:00.4", 1428)  # H200X-141C takes the whole GPU: every VF's creatable list empties
    doc = _doc(root, [Allocation("train01", "vf", "nvidia-1428", "0000:18:00.4", address="0000:18:00.4")])
    # no list in sysfs names type 1428 any more: its name and size come from the driver (nvidia-smi vgpu -s -v)
    assert [(d["kind"], d["id"], d["type_id"], d["name"], d["domain"]) for d in doc["devices"]] == [
        ("vf", "0000:18:00.4", "nvidia-1428", "NVIDIA H200X-141C", "train01")
    ]
    rows = {t["type_id"]: (t["used"], t["free"], t["max"], t["gpus"][0]["reason"]) for t in doc["types"]}
    assert rows["nvidia-1428"] == (1, 0, 1, "full (1 of 1)")
    assert rows["nvidia-1420"] == (0, 0, 16, "runs nvidia-1428 (144384 MiB; one framebuffer size per GPU)")
    assert len(rows) == 16 and all(free == 0 for _, free, _, _ in rows.values())
    assert (doc["gpus"][0]["devices"], doc["gpus"][0]["framebuffer_total_mib"]) == (1, 144384)


@pytest.mark.process
def test_h200_layout_c_same_size_types_stay_open(sim_host):
    root = sim_host("h200-vendor-vfio")
    set_vf_type(root, "0000:18:00.4", 1420)  # H200X-4C, 4 GiB
    doc = _doc(root, [])
    assert [(t["type_id"], t["used"], t["free"]) for t in doc["types"] if t["used"] or t["free"]] == [
        ("nvidia-1420", 1, 15)
    ]
    assert len(doc["types"]) == 16  # the other sizes, known from the driver, have no room
    assert doc["devices"][0]["name"] == "NVIDIA H200X-4C"
    assert doc["gpus"][0]["locked_to"] == ["4096 MiB"]


def test_shared_budget_drivers_follow_the_kernel(sim_host):
    doc = _doc(sim_host("gvt-g"), [])
    assert [(t["type_id"], t["free"], t["max"]) for t in doc["types"]] == [
        ("i915-GVTg_V5_1", 0, None), ("i915-GVTg_V5_2", 0, None), ("i915-GVTg_V5_4", 1, None),
        ("i915-GVTg_V5_8", 2, None),
    ]  # fmt: skip
    assert _type(doc, "i915-GVTg_V5_1")["gpus"][0]["reason"] == "the kernel reports 0 available (shared budget)"
    mtty = _doc(sim_host("mtty"), [])
    assert [(g["address"], g["kind"], g["rule"]) for g in mtty["gpus"]] == [("mtty", "virtual", "kernel")]


def test_passthrough_allocation_owns_the_function(sim_host):
    root = sim_host("passthrough")
    gpu, audio = (Allocation("gamer", "pci", address=a, slot=i) for i, a in enumerate(["0000:65:00.0", "0000:65:00.1"]))
    doc = _doc(root, [gpu, audio])
    assert [(d["kind"], d["id"], d["physical_gpu"], d["domain"]) for d in doc["devices"]] == [
        ("pci", "0000:65:00.0", "0000:65:00.0", "gamer"), ("pci", "0000:65:00.1", "0000:65:00.0", "gamer")
    ]  # fmt: skip
    assert [(g["address"], g["layout"], g["devices"], g["domains"]) for g in doc["gpus"]] == [
        ("0000:01:00.0", "passthrough", 0, []), ("0000:65:00.0", "passthrough", 2, ["gamer"])
    ]  # fmt: skip


def test_api_reads_owners_from_saved_domain_xml(p4_busy, tmp_path):
    root, allocations = p4_busy
    xml_dir = tmp_path / "domains"
    xml_dir.mkdir()
    (xml_dir / "web01.xml").write_text(domain_xml("web01", [allocations[0]]))
    (xml_dir / "db02.xml").write_text(domain_xml("db02", [allocations[1]]))
    (xml_dir / "notes.txt").write_text("not a domain")
    doc = api.inventory(str(root), domains_xml=str(xml_dir), host="h1")
    validate("inventory-v1", doc)
    assert [d["domain"] for d in doc["devices"]] == ["web01", None, "db02"]
    assert doc["ownership_source"] == f"domains-xml:{xml_dir}"
    assert doc["generated_at"].endswith("Z")


def test_saved_domains_own_what_their_hostdevs_reference_recorded_or_not(p4_busy, tmp_path):
    """A saved domain whose <hostdev> names an mdev that no vgpuadm metadata records (attached by hand) owns it, as
    for `devices` and `doctor`; a copy recording the same device as web01 makes both claim it (a warning)."""
    root, allocations = p4_busy
    xml_dir = tmp_path / "domains"
    xml_dir.mkdir()
    (xml_dir / "web01.xml").write_text(domain_xml("web01", [allocations[0]]))
    (xml_dir / "webcopy.xml").write_text(domain_xml("webcopy", [allocations[0]]))
    hostdev = (
        f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{U[1]}'/></source></hostdev>"
    )
    (xml_dir / "legacy.xml").write_text(domain_xml("legacy", []).replace("<devices/>", f"<devices>{hostdev}</devices>"))
    doc = api.inventory(str(root), domains_xml=str(xml_dir), host="h1")
    validate("inventory-v1", doc)
    assert [(d["id"], d["domain"], d["owned"], d["recorded"]) for d in doc["devices"]] == [
        (U[0], "web01", True, True), (U[1], "legacy", True, False), (U[2], None, False, None)
    ]  # fmt: skip
    assert {k: doc["summary"][k] for k in ("owned", "unowned", "not_recorded")} == {
        "owned": 2, "unowned": 1, "not_recorded": 1
    }  # fmt: skip
    assert doc["warnings"] == [
        f"{U[0]} is claimed by 2 domains (web01, webcopy); only one of them can start",
        f"ownership read from 3 domains saved in {xml_dir} (legacy, web01, webcopy): 1 device no saved domain owns "
        "is shown as a leak, though a domain not saved there may own it; save every domain of the host (`virsh "
        "dumpxml DOMAIN`) for a complete answer",
    ]


def test_saved_xml_of_some_domains_says_how_many_were_read(p4_busy, tmp_path, cli):
    """#30.11: with only web01 saved, db02's device was called a leak and nothing said that one domain was read.
    The inventory names how many domains (and which) its ownership comes from, on stderr and in the JSON."""
    root, allocations = p4_busy
    xml_dir = tmp_path / "domains"
    xml_dir.mkdir()
    (xml_dir / "web01.xml").write_text(domain_xml("web01", [allocations[0]]))
    doc = api.inventory(str(root), domains_xml=str(xml_dir), host="h1")
    validate("inventory-v1", doc)
    assert [d["domain"] for d in doc["devices"]] == ["web01", None, None]
    warning = (
        f"ownership read from 1 domain saved in {xml_dir} (web01): 2 devices no saved domain owns are shown as leaks, "
        "though a domain not saved there may own them; save every domain of the host (`virsh dumpxml DOMAIN`) for a "
        "complete answer"
    )
    assert doc["warnings"] == [warning]
    res = cli("--root", str(root), "inventory", "--domain-xml-dir", str(xml_dir))
    assert res.code == 0 and res.err == f"warning: {warning}\n"
    (xml_dir / "db02.xml").write_text(domain_xml("db02", [allocations[1]]))
    (xml_dir / "gone.xml").write_text(domain_xml("gone", [allocations[2]]))
    doc = api.inventory(str(root), domains_xml=str(xml_dir), host="h1")
    assert doc["warnings"] == [
        f"ownership read from 3 domains saved in {xml_dir} (db02, gone, web01): 1 device no saved domain owns is "
        "shown as a leak, though a domain not saved there may own it; save every domain of the host (`virsh "
        "dumpxml DOMAIN`) for a complete answer"
    ]


def test_broken_domain_xml_names_the_file(sim_host, tmp_path, cli):
    (tmp_path / "bad.xml").write_text("<domain><name>x</name>")
    r = cli("--root", str(sim_host("p4")), "inventory", "--domains-xml", str(tmp_path))
    assert r.code == 2
    assert r.err.startswith(f"error: {tmp_path / 'bad.xml'}: domain XML is not well-formed")


def test_real_a2_recording_one_size_left(tmp_path):
    """The real Harvester A2 capture (tests/data/harvester-a2): 4Q, 4A and 4C run on three VFs of a 16 GiB A2,
    so exactly one more 4 GiB vGPU of any series fits, and every other size is blocked (reference §2.4)."""
    from vgpuadm.host.umockdev import load

    data = Path(__file__).resolve().parent.parent / "data" / "harvester-a2"
    load(str(data / "vgpu-node.umockdev"), str(tmp_path / "a2"), str(data / "testdata-sys"), {"pci", "mdev"})
    doc = _doc(tmp_path / "a2", None)
    gpu = next(g for g in doc["gpus"] if g["address"] == "0000:08:00.0")
    assert (gpu["layout"], gpu["vfs_enabled"], gpu["devices"], gpu["locked_to"]) == ("mdev-vf", 16, 3, ["4096 MiB"])
    assert (gpu["framebuffer_total_mib"], gpu["framebuffer_free_mib"]) == (16384, 4096)
    assert {t["type_id"]: t["free"] for t in doc["types"] if t["free"]} == {
        "nvidia-746": 1, "nvidia-751": 1, "nvidia-754": 1
    }  # fmt: skip
    assert [(d["parent"], d["name"]) for d in doc["devices"]] == [
        ("0000:08:00.4", "NVIDIA A2-4C"), ("0000:08:00.6", "NVIDIA A2-4A"), ("0000:08:02.0", "NVIDIA A2-4Q")
    ]  # fmt: skip
    assert _type(doc, "nvidia-744")["stranded"] == 4  # four 1 GiB 1Q would fit the free 4 GiB, if not for the lock


@pytest.mark.parametrize(
    "path, value",
    [(("schema",), "vgpuadm-inventory/2"), (("devices", 0, "owned"), "yes"), (("types", 0, "free"), -1),
     (("gpus", 0, "layout"), "sr-iov"), (("summary", "extra"), 1)],
)  # fmt: skip
def test_schema_rejects_malformed_documents(p4_busy, path, value):
    import jsonschema

    root, allocations = p4_busy
    doc = _doc(root, allocations)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate("inventory-v1", doc)


def test_kernel_reading_zero_is_believed(p4_busy):
    """Newer drivers report 0 for all types on a GPU in some states (reference §2.4): no room is promised."""
    root, allocations = p4_busy
    (root / "sys/class/mdev_bus/0000:01:00.0/mdev_supported_types/nvidia-63/available_instances").write_text("0\n")
    doc = _doc(root, allocations)
    assert _type(doc, "nvidia-63")["gpus"][0] == {"gpu": "0000:01:00.0", "used": 2, "free": 0, "max": 8,
                                                  "stranded": 0, "reserved": 1,
                                                  "reason": "the kernel reports 0 available"}  # fmt: skip


@pytest.mark.process
def test_h200_stranded_counts_only_what_cannot_be_placed(sim_host):
    """Issue 12 item 13: three H200X-17C run; five more fit (max 8), so the free framebuffer they fill is not
    stranded — only the 5120 MiB left after them, and the other sizes' instances the lock forbids."""
    root = sim_host("h200-vendor-vfio")
    for vf in ("0000:18:00.4", "0000:18:00.5", "0000:18:00.6"):
        set_vf_type(root, vf, 1424)
    doc = _doc(root, [])
    g = doc["gpus"][0]
    assert (g["framebuffer_used_mib"], g["framebuffer_free_mib"], g["framebuffer_stranded_mib"]) == (
        52224,
        92160,
        5120,
    )
    assert doc["summary"]["framebuffer_stranded_mib"] == 5120
    rows = {t["type_id"]: (t["used"], t["free"], t["max"], t["stranded"], t["gpus"][0]["reason"]) for t in doc["types"]}
    assert rows["nvidia-1424"] == (3, 5, 8, 0, None)
    assert rows["nvidia-1426"] == (0, 0, 4, 2, "runs nvidia-1424 (17408 MiB; one framebuffer size per GPU)")
    assert rows["nvidia-1420"][3] == 16 and rows["nvidia-1428"][3] == 0


@pytest.mark.process
def test_h200_same_size_other_kind_is_stranded(sim_host):
    """A time-sliced H200X-35C runs: the MIG-backed types of the same 35840 MiB cannot be placed (equal-size mode
    groups by size and MIG-ness) although the framebuffer is free — stranded, with the lock as reason."""
    root = sim_host("h200-vendor-vfio")
    set_vf_type(root, "0000:18:00.4", 1426)
    doc = _doc(root, [])
    rows = {t["type_id"]: (t["used"], t["free"], t["max"], t["stranded"], t["gpus"][0]["reason"]) for t in doc["types"]}
    assert rows["nvidia-1426"] == (1, 3, 4, 0, None)
    why = "runs nvidia-1426 (35840 MiB time-sliced; one framebuffer size per GPU)"
    assert rows["nvidia-1416"] == (0, 0, 4, 3, why)
    assert rows["nvidia-1417"] == (0, 0, 3, 3, why)
    assert doc["gpus"][0]["framebuffer_stranded_mib"] == 144384 - 4 * 35840


def test_passthrough_gpus_say_whether_they_are_free(sim_host):
    doc = _doc(sim_host("passthrough"), [Allocation("gamer", "pci", address="0000:65:00.0")])
    assert [(g["address"], g["whole_gpu_free"], g["framebuffer_stranded_mib"]) for g in doc["gpus"]] == [
        ("0000:01:00.0", 1, None), ("0000:65:00.0", 0, None)
    ]  # fmt: skip
