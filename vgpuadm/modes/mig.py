"""MIG, the enabler of MIG-backed vGPU: MIG mode on a GPU and its GPU instances, driven through nvidia-smi
(reference §3.5). Plans are pure: they take the snapshot and the MIG state host/mig.py read. Where instances go is
the capacity model's (catalog/capacity.py place_gpu_instances); this mode checks the rest:

- MIG mode changes are refused while a vGPU exists on the GPU (nvidia-smi refuses too) and disabling while GPU
  instances exist; a GPU without MIG profiles has no MIG.
- A GPU instance a vGPU runs on is not destroyed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from vgpuadm.catalog.capacity import place_gpu_instances
from vgpuadm.catalog.mig import MigGpu, MigInstance
from vgpuadm.errors import ConflictError, NotFoundError, UsageError
from vgpuadm.model import HostSnapshot, Layout
from vgpuadm.modes.base import HostdevSpec, Mode
from vgpuadm.steps import CreateGpuInstance, DestroyGpuInstance, SetMigMode, Step


class MigMode(Mode):
    name: ClassVar[str] = "mig"
    layouts: ClassVar[tuple[Layout, ...]] = ()

    def validate(self, snapshot: HostSnapshot, device_id: str) -> None:
        raise UsageError(f"{device_id}: MIG instances are not devices a VM takes", "give the VM a MIG-backed type")

    def hostdev_spec(self, snapshot: HostSnapshot, device_id: str) -> HostdevSpec:
        raise UsageError(f"{device_id}: MIG instances are not devices a VM takes", "give the VM a MIG-backed type")

    def gpu(self, gpus: Sequence[MigGpu], address: str) -> MigGpu:
        g = next((g for g in gpus if g.address == address), None)
        if g is None:
            known = ", ".join(x.address for x in gpus) or "none"
            raise NotFoundError(f"nvidia-smi reports no GPU {address}", f"GPUs nvidia-smi reports: {known}")
        if not g.mig_capable:
            raise UsageError(f"{address} ({g.product}) has no MIG", "MIG needs an A100, A30, H100, H200, B200 or "
                             "RTX PRO 6000 class GPU; see `vgpuadm mig status`")  # fmt: skip
        return g

    def _vgpus_on(self, snapshot: HostSnapshot, address: str) -> list[str]:
        fn = snapshot.functions.get(address)
        vfs = set(fn.virtfns) if fn else set()
        busy = [m.uuid for m in snapshot.mdevs.values() if m.parent in vfs or m.parent == address]
        busy += [vf.address for vf in snapshot.vendor_vfs.values() if vf.address in vfs and vf.current_type]
        return busy

    def _check_idle(self, snapshot: HostSnapshot, g: MigGpu, verb: str) -> None:
        busy = self._vgpus_on(snapshot, g.address)
        if busy:
            raise ConflictError(
                f"cannot {verb} MIG mode on {g.address}: {len(busy)} vGPU{'s' if len(busy) > 1 else ''} run on it "
                f"({', '.join(busy[:3])}{'…' if len(busy) > 3 else ''})",
                "destroy them first (`vgpuadm devices --gpu " + g.address + "` lists them)",
            )

    def plan_enable(self, snapshot: HostSnapshot, gpus: Sequence[MigGpu], address: str) -> list[Step]:
        g = self.gpu(gpus, address)
        if "Enabled" in (g.mig_current, g.mig_pending) and g.mig_pending != "Disabled":
            return []
        self._check_idle(snapshot, g, "enable")
        return [SetMigMode(g.address, g.index, True)]

    def plan_disable(self, snapshot: HostSnapshot, gpus: Sequence[MigGpu], address: str) -> list[Step]:
        g = self.gpu(gpus, address)
        if g.mig_current == "Disabled" and g.mig_pending == "Disabled":
            return []
        if g.instances:
            raise ConflictError(f"{g.address} still has {len(g.instances)} GPU instance"
                                f"{'s' if len(g.instances) > 1 else ''}",
                                f"destroy them first: vgpuadm mig destroy --gpu {g.address} --all")  # fmt: skip
        self._check_idle(snapshot, g, "disable")
        return [SetMigMode(g.address, g.index, False)]

    def plan_create(
        self, gpus: Sequence[MigGpu], address: str, profile: str, count: int = 1, start: int | None = None
    ) -> list[Step]:
        g = self.gpu(gpus, address)
        p = g.profile(profile)
        if p is None:
            raise UsageError(f'{g.address} offers no MIG profile "{profile}"',
                             f"profiles: {', '.join(x.name for x in g.profiles)} (`vgpuadm mig profiles`)")  # fmt: skip
        if not g.enabled:
            state = "pending until a GPU reset" if g.mig_pending == "Enabled" else "off"
            raise ConflictError(f"MIG mode is {state} on {g.address}", f"vgpuadm mig enable --gpu {g.address}"
                                + (" (then reset the GPU or reboot)" if state != "off" else ""))  # fmt: skip
        return [CreateGpuInstance(g.address, g.index, p.name, p.profile_id, s)
                for s in place_gpu_instances(g, p, count, start)]  # fmt: skip

    def plan_destroy(
        self, gpus: Sequence[MigGpu], address: str, instance_ids: Sequence[int] | None,
        owners: Mapping[str, str] | None = None,
    ) -> list[Step]:  # fmt: skip
        """`instance_ids` None: every instance of the GPU."""
        g = self.gpu(gpus, address)
        by_id = {gi.instance_id: gi for gi in g.instances}
        if instance_ids is None:
            targets: list[MigInstance] = sorted(g.instances, key=lambda gi: gi.instance_id)
        else:
            missing = [i for i in instance_ids if i not in by_id]
            if missing:
                raise NotFoundError(f"{g.address} has no GPU instance {missing[0]}",
                                    f"instances: {', '.join(str(i) for i in sorted(by_id)) or 'none'} "
                                    "(`vgpuadm mig instances`)")  # fmt: skip
            targets = [by_id[i] for i in instance_ids]
        for gi in targets:
            if gi.users:
                who = next((owners[u] for u in gi.users if owners and u in owners), None)
                raise ConflictError(
                    f"GPU instance {gi.instance_id} ({gi.name}) on {g.address} runs the vGPU on {gi.users[0]}"
                    + (f" of VM {who}" if who else ""),
                    "destroy that vGPU first (`vgpuadm destroy --vm NAME` or `vgpuadm vf clear`)",
                )
        return [DestroyGpuInstance(g.address, g.index, gi.instance_id, gi.name, gi.profile_id, gi.start)
                for gi in targets]  # fmt: skip

    def plan_for_vgpus(self, gpus: Sequence[MigGpu], needs: Sequence[tuple[str, str]]) -> list[Step]:
        """GPU instances for new MIG-backed vGPUs, `needs` holding (PF, GPU-instance profile) per vGPU: per PF
        and profile, one instance for each vGPU beyond the free ones, placed by the capacity model (seeing the
        instances planned before it). MIG mode must be on: only then does a GPU list its MIG-backed types."""
        counts: dict[tuple[str, str], int] = {}
        for need in needs:
            counts[need] = counts.get(need, 0) + 1
        planned: dict[str, list[MigInstance]] = {}
        out: list[Step] = []
        for (pf, profile), n in sorted(counts.items()):
            g = self.gpu(gpus, pf)
            free = sum(1 for gi in g.instances if gi.name == profile and not gi.users)
            if n <= free:
                continue
            g = replace(g, instances=g.instances + tuple(planned.get(pf, ())))
            steps = self.plan_create([g], pf, profile, n - free)
            for st in steps:
                assert isinstance(st, CreateGpuInstance)
                size = next(p.size for p in g.profiles if p.profile_id == st.profile_id)
                planned.setdefault(pf, []).append(MigInstance(st.profile, st.profile_id, -1, st.start, size,
                                                              ("planned",)))  # fmt: skip
            out += steps
        return out

    def with_planned(self, gpus: Sequence[MigGpu], steps: Sequence[Step]) -> list[MigGpu]:
        """`gpus` as they will be after `steps` create their instances (taken: the vGPUs planned with them)."""
        out = []
        for g in gpus:
            new = []
            for st in steps:
                if isinstance(st, CreateGpuInstance) and st.address == g.address:
                    size = next((p.size for p in g.profiles if p.profile_id == st.profile_id), 1)
                    new.append(MigInstance(st.profile, st.profile_id, -1, st.start, size, ("planned",)))
            out.append(replace(g, instances=g.instances + tuple(new)) if new else g)
        return out


MODE = MigMode()
