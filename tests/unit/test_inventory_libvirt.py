"""Ownership read from real libvirt: libvirt's embedded QEMU driver under a simulated root (no daemon) holds a
domain whose vgpuadm metadata names an mdev; `vgpuadm inventory` with no ownership flag reads it from there.
Each step runs in its own process, because libvirt allows one embedded driver root per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

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
