"""Cell values every table shows the same way (terminal and HTML, `devices` and `inventory`): one word per meaning
for a device's owner, and a NUMA node. Imported on the read commands' fast path: no `typing` here."""

from __future__ import annotations

# No domain's vgpuadm metadata claims the device (a leak), or the owners could not be read (libvirt unreachable).
UNOWNED = "unowned"
OWNER_UNKNOWN = "owner unknown"
# A domain's XML references the device (it is that domain's) but no vgpuadm metadata records it (attached by hand):
# restore, apply and destroy leave it alone until `vgpuadm adopt --vm` records it. Inventory JSON: `recorded: false`.
NOT_RECORDED = "not recorded by vgpuadm"


def numa_cell(node: int | None) -> int | None:
    """A NUMA node as tables show it: the kernel's -1 (no NUMA information) is "-", like an unknown one."""
    return None if node is None or node < 0 else node
