"""Rows of `vgpuadm vms`: each of this host's libvirt domains with its state and the devices its vgpuadm metadata
records. Pure (over the Session's one domain scan)."""

from __future__ import annotations

from typing import Any

from vgpuadm.plan.domains import Domains


def vm_rows(domains: Domains) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "uuid": d.uuid,
            "state": "running" if d.running else "shut off",
            "devices": [
                {"mode": str(a.mode), "type_id": a.type_id, "parent": a.parent, "uuid": a.uuid, "address": a.address}
                for a in d.allocations
            ],
        }
        for name, d in sorted(domains.by_name.items())
    ]
