"""`vgpuadm demo`: a newcomer with no GPU and no libvirtd sees provisioning work in one command. Builds a simulated
host, defines three small demo domains in libvirt's embedded QEMU driver under that root, and runs the real
`create --type nvidia-63 --vm web01` against them."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass

from vgpuadm.ops.guest import GuestResult, create
from vgpuadm.sim.profiles import build
from vgpuadm.virt.conn import VirtConn, embed_uri
from vgpuadm.virt.xml import domain_definition

DEMO_DOMAINS = (("web01", "q35"), ("web02", "q35"), ("db01", "pc"))
DEMO_TYPE = "nvidia-63"  # GRID P4-1Q
DEMO_MACHINE_ID = "766770756164656d6f686f7374000001"  # fixed, so the demo's mdev UUIDs are the same every run
_DOMAIN_NS = uuid.UUID("2b1f4f52-9c8e-5d43-a3c1-766770756164")


@dataclass
class DemoResult:
    root: str
    uri: str
    domains: list[str]
    created: GuestResult


def run(directory: str | None = None, profile: str = "p4") -> DemoResult:
    root = os.path.abspath(directory) if directory else tempfile.mkdtemp(prefix="vgpuadm-demo-")
    build(profile, root)
    machine_id = os.path.join(root, "etc", "machine-id")
    if not os.path.exists(machine_id):
        os.makedirs(os.path.dirname(machine_id), exist_ok=True)
        with open(machine_id, "w") as f:
            f.write(DEMO_MACHINE_ID + "\n")
    uri = embed_uri(root)
    with VirtConn(uri) as conn:
        for name, machine in DEMO_DOMAINS:
            conn.define(domain_definition(name, uuid=str(uuid.uuid5(_DOMAIN_NS, name)), machine=machine))
        domains = conn.list_domains()
    created = create(root, "web01", DEMO_TYPE, connect=uri)
    return DemoResult(root, uri, domains, created)
