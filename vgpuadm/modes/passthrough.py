"""Layout D: whole-function passthrough. Binds the WHOLE IOMMU group to vfio-pci and gives it back.

Viability (reference §5.3, the rule in catalog/iommu.py): bridges (class 0x0604xx or a pci_bus/ dir) are ignored; every other member must end up
on vfio-pci. Functions in the GPU's own slot (HD audio, USB-C) are its companions and go along; any other member
bound to a host driver (a NIC, a storage controller) makes the group unsafe unless --force. A boot_vga GPU is
refused unless --force. Each function's original driver is recorded (RecordDrivers) so restore can rebind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import ClassVar

from vgpuadm.catalog import iommu
from vgpuadm.catalog.migration import Landing, TargetHost
from vgpuadm.errors import ConflictError, NotFoundError, UnsafeError, VgpuadmError
from vgpuadm.model import PCI_KEY, Allocation, HostSnapshot, Layout, PciFunction
from vgpuadm.modes.base import HostdevSpec, Mode, Rebuild
from vgpuadm.steps import (
    Bind,
    DriversProbe,
    ForgetDrivers,
    Plan,
    RecordDrivers,
    SetDriverOverride,
    Step,
    Unbind,
)
from vgpuadm.usage import DriverUsage, GpuUsage
from vgpuadm.virt import xml

VFIO = "vfio-pci"


class PassthroughMode(Mode):
    name: ClassVar[str] = "pci"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.PASSTHROUGH,)
    restore_phase: ClassVar[str | None] = "vfio"
    reset_loses: ClassVar[tuple[str, ...]] = ("vfio-pci binds of the GPU's functions",)  # native driver again
    whole_gpu: ClassVar[bool] = True

    def find(self, snapshot: HostSnapshot, gpu: str) -> PciFunction:
        fn = snapshot.functions.get(gpu)
        if fn is None:
            raise NotFoundError(
                f"No PCI function {gpu} on this host", snapshot.skipped(gpu, "run `vgpuadm gpus` to list GPUs")
            )
        return fn

    def endpoints(self, snapshot: HostSnapshot, gpu: str) -> list[PciFunction]:
        """The group's non-bridge members, the GPU first."""
        return iommu.endpoints(snapshot, self.find(snapshot, gpu))

    # -- migration (plan/migration.py) -----------------------------------------------------------------------------

    def live_move(self, a: Allocation) -> str | None:
        """vfio-pci has no migration for a whole GPU (only vendor VFIO variant drivers do, for their vGPUs)."""
        return "a GPU passed through whole (vfio-pci) has no live migration"

    def room_on(self, snapshot: HostSnapshot, target: TargetHost, a: Allocation, taken: Counter[str]) -> Landing:
        """A free whole GPU of the same vendor and device id on the target; the GPU's companions (its audio) go
        with it and take nothing of their own."""
        if a.address != a.parent:
            return Landing()
        fn = snapshot.functions.get(a.address or "")
        vendor, device = (fn.vendor_id, fn.device_id) if fn is not None else (None, None)
        free = target.whole_gpus(vendor, device, taken)
        if not free:
            model = snapshot.models.get(a.address or "") or f"{vendor}:{device}"
            return Landing(why_not=f"the target has no free whole {model} GPU")
        return Landing(take=f"gpu@{free[0].address}", gpu=free[0].address)

    def move_refusal(self, a: Allocation) -> str | None:
        """A whole GPU is the operator's to choose on the target (its IOMMU group, its boot VGA role): vgpuadm does
        not pick one for a moved VM."""
        gpu = a.parent or a.address
        return (f"a GPU passed through whole ({gpu}) is not moved by vgpuadm: release it (vgpuadm release --gpu "
                f"{gpu}), move the VM, then pass a GPU through on the target (vgpuadm passthrough)")  # fmt: skip

    def usage(self, snapshot: HostSnapshot, a: Allocation, driver: DriverUsage) -> GpuUsage | None:
        """A whole GPU has no vGPU record: its GPU's own figures, when the host driver still sees it (bound to
        vfio-pci for a guest it does not: then there are none)."""
        return driver.gpus.get(a.address or "")

    def validate(self, snapshot: HostSnapshot, device_id: str, force: bool = False) -> None:
        fn = self.find(snapshot, device_id)
        if fn.boot_vga and not force:
            raise UnsafeError(
                f"{fn.address} is the boot VGA device (boot_vga=1); the host console uses it",
                "pass --force if the host console is expendable",
            )
        vgpus = [m.uuid for m in snapshot.mdevs.values() if snapshot.physical_gpu(m.parent) == fn.address]
        vgpus += [v.address for v in snapshot.vendor_vfs.values() if v.in_use and v.physfn == fn.address]
        if vgpus or fn.sriov_num_vfs:
            raise ConflictError(
                f"{fn.address} hosts vGPUs or VFs ({', '.join(vgpus[:3]) or f'{fn.sriov_num_vfs} VFs'})",
                "remove its vGPUs and disable its VFs before passing the whole GPU through",
            )
        if not force:
            companions = [m.address for m in self.endpoints(snapshot, device_id) if m.slot == fn.slot]
            iommu.refuse_host_used(
                fn,
                iommu.host_used(snapshot, fn, companions),
                "move the card to a slot with its own IOMMU group, or pass --force to give the whole group to vfio-pci",
            )

    def plan_bind(self, snapshot: HostSnapshot, gpu: str, force: bool = False) -> list[Step]:
        self.validate(snapshot, gpu, force)
        todo = [m for m in self.endpoints(snapshot, gpu) if m.driver != VFIO]
        if not todo:
            return []
        steps: list[Step] = [RecordDrivers(tuple((m.address, m.driver or "") for m in todo))]
        for m in todo:
            # Unbind before setting the override (the reverse of libvirt's order) so that a rollback rebinds the
            # original driver only after the override is cleared: bind refuses (ENODEV) while it names vfio-pci.
            if m.driver:
                steps.append(Unbind(m.address, m.driver))
            if m.driver_override != VFIO:
                steps.append(SetDriverOverride(m.address, VFIO, previous=m.driver_override or ""))
            steps.append(DriversProbe(m.address, VFIO))
        return steps

    def plan_restore(self, snapshot: HostSnapshot, gpu: str, original: dict[str, str]) -> list[Step]:
        """Give each vfio-pci function back: unbind, clear driver_override, bind the remembered driver (or let
        drivers_probe pick the native one when none was remembered)."""
        steps: list[Step] = []
        forgotten = []
        for m in self.endpoints(snapshot, gpu):
            if m.driver != VFIO and m.driver_override != VFIO:
                continue
            if m.driver == VFIO:
                steps.append(Unbind(m.address, VFIO))
            if m.driver_override:
                steps.append(SetDriverOverride(m.address, "", previous=m.driver_override))
            if m.address in original:
                forgotten.append((m.address, original[m.address]))
                if original[m.address]:
                    steps.append(Bind(m.address, original[m.address]))
            else:
                steps.append(DriversProbe(m.address))
        if forgotten:
            steps.append(ForgetDrivers(tuple(forgotten)))
        return steps

    def plan_free(self, snapshot: HostSnapshot, a: Allocation, drivers: Mapping[str, str]) -> list[Step]:
        gpu = a.parent or a.address
        return self.plan_restore(snapshot, gpu, dict(drivers)) if gpu and gpu in snapshot.functions else []

    def missing(self, snapshot: HostSnapshot, a: Allocation) -> bool:
        return (a.address or "") not in snapshot.functions

    def plan_line(self, a: Allocation) -> str:
        return f"passthrough {a.address}"

    def handle(self, a: Allocation) -> str:
        return a.parent or a.address or ""  # the GPU: its IOMMU group's functions go with it

    def hostdev_xml(self, a: Allocation) -> str:
        extra = a.extra
        return xml.pci_hostdev(
            xml.require(a, a.address, "address"),
            managed=extra.get("managed", "yes") == "yes",
            rom_bar=xml.on(extra.get("rom_bar")),
            rom_file=extra.get("rom_file"),
            rom_enabled=xml.on(extra.get("rom_enabled")),
            guest_address=xml.guest_address(a),
        )

    def adopt(self, snapshot: HostSnapshot, ref: xml.HostdevRef, domain: str, domain_uuid: str, slot: int
              ) -> Allocation | None:  # fmt: skip
        """A whole function of a GPU (or a companion in its slot) that no vGPU layout uses; its GPU is the
        function 0 of its slot when that is a GPU (the handle `release` and `destroy --uuid` name)."""
        fn = snapshot.functions.get(ref.key) if ref.kind == PCI_KEY else None
        pooled = any(ref.key in pool.vfs for pool in snapshot.vf_pools.values())
        if fn is None or pooled or ref.key in snapshot.vendor_vfs or ref.key in snapshot.mdev_parents:
            return None
        head = snapshot.functions.get(f"{fn.slot}.0")
        gpu = head.address if head is not None and head.is_display else fn.address
        extra = {
            "managed": "yes" if ref.managed else "no",
            "host_driver": (fn.driver or "") if fn.driver != VFIO else "",
        }
        if ref.guest_address is not None:
            extra["guest_address"] = str(ref.guest_address)
            if ref.guest_address.multifunction:
                extra["multifunction"] = "on"
        return Allocation(domain, self.name, None, gpu, address=fn.address, domain_uuid=domain_uuid, slot=slot,
                          extra=extra)  # fmt: skip

    # -- restore after a reboot ---------------------------------------------------------------------------------

    def plan_rebuild(self, snapshot: HostSnapshot, a: Allocation, done: set[str]) -> Rebuild:
        """The GPU's whole IOMMU group bound to vfio-pci again (vgpuadm binds it when it gives the GPU to a guest,
        managed or not: the safe sequence, reference §5.2, §5.3), once per group."""
        gpu = a.parent or a.address
        if not gpu or gpu in done:
            return [], []
        if gpu not in snapshot.functions:
            return [], [f"{a.domain}: PCI function {gpu} does not exist"]
        done.update(snapshot.group_members(gpu))
        try:
            steps = self.plan_bind(snapshot, gpu)
        except VgpuadmError as exc:
            return [], [f"{a.domain}: {gpu}: {exc.message}"]
        return ([Plan.of(steps, f"bind the IOMMU group of {gpu} to vfio-pci")] if steps else []), []

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        return {
            "mode": "pci",
            "functions": [m.address for m in self.endpoints(snapshot, device_id)],
            "managed": "yes",
        }


MODE = PassthroughMode()
