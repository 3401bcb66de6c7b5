"""IOMMU-group viability (reference §5.3), the one rule for every mode that hands a guest a PCI function: VFIO gives
a guest a whole IOMMU group, so every non-bridge member of the function's group must be on vfio-pci, pci-stub (or
the mode's VFIO variant driver) or on no driver. Passthrough moves the GPU's own-slot companions (HD audio) along;
a VF pool gives one VF alone, so any other member the host uses makes that VF unsafe. Pure: reads a snapshot.
"""

from __future__ import annotations

from collections.abc import Collection

from vgpuadm.errors import UnsafeError
from vgpuadm.model import HostSnapshot, PciFunction

HARMLESS = (None, "vfio-pci", "pci-stub")  # drivers a viable group may hold


def endpoints(snapshot: HostSnapshot, fn: PciFunction) -> list[PciFunction]:
    """The group's non-bridge members, `fn` first and the rest by address."""
    members = [snapshot.functions[a] for a in snapshot.group_members(fn.address) if a in snapshot.functions]
    return [fn, *sorted((m for m in members if not m.is_bridge and m.address != fn.address), key=lambda m: m.address)]


def host_used(
    snapshot: HostSnapshot, fn: PciFunction, companions: Collection[str] = (), harmless: Collection[str] = ()
) -> list[PciFunction]:
    """Members of `fn`'s group other than `fn` and its `companions` that a host driver holds."""
    return [
        m
        for m in endpoints(snapshot, fn)[1:]
        if m.address not in companions and m.driver not in HARMLESS and m.driver not in harmless
    ]


def refuse_host_used(fn: PciFunction, used: list[PciFunction], hint: str) -> None:
    """One line naming the first member the host uses (and how many more)."""
    if not used:
        return
    m = used[0]
    more = f" and {len(used) - 1} more" if len(used) > 1 else ""
    raise UnsafeError(
        f"IOMMU group {fn.iommu_group} of {fn.address} also holds {m.address} (class {m.class_code}, "
        f"driver {m.driver}){more}, which the host uses",
        hint,
    )
