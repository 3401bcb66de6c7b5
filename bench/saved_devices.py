"""The devices the restore benches make, written twice: one saved domain XML each (vgpuadm's metadata recording the
mdev, as `restore --domain-xml-dir` reads it at boot) and the same mdev as an mdevctl definition (what
`mdevctl start-parent-mdevs` starts)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable

from vgpuadm.model import Allocation
from vgpuadm.virt.xml import metadata_xml


def write(host: str, devices: Iterable[tuple[str, str, str]], domains: str, etc: str) -> None:
    """Each (mdev UUID, type id, parent) of `host` as `domains`/vmNNN.xml and as `etc`/PARENT/UUID; `etc` gets the
    scripts.d directories mdevctl refuses to run without."""
    os.makedirs(domains, exist_ok=True)
    for sub in ("callouts", "notifiers"):
        os.makedirs(os.path.join(etc, "scripts.d", sub), exist_ok=True)
    for n, (u, type_id, parent) in enumerate(devices):
        name, duuid = f"vm{n:03d}", str(uuid.uuid4())
        a = Allocation(name, "mdev", type_id, parent, u, domain_uuid=duuid, slot=0, extra={"display": "off"})
        with open(os.path.join(domains, f"{name}.xml"), "w") as f:
            f.write(f"<domain type='kvm'><name>{name}</name><uuid>{duuid}</uuid>"
                    f"<metadata>{metadata_xml([a], host)}</metadata><devices/></domain>\n")  # fmt: skip
        os.makedirs(os.path.join(etc, parent), exist_ok=True)
        with open(os.path.join(etc, parent, u), "w") as f:
            json.dump({"mdev_type": type_id, "start": "auto", "attrs": []}, f)
