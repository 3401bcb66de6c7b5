"""One capacity answer (#30.4, #30.5): `types` (fits_on_gpu, `--available`), `inventory` (JSON, table,
Prometheus) and `create`'s placement give the same count for a type on a GPU; capacity reserved for devices that
domains record but the host lacks (after a reboot, awaiting `vgpuadm restore`) is neither free nor said to "run".
vGPUs are made by writing sysfs on simulated hosts (tests/unit/inventory_setup.py); domains are parsed from saved
XML (no libvirt needed)."""

from __future__ import annotations

import json

import pytest

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import create_mdev, domain_xml, recorded, set_vf_type
from vgpuadm import api
from vgpuadm.catalog.capacity import gpu_rooms
from vgpuadm.errors import CapacityError
from vgpuadm.model import Allocation
from vgpuadm.plan.devices import place
from vgpuadm.plan.domains import Domains, with_recorded
from vgpuadm.report.inventory import inventory
from vgpuadm.report.merge import merge
from vgpuadm.report.render_html import fleet_view, host_html, host_view
from vgpuadm.report.render_prometheus import host_metrics
from vgpuadm.report.render_table import host_tables
from vgpuadm.schemas import validate

pytestmark = pytest.mark.process  # the layout C hosts answer through the simulated nvidia-smi, a process

WHEN = "2026-11-29T12:00:00Z"


def _inventory(root, allocations):
    doc = inventory(api.discover(str(root)), recorded(allocations), host="h1", generated_at=WHEN)
    validate("inventory-v1", doc)
    return doc


def _types(cli, root, *args):
    r = cli("--root", str(root), "types", *args)
    assert r.code == 0, r.err
    return r.out


def _fits(snap, type_name, gpu):
    """How many `create` places: the largest count place() accepts on `gpu`."""
    n = 0
    while True:
        try:
            place(snap, type_name, n + 1, gpu=gpu)
        except CapacityError:
            return n
        n += 1


@pytest.mark.parametrize(
    ("profile", "make", "type_id", "fits", "most"),
    [
        ("a100-mdev-vf", "mdev", "nvidia-471", 2, 4),  # 2 × A100-10C of 4; 14 free VFs each list one
        ("h200-vendor-vfio", "vf", "nvidia-1426", 2, 4),  # 2 × H200X-35C of 4
    ],
)
def test_sriov_gpu_capacity_is_one_number_in_types_inventory_and_create(cli, sim_host, profile, make, type_id,
                                                                       fits, most):  # fmt: skip
    root = sim_host(profile)
    snap = api.discover(str(root))
    gpu = next(f.address for f in snap.gpus if not f.is_vf)
    vfs = sorted(a for a, f in snap.functions.items() if f.physfn == gpu)
    for i, vf in enumerate(vfs[:2]):
        if make == "mdev":
            create_mdev(root, vf, type_id, U[i])
        else:
            set_vf_type(root, vf, int(type_id.split("-")[1]))
    rows = [r for r in json.loads(_types(cli, root, "--json")) if r["type_id"] == type_id]
    assert {(r["fits_on_gpu"], r["max_on_gpu"]) for r in rows} == {(fits, most)}
    # the kernel's per-VF count stays as it reads: each free VF takes one
    assert sum(r["available_instances"] for r in rows) == len(vfs) - 2
    table = _types(cli, root, "--plain", "--available", "--type", type_id).splitlines()
    assert table[0] == "GPU\tmodel\tlayout\ttype\tname\tfits now\tmax per GPU\tframebuffer MiB\ton VFs"
    assert [line.split("\t")[5:7] for line in table[1:]] == [[str(fits), str(most)]]
    doc = _inventory(root, [])
    [row] = [t for t in doc["types"] if t["type_id"] == type_id]
    assert [(g["gpu"], g["used"], g["free"], g["max"]) for g in row["gpus"]] == [(gpu, 2, fits, most)]
    snap = api.discover(str(root))
    assert _fits(snap, type_id, gpu) == fits
    with pytest.raises(CapacityError, match=rf"only {fits} fit"):
        place(snap, type_id, fits + 1, gpu=gpu)


