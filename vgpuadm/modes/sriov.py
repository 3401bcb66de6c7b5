"""SR-IOV enablers: turn a PF's VFs on or off. Generic PFs take `sriov_numvfs` (through 0 when changing, since the
kernel refuses N→M with EBUSY); NVIDIA PFs bound to `nvidia` need /usr/lib/nvidia/sriov-manage (reference §3.1);
AMD's GIM sets them only when it loads (catalog/sriov_boards.py LOAD_TIME_VFS)."""

from __future__ import annotations

from typing import ClassVar

from vgpuadm.catalog.sriov_boards import check_vfs_settable
from vgpuadm.errors import FREE, Blocker, ConflictError, NotFoundError, UsageError
from vgpuadm.model import HostSnapshot, Layout, PciFunction
from vgpuadm.modes.base import HostdevSpec, Mode
from vgpuadm.steps import SRIOV_MANAGE, SetNumVfs, SriovManage, Step


class SriovMode(Mode):
    name: ClassVar[str] = "sriov"
    layouts: ClassVar[tuple[Layout, ...]] = (Layout.SRIOV_PF,)
    # the driver sets the GPU up again with SR-IOV off: sriov-manage (or sriov_numvfs) must enable the VFs again
    reset_loses: ClassVar[tuple[str, ...]] = ("SR-IOV VFs",)

    def find(self, snapshot: HostSnapshot, pf: str) -> PciFunction:
        fn = snapshot.functions.get(pf)
        if fn is None:
            raise NotFoundError(
                f"No PCI function {pf} on this host", snapshot.skipped(pf, "run `vgpuadm gpus` to list GPUs")
            )
        if fn.is_vf:
            raise UsageError(f"{pf} is a VF, not a PF", f"name its PF {fn.physfn}")
        if not fn.sriov_total_vfs:
            raise UsageError(f"{pf} is not SR-IOV capable (no sriov_totalvfs)", "pick a PF that lists VFs in `gpus`")
        return fn

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        self.find(snapshot, device_id)

    def _check_vfs_free(self, snapshot: HostSnapshot, fn: PciFunction) -> None:
        busy: list[Blocker] = [(m.uuid, "mdev remove") for m in snapshot.mdevs.values() if m.parent in fn.virtfns]
        busy += [(vf.address, "vf clear") for vf in snapshot.vendor_vfs.values()
                 if vf.in_use and vf.address in fn.virtfns]  # fmt: skip
        busy += [(a, "vfio unbind") for a in fn.virtfns
                 if snapshot.functions.get(a) and snapshot.functions[a].driver == "vfio-pci"]  # fmt: skip
        if busy:
            listed = [dev for dev, _ in busy]
            raise ConflictError(
                f"VFs of {fn.address} are in use ({', '.join(listed[:3])}{'…' if len(listed) > 3 else ''})",
                f"{FREE}then run this again",
                blockers=busy,
            )

    def plan_enable(
        self, snapshot: HostSnapshot, pf: str, num: int | None = None, *, sriov_manage: bool = False
    ) -> list[Step]:
        fn = self.find(snapshot, pf)
        total = fn.sriov_total_vfs or 0
        current = fn.sriov_num_vfs or 0
        wanted = total if num is None else num
        if wanted < 1 or wanted > total:
            raise UsageError(f"--num {wanted} is out of range for {pf}", f"choose 1…{total} (sriov_totalvfs)")
        if fn.driver == "nvidia":
            if num is not None and num != total:
                raise UsageError(f"{pf} is an NVIDIA PF; sriov-manage enables all {total} VFs, not {num}", "omit --num")
            if current:
                return []
            if not sriov_manage:
                raise UsageError(
                    f"{pf} is bound to nvidia, which cannot enable VFs through sriov_numvfs, and {SRIOV_MANAGE} "
                    "is not installed",
                    "install the NVIDIA vGPU host driver (it ships sriov-manage)",
                )
            return [SriovManage(pf, True)]
        if fn.driver is None:
            raise UsageError(
                f"{pf} has no driver, so the kernel cannot enable its VFs (ENOENT)", "bind the PF to its driver first"
            )
        if current == wanted:
            return []
        check_vfs_settable(pf, fn.driver, wanted)
        if current:
            self._check_vfs_free(snapshot, fn)
            return [SetNumVfs(pf, 0, current), SetNumVfs(pf, wanted, 0)]
        return [SetNumVfs(pf, wanted, 0)]

    def plan_disable(self, snapshot: HostSnapshot, pf: str, *, sriov_manage: bool = False) -> list[Step]:
        fn = self.find(snapshot, pf)
        current = fn.sriov_num_vfs or 0
        if not current:
            return []
        self._check_vfs_free(snapshot, fn)
        if fn.driver == "nvidia":
            if not sriov_manage:
                raise UsageError(
                    f"{pf} is bound to nvidia and {SRIOV_MANAGE} is not installed",
                    "install the NVIDIA vGPU host driver (it ships sriov-manage)",
                )
            return [SriovManage(pf, False)]
        check_vfs_settable(pf, fn.driver, 0)
        return [SetNumVfs(pf, 0, current)]

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        raise UsageError(f"{device_id} is an SR-IOV PF, not a guest device", "give a guest one of its VFs")

    # -- reports ---------------------------------------------------------------------------------------------------

    needs_vfs: ClassVar[bool] = True


MODE = SriovMode()
