"""Ownership read from real libvirt: libvirt's embedded QEMU driver under a simulated root (no daemon) holds a
domain whose vgpuadm metadata names an mdev; `vgpuadm inventory` with no ownership flag reads it from there.
Each step runs in its own process, because libvirt allows one embedded driver root per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.inventory_setup import P4_UUIDS as U
from tests.unit.inventory_setup import create_mdev

pytestmark = pytest.mark.process

DEFINE = textwrap.dedent("""
    import sys
    from vgpuadm.model import Allocation
    from vgpuadm.virt.conn import VirtConn, embed_uri
    from vgpuadm.virt.xml import NS, domain_definition, metadata_for_libvirt
    root, uuid = sys.argv[1:]
    with VirtConn(embed_uri(root)) as conn:
        name = conn.define(domain_definition("web01"))
        alloc = Allocation(name, "mdev", "nvidia-63", "0000:01:00.0", uuid)
        conn.set_metadata(name, "vgpuadm", NS, metadata_for_libvirt([alloc]))
""")


def test_owner_comes_from_the_embedded_libvirt(sim_host):
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[1])
    subprocess.run([sys.executable, "-c", DEFINE, str(root), U[0]], check=True, timeout=120)
    r = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "inventory", "--format", "json",
                        "--host", "p4-lv"], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ownership_source"].startswith("libvirt:qemu:///embed?root=")
    assert [(d["id"], d["domain"], d["owned"]) for d in doc["devices"]] == [(U[0], "web01", True), (U[1], None, False)]


DEFINE_BY_HAND = textwrap.dedent("""
    import sys
    from vgpuadm.virt.conn import VirtConn, embed_uri
    root, name, uuid = sys.argv[1:]
    hostdev = (f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{uuid}'/></source>"
               "</hostdev>")
    with VirtConn(embed_uri(root)) as conn:
        conn.define(f"<domain type='qemu'><name>{name}</name><memory>65536</memory>"
                    f"<os><type arch='x86_64'>hvm</type></os><devices>{hostdev}</devices></domain>")
""")


def _vgpuadm(root, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), *args], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def test_a_device_attached_by_hand_is_owned_by_its_domain_in_every_inventory_format(sim_host, tmp_path):
    """An mdev given to a VM by hand (`virsh attach-device --config`, no vgpuadm metadata) is owned by that VM for
    `inventory` (table, JSON, Prometheus, the fleet merge) as for `devices`, `doctor` and `reconcile`: only the
    device no domain references is a leak. The inventory says it is not recorded by vgpuadm."""
    root = sim_host("p4")
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[0])
    create_mdev(root, "0000:01:00.0", "nvidia-63", U[1])
    subprocess.run([sys.executable, "-c", DEFINE_BY_HAND, str(root), "legacy01", U[0]], check=True, timeout=120)

    doctor = {c["check"]: c for c in json.loads(_vgpuadm(root, "doctor", "--json").stdout)["checks"]}
    assert doctor[f"leak {U[1]}"]["detail"] == f"mdev {U[1]} (nvidia-63 on 0000:01:00.0) is owned by no domain"
    assert f"leak {U[0]}" not in doctor
    assert json.loads(_vgpuadm(root, "reconcile", "--json").stdout)["leaks"] == [
        {"kind": "mdev", "id": U[1], "detail": "nvidia-63 on 0000:01:00.0"}
    ]

    r = _vgpuadm(root, "inventory", "--format", "json", "--host", "p4-lv")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(d["id"], d["domain"], d["owned"]) for d in doc["devices"]] == [
        (U[0], "legacy01", True),
        (U[1], None, False),
    ]
    assert [(d["id"], d["domain"], d["owned"], d["recorded"], d["held"]) for d in doc["devices"]] == [
        (U[0], "legacy01", True, False, "stopped"), (U[1], None, False, None, None)
    ]  # fmt: skip
    assert {k: doc["summary"][k] for k in ("owned", "unowned", "not_recorded", "missing")} == {
        "owned": 1, "unowned": 1, "not_recorded": 1, "missing": 0
    }  # fmt: skip
    assert doc["warnings"] == []

    table = _vgpuadm(root, "inventory", "--host", "p4-lv").stdout
    assert [line.split("│")[7].strip() for line in table.splitlines() if line.startswith("│ " + U[0][:8])] == [
        "legacy01 (stopped: reserved; not recorded by vgpuadm)", "unowned (leak)"
    ]  # fmt: skip

    prom = _vgpuadm(root, "inventory", "--format", "prometheus", "--host", "p4-lv").stdout
    samples = {s.name: s.value for f in text_string_to_metric_families(prom) for s in f.samples
               if s.name in ("vgpuadm_unowned_devices", "vgpuadm_not_recorded_devices")}  # fmt: skip
    assert samples == {"vgpuadm_unowned_devices": 1.0, "vgpuadm_not_recorded_devices": 1.0}

    report = tmp_path / "p4-lv.json"
    report.write_text(r.stdout)
    fleet = json.loads(_vgpuadm(root, "inventory", "merge", "--format", "json", str(report)).stdout)
    assert [leak["id"] for leak in fleet["leaks"]] == [U[1]]
    assert [(h["host"], h["unowned"], h["not_recorded"]) for h in fleet["hosts"]] == [("p4-lv", 1, 1)]
    prom = _vgpuadm(root, "inventory", "merge", "--format", "prometheus", str(report)).stdout
    samples = {(s.name, s.labels["host"]): s.value for f in text_string_to_metric_families(prom) for s in f.samples
               if s.name in ("vgpuadm_unowned_devices", "vgpuadm_not_recorded_devices")}  # fmt: skip
    assert samples == {("vgpuadm_unowned_devices", "p4-lv"): 1.0, ("vgpuadm_not_recorded_devices", "p4-lv"): 1.0}