def test_types_available_lists_what_fits_now(cli, sim_host):
    """README: "`types --available` lists what fits now": on an A100 running 2 × A100-10C (of 4), one row, 2 that
    fit (the 14 free VFs each read available_instances 1); other sizes are locked out."""
    root = sim_host("a100-mdev-vf")
    create_mdev(root, "0000:41:00.4", "nvidia-471", U[0])
    create_mdev(root, "0000:41:00.5", "nvidia-471", U[1])
    assert _types(cli, root, "--plain", "--no-headers", "--available").splitlines() == [
        "0000:41:00.0\tA100 PCIe 40GB\tmdev-vf\tnvidia-471\tGRID A100-10C\t2\t4\t10240\t14"
    ]
    listed = json.loads(_types(cli, root, "--available", "--json"))
    assert {(r["type_id"], r["fits_on_gpu"]) for r in listed} == {("nvidia-471", 2)}


def _web01_after_reboot(root):
    """web01 recorded 3 × nvidia-63 on 01:00.0, which the host lacks (a reboot dropped them)."""
    return [Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", U[i]) for i in range(3)]


def test_capacity_awaiting_restore_is_reserved_not_free_everywhere(sim_host):
    root = sim_host("p4")
    doc = _inventory(root, _web01_after_reboot(root))
    q1 = next(t for t in doc["types"] if t["type_id"] == "nvidia-63")
    assert q1["gpus"][0] == {"gpu": "0000:01:00.0", "used": 0, "free": 5, "max": 8, "stranded": 0, "reserved": 3,
                             "reason": None}  # fmt: skip
    q2 = next(t for t in doc["types"] if t["type_id"] == "nvidia-64")
    assert q2["gpus"][0] == {"gpu": "0000:01:00.0", "used": 0, "free": 0, "max": 4, "stranded": 2, "reserved": 0,
                             "reason": "reserved for web01 (3 devices awaiting `vgpuadm restore`)"}  # fmt: skip
    assert (q1["free"], q1["reserved"], q2["free"]) == (13, 3, 4)
    gpu = doc["gpus"][0]
    assert (gpu["framebuffer_used_mib"], gpu["framebuffer_reserved_mib"], gpu["framebuffer_free_mib"]) == (
        0, 3072, 5120)  # fmt: skip
    assert (doc["summary"]["framebuffer_free_mib"], doc["summary"]["framebuffer_reserved_mib"]) == (13312, 3072)
    metrics = host_metrics(doc).splitlines()
    assert 'vgpuadm_gpu_type_free_instances{gpu="0000:01:00.0",host="h1",type="nvidia-63"} 5.0' in metrics
    assert 'vgpuadm_gpu_type_free_instances{gpu="0000:01:00.0",host="h1",type="nvidia-64"} 0.0' in metrics
    assert 'vgpuadm_type_reserved_instances{host="h1",name="GRID P4-1Q",type="nvidia-63"} 3.0' in metrics
    [types] = [t for t in host_tables(doc) if t.title.startswith("vGPU types")]
    assert types.columns[:6] == ["type", "name", "used", "reserved", "free", "host max"]
    assert types.rows[0][:6] == ["nvidia-63", "GRID P4-1Q", 0, 3, 13, 16]


def test_create_names_the_domain_a_gpu_is_reserved_for(sim_host):
    root = sim_host("p4")
    snap = api.discover(str(root))
    allocations = _web01_after_reboot(root)
    doms = Domains.of(snap.host_key, [("web01", "6c3e8a6e-0000-4000-8000-000000000005",
                                       domain_xml("web01", allocations), False, "")])  # fmt: skip
    view = with_recorded(snap, doms)
    with pytest.raises(CapacityError) as exc:
        place(view, "nvidia-64", 1, gpu="0000:01:00.0")
    assert exc.value.message == (
        "No room for 1 × nvidia-64 on 0000:01:00.0: 0000:01:00.0: GPU reserved for web01 "
        "(3 devices awaiting `vgpuadm restore`)"
    )
    assert len(place(view, "nvidia-63", 5, gpu="0000:01:00.0").choices) == 5
    with pytest.raises(CapacityError, match="only 5 fit"):
        place(view, "nvidia-63", 6, gpu="0000:01:00.0")


def test_awaiting_restore_is_drawn_as_reserved_in_the_html_report(sim_host):
    root = sim_host("p4")
    view = host_view(_inventory(root, _web01_after_reboot(root)))
    [gpu_bars, type_bars] = [c["bars"] for c in view["charts"][:2]]
    assert [(b["label"], b["used"], b["reserved"], b["free"], b["text"]) for b in gpu_bars] == [
        ("0000:01:00.0", 0, 3072, 5120, "0 / 8192 (3072 reserved)"),
        ("0000:02:00.0", 0, 0, 8192, "0 / 8192"),
    ]
    q1 = next(b for b in type_bars if b["label"] == "nvidia-63 GRID P4-1Q")
    assert (q1["used"], q1["reserved"], q1["free"], q1["text"]) == (0, 3, 13, "0 / 16 (3 reserved)")
    assert 'class="reserved"' in host_html(_inventory(root, _web01_after_reboot(root)))


def test_mig_backed_types_with_mig_off_are_unavailable_not_stranded(sim_host):
    """#30.11: a MIG-backed type waits for MIG mode, which is not fragmentation: free 0, stranded 0, "MIG is off";
    the time-sliced types the running size locks out stay stranded."""
    root = sim_host("h200-vendor-vfio")
    set_vf_type(root, "0000:18:00.4", 1426)  # H200X-35C
    doc = api.inventory(str(root), host="h", use_libvirt=False)
    assert doc["gpus"][0]["mig"]["mode"] == "Disabled"
    rows = {t["type_id"]: t for t in doc["types"]}
    assert rows["nvidia-1414"]["gpus"] == [{"gpu": "0000:18:00.0", "used": 0, "free": 0, "max": 7, "stranded": 0,
                                            "reserved": 0, "reason": "MIG is off"}]  # fmt: skip
    assert sum(rows[f"nvidia-{n}"]["stranded"] for n in range(1413, 1420)) == 0
    assert (rows["nvidia-1427"]["stranded"], rows["nvidia-1427"]["gpus"][0]["reason"]) == (
        1, "runs nvidia-1426 (35840 MiB; one framebuffer size per GPU)")  # fmt: skip


def test_fleet_card_says_what_the_locked_share_is(sim_host):
    """#30.11: "78 % free framebuffer on locked GPUs" read as "locked GPUs are 78 % free"; the number is the share
    of all free framebuffer that sits on GPUs locked to one type or size."""
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])  # 01:00.0 locked to nvidia-63 with 7168 MiB free
    fleet = merge([("h1.json", _inventory(root, []))], generated_at=WHEN)
    cards = dict(fleet_view(fleet)["cards"])
    assert cards["of the free framebuffer, the share on GPUs locked to one type or size"] == "47 %"  # 7168 / 15360


