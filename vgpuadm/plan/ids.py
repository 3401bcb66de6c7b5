"""Deterministic device UUIDs: the same host, domain and slot always give the same mdev UUID, so re-creating
devices after a reboot yields the UUIDs the domain XML already names."""

from __future__ import annotations

import uuid

# A fixed namespace for vgpuadm's uuid5 derivations (never change it: stored domain XML depends on it).
NAMESPACE = uuid.UUID("6f1c1f0e-3b1e-5a43-9d0c-766770756164")


def device_uuid(host_id: str, domain_uuid: str, slot: int) -> str:
    """The mdev UUID for a domain's `slot`-th vgpuadm device on this host (lower-case, as the kernel prints it)."""
    return str(uuid.uuid5(NAMESPACE, f"{host_id}/{domain_uuid.lower()}/{slot}"))
