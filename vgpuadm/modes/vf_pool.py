"""Layout vf-pool: an AMD (GIM) or Intel (i915/xe) SR-IOV GPU whose VFs are handed to guests whole. A guest gets
one free VF bound to vfio-pci — or to the VFIO variant driver the host has for it (xe-vfio-pci, which adds live
migration) — as a `type='pci' managed='no'` hostdev: vgpuadm binds the VF itself, so libvirt must not rebind it
(libvirt 9's schema has no `<driver model=…>` to name a variant driver; docs/reference/sriov-gpus.md §4).

Taking a VF from a pool whose VFs are off enables all of them first, with sriov_drivers_autoprobe 0 so that no
host driver probes them; freeing it gives the VF back (unbound, or to the host driver it had) and leaves the pool
enabled: the other VFs may be in use, and disabling them is `vgpuadm sriov disable`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping
from typing import ClassVar

from vgpuadm.catalog import iommu
from vgpuadm.catalog.migration import Landing, TargetHost
from vgpuadm.catalog.sriov_boards import check_vfs_settable
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, VgpuadmError
from vgpuadm.model import Allocation, Holding, HostSnapshot, Layout, PciFunction, VfPool, VgpuType
from vgpuadm.modes.base import HostdevSpec, Instance, Made, Mode, Rebuild, type_room
from vgpuadm.steps import Bind, DriversProbe, Plan, SetDriverOverride, SetNumVfs, SetSriovAutoprobe, Step, Unbind
from vgpuadm.virt import xml

VFIO = "vfio-pci"
_DRIVER = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a driver name from metadata, before it becomes a sysfs path


class VfPoolMode(Mode):
    name: ClassVar[str] = "pool"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.VF_POOL,)
    holds: ClassVar[Holding] = Holding.POOL_VF
    restore_phase: ClassVar[str | None] = "vfio"
    reset_loses: ClassVar[tuple[str, ...]] = ("VF binds to vfio-pci",)  # with the VFs

    def find(self, snapshot: HostSnapshot, pf: str) -> VfPool:
        pool = snapshot.vf_pools.get(pf)
        if pool is None:
            raise NotFoundError(f"{pf} is not an SR-IOV VF pool", "run `vgpuadm gpus` and pick a GPU of layout vf-pool")
        return pool

    def pool_of(self, snapshot: HostSnapshot, vf: str) -> VfPool | None:
        return next((p for p in snapshot.vf_pools.values() if vf in p.vfs), None)

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        if device_id not in snapshot.vf_pools and self.pool_of(snapshot, device_id) is None:
            self.find(snapshot, device_id)

    def driver_for(self, pool: VfPool) -> str:
        """What a guest's VF is bound to: the variant driver when the host has one, else vfio-pci."""
        return pool.variant or VFIO

    def check_group(self, snapshot: HostSnapshot, pool: VfPool, fn: PciFunction) -> None:
        """A VF goes to its guest alone: refuse one whose IOMMU group holds anything else the host uses (no ACS
        between the VFs and their PF or a neighbour), as passthrough refuses such a group (catalog/iommu.py)."""
        iommu.refuse_host_used(
            fn,
            iommu.host_used(snapshot, fn, harmless=[pool.variant] if pool.variant else ()),
            "give the guest a VF of a GPU whose VFs have IOMMU groups of their own (ACS on the ports above it)",
        )

    def plan_take(
        self, snapshot: HostSnapshot, pf: str, exclude: Collection[str], enabling: set[str]
    ) -> tuple[list[Step], str, str]:
        """Steps that give one free VF of `pf` to a guest, the VF, and the host driver it had ("" for none).
        `exclude`: VFs other domains reference or this plan already took; `enabling`: PFs this plan already
        enables (updated), so the enable steps come once."""
        pool = self.find(snapshot, pf)
        vf = next((v for v in pool.free if v not in exclude), None)
        if vf is None:
            raise CapacityError(
                f"No free VF left on {pf} ({pool.num_vfs or pool.total_vfs} VFs, all given to guests)",
                "free one with `vgpuadm destroy --vm VM`, or pick another GPU",
            )
        steps: list[Step] = []
        if not pool.num_vfs and pf not in enabling:
            pf_fn = snapshot.functions.get(pf)
            check_vfs_settable(pf, pf_fn.driver if pf_fn is not None else None, pool.total_vfs)
            enabling.add(pf)
            if pool.autoprobe:
                steps.append(SetSriovAutoprobe(pf, False, True))
            steps.append(SetNumVfs(pf, pool.total_vfs, 0))
        fn = snapshot.functions.get(vf)
        if fn is not None:
            self.check_group(snapshot, pool, fn)
        host_driver = (fn.driver or "") if fn is not None else ""
        target = self.driver_for(pool)
        if host_driver:
            steps.append(Unbind(vf, host_driver))
        previous = (fn.driver_override or "") if fn is not None else ""
        if previous != target:
            steps.append(SetDriverOverride(vf, target, previous=previous))
        steps.append(DriversProbe(vf, target))
        return steps, vf, host_driver

    def plan_bind(self, snapshot: HostSnapshot, vf: str, host_driver: str = "") -> list[Step]:
        """Bind an existing VF to its pool's guest driver again (restore after a reboot); [] when it is bound."""
        pool = self.pool_of(snapshot, vf)
        fn = snapshot.functions.get(vf)
        if pool is None or fn is None:
            raise NotFoundError(f"VF {vf} does not exist", "enable its GPU's VFs (`vgpuadm sriov enable PF`)")
        target = self.driver_for(pool)
        self.check_group(snapshot, pool, fn)
        if fn.driver == target:
            return []
        if fn.driver and fn.driver in (VFIO, pool.variant):  # pool.variant is None without a variant driver
            raise ConflictError(
                f"VF {vf} is bound to {fn.driver}, not {target}", f"unbind it: `vgpuadm vfio unbind {vf}`"
            )
        steps: list[Step] = [Unbind(vf, fn.driver)] if fn.driver else []
        if fn.driver_override != target:
            steps.append(SetDriverOverride(vf, target, previous=fn.driver_override or ""))
        steps.append(DriversProbe(vf, target))
        return steps

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        fn = snapshot.functions.get(a.address or "")
        pool = self.pool_of(snapshot, a.address or "")
        if fn is None or pool is None:
            return []
        steps: list[Step] = []
        if fn.driver and fn.driver in (VFIO, pool.variant):
            steps.append(Unbind(fn.address, fn.driver))
        if fn.driver_override:
            steps.append(SetDriverOverride(fn.address, "", previous=fn.driver_override))
        host_driver = a.extra.get("host_driver", "")
        if host_driver and _DRIVER.match(host_driver) and fn.driver and fn.driver in (VFIO, pool.variant):
            steps.append(Bind(fn.address, host_driver))
        return steps

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        fn = snapshot.functions.get(a.address or "")
        pool = self.pool_of(snapshot, a.address or "")
        return fn is None or pool is None or fn.driver != self.driver_for(pool)

    # -- migration (plan/migration.py) -----------------------------------------------------------------------------

    def live_move(self, a: Allocation) -> str | None:
        """[I] The AMD and Intel SR-IOV GPU drivers offer no VFIO migration for their VFs."""
        return f"an SR-IOV VF of {a.type_id} has no live migration"

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        return type_room(snapshot, target, a, taken)

    def describe(self, a: Allocation) -> str:
        return f"VF {a.address} of {a.parent} ({a.type_id})"

    def hostdev_xml(self, a: Allocation) -> str:
        # vgpuadm binds a pool's VF itself: managed='no', as for a vendor-VFIO VF
        return xml.vf_hostdev(xml.require(a, a.address, "address"), guest_address=xml.guest_address(a))

    # -- restore after a reboot ---------------------------------------------------------------------------------

    def sriov_pf(self, snapshot: HostSnapshot, a: Allocation) -> str | None:
        return a.parent if a.parent in snapshot.vf_pools else None  # the pool the VF was taken from

    def plan_rebuild(self, snapshot: HostSnapshot, a: Allocation, done: set[str]) -> Rebuild:
        """The pool's VF bound for its guest again (vgpuadm binds it itself: managed='no')."""
        if not a.address:
            return [], []
        try:
            steps = self.plan_bind(snapshot, a.address)
        except VgpuadmError as exc:
            return [], [f"{a.domain}: {a.address}: {exc.message}"]
        return ([Plan.of(steps, f"bind VF {a.address} for its guest")] if steps else []), []

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        return {"mode": "pool", "address": device_id, "managed": "no"}

    # -- reports, placement, create planner ----------------------------------------------------------------------

    def present(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        fn = snapshot.functions.get(a.address or "")
        pool = snapshot.vf_pools.get(a.parent or "")
        return fn is not None and fn.driver is not None and fn.driver in ("vfio-pci", pool.variant if pool else None)

    def plan_instance(self, snapshot: HostSnapshot, t: VgpuType, ask: Instance) -> Made:
        # the device is a free VF of the pool, bound to vfio-pci for the guest; it takes no vgpu_params
        steps, vf, host_driver = self.plan_take(snapshot, t.parent, ask.exclude(), ask.enabling)
        return Made(tuple(steps), vf, self.name, t.type_id, t.parent, address=vf, extra={"host_driver": host_driver},
                    params=False)  # fmt: skip


MODE = VfPoolMode()
