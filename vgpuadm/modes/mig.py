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
from vgpuadm.catalog.mig import MigGpu, MigInstance, recorded_instance
from vgpuadm.catalog.vendor_types import vendor_vf_types
from vgpuadm.errors import FREE, ConflictError, NotFoundError, UsageError
from vgpuadm.model import Allocation, HostSnapshot, Layout, describe_nvidia_name, nvidia_type_id
from vgpuadm.modes.base import HostdevSpec, Mode
from vgpuadm.steps import CreateGpuInstance, DestroyGpuInstance, SetMigMode, Step


class MigMode(Mode):
    name: ClassVar[str] = "mig"
    layouts: ClassVar[tuple[Layout, ...]] = ()
    # GPU instances never survive a reset; MIG mode does not on Hopper and newer (cozystack#70, NVIDIA
    # gpu-operator#2600), while on Ampere it does (reference §7). Restore turns it on wherever it is off.
    reset_loses: ClassVar[tuple[str, ...]] = ("GPU instances", "MIG mode (Hopper and newer)")

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
                f"cannot {verb} MIG mode on {g.address}: {len(busy)} vGPU{'s run' if len(busy) > 1 else ' runs'} on it "
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
                    f"{FREE}then destroy the GPU instance",
                    blockers=[(u, "vf clear") for u in gi.users],
                )
        return [DestroyGpuInstance(g.address, g.index, gi.instance_id, gi.name, gi.profile_id, gi.start)
                for gi in targets]  # fmt: skip

    def plan_for_vgpus(
        self, snapshot: HostSnapshot, gpus: Sequence[MigGpu], needs: Sequence[tuple[str, str, int]]
    ) -> list[Step]:
        """What new MIG-backed vGPUs need first, `needs` holding (PF, GPU-instance profile, vGPUs one instance
        holds) per vGPU: MIG mode on where it is off (refused while a vGPU runs on the GPU or while the change waits
        for a reset), then per PF and profile the instances for the vGPUs the room left on existing ones does not
        hold, placed by the capacity model (seeing the instances planned before it)."""
        counts: dict[tuple[str, str, int], int] = {}
        for need in needs:
            counts[need] = counts.get(need, 0) + 1
        planned: dict[str, list[MigInstance]] = {}
        out: list[Step] = []
        on: set[str] = set()
        for (pf, profile, per), n in sorted(counts.items()):
            g = self.gpu(gpus, pf)
            if not g.enabled and pf not in on:
                out += self.plan_enable_now(snapshot, g)
                on.add(pf)
            if pf in on:
                g = replace(g, mig_current="Enabled", mig_pending="Enabled")
            room = sum(max(per - len(gi.users), 0) for gi in g.instances if gi.name == profile)
            if n <= room:
                continue
            g = replace(g, instances=g.instances + tuple(planned.get(pf, ())))
            steps = self.plan_create([g], pf, profile, -(-(n - room) // per))
            for st in steps:
                assert isinstance(st, CreateGpuInstance)
                size = next(p.size for p in g.profiles if p.profile_id == st.profile_id)
                planned.setdefault(pf, []).append(MigInstance(st.profile, st.profile_id, -1, st.start, size,
                                                              ("planned",)))  # fmt: skip
            out += steps
        return out

    def plan_release(self, snapshot: HostSnapshot, gpus: Sequence[MigGpu], gone: Sequence[Allocation]) -> list[Step]:
        """The GPU instances vgpuadm made for the vGPUs in `gone` (recorded as `mig_instance` = profile id:start),
        destroyed once those vGPUs are: each only while it is there and no other vGPU runs on it. An instance
        nobody recorded — made by hand — is never touched."""
        freed = {d for a in gone for d in (a.uuid, a.address, a.parent) if d}  # layout B: the mdev UUID
        out: list[Step] = []
        for a in gone:
            made = recorded_instance(a.extra)
            if made is None:
                continue
            pf = snapshot.physical_gpu(a.address or a.parent or "")
            g = next((g for g in gpus if g.address == pf), None)
            gi = next((gi for gi in (g.instances if g else ()) if (gi.profile_id, gi.start) == made),
                      None)  # fmt: skip
            if g is None or gi is None or set(gi.users) - freed:
                continue
            st = DestroyGpuInstance(g.address, g.index, gi.instance_id, gi.name, gi.profile_id, gi.start)
            if st not in out:
                out.append(st)
        return out

    def plan_enable_now(self, snapshot: HostSnapshot, g: MigGpu) -> list[Step]:
        """MIG mode on, in effect before the next step (GPU instances follow it): a change already waiting for a
        GPU reset is refused here, one the board leaves pending is refused by the step (nothing changed)."""
        if g.mig_pending == "Enabled" and not g.enabled:
            raise ConflictError(f"MIG mode on {g.address} is pending until a GPU reset",
                                f"reset the GPU (`nvidia-smi -r -i {g.index}`, no VM may use it) or reboot, then run "
                                "this command again")  # fmt: skip
        self._check_idle(snapshot, g, "enable")
        return [SetMigMode(g.address, g.index, True, effective=True)]

    def project(
        self,
        snapshot: HostSnapshot,
        gpus: Sequence[MigGpu],
        supported: Mapping[str, Sequence[tuple[int, str]]],
        *,
        blocked_too: bool = False,
    ) -> HostSnapshot:
        """The snapshot as the driver will list it once the MIG-backed vGPUs' prerequisites exist: on every
        MIG-capable GPU with MIG on, or off and idle (no vGPU, no change pending), each free VF offers the GPU's
        MIG-backed types — layout C from `supported` (`nvidia-smi vgpu -s -v`, PF → (type id, name)), layout B
        from the VF's own mdev types. Whether their GPU instances fit is plan_for_vgpus' (the capacity model).
        `blocked_too`: also the GPUs whose MIG mode cannot go on now, so that planning on them says why."""
        vfs = dict(snapshot.vendor_vfs)
        parents = dict(snapshot.mdev_parents)
        busy = {m.parent for m in snapshot.mdevs.values()}
        for g in gpus:
            if not g.mig_capable or g.address not in snapshot.functions:
                continue
            blocked = g.mig_pending == "Enabled" or bool(self._vgpus_on(snapshot, g.address))
            if not g.enabled and blocked and not blocked_too:
                continue
            mig_types = [(n, name) for n, name in supported.get(g.address, ()) if describe_nvidia_name(name).slices]
            for addr in snapshot.functions[g.address].virtfns:
                vf = vfs.get(addr)
                if vf is not None and not vf.in_use and mig_types:
                    new = {t.type_id: t for t in vendor_vf_types(addr, mig_types)}
                    offered = tuple(t for t in vf.offered if t.type_id not in new) + tuple(new.values())
                    creatable = tuple(c for c in vf.creatable if nvidia_type_id(c[0]) not in new) + tuple(mig_types)
                    vfs[addr] = replace(vf, offered=offered, creatable=creatable)
                q = parents.get(addr)
                if q is not None and q.layout == Layout.MDEV_VF and addr not in busy:
                    types = tuple(t.with_available(1) if "mig_slices" in t.attributes else t for t in q.types)
                    parents[addr] = replace(q, types=types)
        return replace(snapshot, vendor_vfs=vfs, mdev_parents=parents)


MODE = MigMode()