def _most_placed(snap, type_id: str, gpu: str) -> int:
    """The largest count `create`'s planner places of `type_id` on `gpu` (a non-PCI parent: on the host)."""
    n = 0
    while True:
        try:
            place(snap, type_id, n + 1, gpu=gpu if ":" in gpu else None)
        except CapacityError:
            return n
        n += 1


@pytest.mark.parametrize(
    ("profile", "made"),
    [
        ("p4", [("mdev", "0000:01:00.0", "nvidia-63")]),
        ("a100-mdev-vf", [("mdev", "0000:41:00.4", "nvidia-471"), ("mdev", "0000:41:00.5", "nvidia-471")]),
        ("h200-vendor-vfio", [("vf", "0000:18:00.4", "nvidia-1426")]),
        ("mixed", [("mdev", "0000:03:00.0", "nvidia-64"), ("vf", "0000:18:00.4", "nvidia-1424")]),
        ("gvt-g", []),
        ("mi300x-vf-pool", []),
    ],
)
def test_every_gpu_and_type_fits_as_many_as_create_places(sim_host, profile, made):
    """The per-GPU room (fits_on_gpu, inventory's free) is what placement achieves, for every GPU and type."""
    root = sim_host(profile)
    for i, (kind, parent, type_id) in enumerate(made):
        if kind == "mdev":
            create_mdev(root, parent, type_id, U[i])
        else:
            set_vf_type(root, parent, int(type_id.split("-")[1]))
    snap = api.discover(str(root))
    rooms = {(g, tid): room.free for g, r in gpu_rooms(snap).items() for tid, (_, room) in r.rooms.items()}
    assert rooms and any(rooms.values())
    assert {k: _most_placed(snap, k[1], k[0]) for k in rooms} == rooms
