"""Rebuilding a host after a reboot from the domains' vgpuadm metadata: the order of the work and the waiting.

Pure planning: each phase turns (allocations, a fresh snapshot) into a steps.Plan; the API runs the phases in
order, re-discovering between them, because each phase makes the devices the next one needs:

  driver  vendor driver bound to every PF a vGPU needs (nothing to do when the boot bound it)
  sriov   SR-IOV VFs enabled on the PFs whose VFs the allocations name (VFs vanish at reboot, reference §7)
  policies  heterogeneous (mixed-size) mode on again where the applied `gpus:` section or a recorded placement ID
          wants it (the mode does not survive a reboot), the scheduler where the driver did not load it
          (plan/policies.py)
  mig     MIG mode on, then each GPU instance vgpuadm made (recorded as `mig_instance`) at its recorded start, then
          for vGPUs on instances made by hand the instances the room left does not cover, placed by the capacity
          model
  vgpu    mdevs (layouts A/B) with the UUIDs the domain XML names, VF vGPU types (layout C) at their recorded
          placement IDs
  params  vgpu_params written after create and before the guest starts (reference §2.5)
  vfio    passthrough functions bound to vfio-pci again

Every phase is idempotent: what already matches produces no step, so a second restore plans nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from vgpuadm import modes
from vgpuadm.catalog.capacity import heterogeneous
from vgpuadm.catalog.mig import MigHost, MigInstance, recorded_instance
from vgpuadm.errors import NotFoundError, VgpuadmError
from vgpuadm.model import Allocation, DeviceMode, HostSnapshot
from vgpuadm.modes import mdev, mig, passthrough, sriov, vf_pool, vf_vgpu
from vgpuadm.modes.base import join_params, split_params
from vgpuadm.plan import policies
from vgpuadm.plan.desired import params_equal
from vgpuadm.steps import (
    CreateGpuInstance,
    DriversProbe,
    Plan,
    SetVgpuParams,
    Step,
)

PHASES = ("driver", "sriov", "policies", "mig", "vgpu", "params", "vfio")


@dataclass(frozen=True)
class PhasePlan:
    """A phase's work as independent units (one per device): a unit that fails is rolled back alone and the
    others still run, so one broken GPU does not keep every other guest from its devices."""

    phase: str
    units: tuple[Plan, ...] = ()
    problems: tuple[str, ...] = ()  # allocations this phase cannot restore, one line each
    skipped: tuple[str, ...] = ()  # work this version does not do (MIG)
    held: tuple[str, ...] = ()  # GPUs (PFs) whose later phases must not run: their MIG work could not be done

    def without_held(self, allocations: Sequence[Allocation], snap: HostSnapshot) -> list[Allocation]:
        """`allocations` less those on a held GPU (their vGPUs would only meet the driver's EIO)."""
        held = set(self.held)
        return [a for a in allocations if snap.physical_gpu(needed_device(a) or "") not in held]

    @property
    def empty(self) -> bool:
        return not self.units

    @property
    def steps(self) -> list[Step]:
        return [s for u in self.units for s in u.steps]


def _units(steps: Iterable[Step], summary: str) -> tuple[Plan, ...]:
    return tuple(Plan((s,), summary) for s in steps)


def needed_device(a: Allocation) -> str | None:
    """The host device an allocation lives on: the mdev parent, the layout C VF, or the passed-through function."""
    if a.mode == DeviceMode.MDEV:
        return a.parent
    return a.address or a.parent


def missing_devices(allocations: Iterable[Allocation], snap: HostSnapshot) -> list[str]:
    """Devices the allocations need that the host does not show yet (parents not registered, VFs not enabled)."""
    present: dict[str, set[str]] = {
        "mdev": set(snap.mdev_parents),
        "vf": set(snap.vendor_vfs),
        "pci": set(snap.functions),
        "pool": set(snap.functions),
    }
    out = {
        dev
        for a in allocations
        if (dev := needed_device(a)) is not None
        and dev not in present.get(a.mode, {dev})
        and not modes.for_name(a.mode).record_problem(a)
    }  # fmt: skip (a record rejected anyway: no wait)
    return sorted(out)


def all_present(allocations: Iterable[Allocation], snap: HostSnapshot) -> bool:
    return not missing_devices(allocations, snap)


def plan_phase(
    phase: str, allocations: Sequence[Allocation], snap: HostSnapshot, *, sriov_manage: bool = False,
    mig_host: MigHost | None = None, policy_state: str | None = None,
) -> PhasePlan:  # fmt: skip
    """The work of one phase. `sriov_manage`: NVIDIA's sriov-manage is installed (the only way to enable the VFs
    of a PF bound to nvidia). `mig_host`: the MIG state nvidia-smi reports (read when `needs_mig` says so)."""
    if phase == "sriov":
        return _sriov(allocations, snap, sriov_manage)
    if phase == "mig":
        return _mig(allocations, snap, mig_host)
    if phase == "policies":
        placed = {snap.physical_gpu(a.address) for a in allocations
                  if a.mode == DeviceMode.VF and a.address and "placement_id" in a.extra}  # fmt: skip
        return PhasePlan("policies", _units(policies.restore_steps(snap, policy_state, placed), "host policies"))
    builders: dict[str, Callable[[Sequence[Allocation], HostSnapshot], PhasePlan]] = {
        "driver": _driver,
        "vgpu": _vgpu,
        "params": _params,
        "vfio": _vfio,
    }
    return builders[phase](allocations, snap)


def _driver(allocs: Sequence[Allocation], snap: HostSnapshot) -> PhasePlan:
    # A PF that hosts vGPUs (directly, or through its VFs) must run its vendor driver; drivers_probe with no
    # override binds the native driver. A PF already bound to something (even vfio-pci) is left alone.
    steps: list[Step] = []
    for pf in _pfs_needed(allocs, snap):
        fn = snap.functions.get(pf)
        if fn is not None and fn.driver is None and not fn.driver_override:
            steps.append(DriversProbe(pf))
    return PhasePlan("driver", _units(steps, "bind vendor drivers"))


def _pfs_needed(allocs: Sequence[Allocation], snap: HostSnapshot) -> list[str]:
    pfs: set[str] = set()
    for dev in {needed_device(a) for a in allocs if a.mode in (DeviceMode.MDEV, DeviceMode.VF)}:
        if dev is None:
            continue
        if dev in snap.functions:
            pfs.add(snap.physical_gpu(dev))
        else:
            pfs.update(_candidate_pfs(dev, snap))
    return sorted(pfs)


def _candidate_pfs(dev: str, snap: HostSnapshot) -> list[str]:
    """PFs that could own the missing VF `dev`: SR-IOV PFs on its domain:bus (the VF offset varies by board, so the
    address cannot be computed, reference §3.1), else every SR-IOV PF with no VFs enabled."""
    sriov = [f for f in snap.functions.values() if not f.is_vf and (f.sriov_total_vfs or 0) > 0]
    bus = dev.rsplit(":", 1)[0]
    same_bus = [f.address for f in sriov if f.address.rsplit(":", 1)[0] == bus]
    return same_bus or [f.address for f in sriov if not f.sriov_num_vfs]


def _sriov(allocs: Sequence[Allocation], snap: HostSnapshot, sriov_manage: bool) -> PhasePlan:
    # The SR-IOV mode's enable sequence: NVIDIA's sriov-manage for PFs bound to nvidia (the driver has no
    # sriov_configure), sriov_numvfs = sriov_totalvfs otherwise.
    units: list[Plan] = []
    problems: list[str] = []
    pfs: set[str] = set()
    pool_pfs = {a.address: a.parent for a in allocs if a.mode == DeviceMode.POOL and a.parent in snap.vf_pools}
    for dev in missing_devices(allocs, snap):
        pfs.update([pool_pfs[dev]] if dev in pool_pfs else _candidate_pfs(dev, snap))
    for pf in sorted(pfs):
        try:
            steps = sriov.MODE.plan_enable(snap, pf, sriov_manage=sriov_manage)
        except VgpuadmError as exc:
            problems.append(f"{pf}: {exc.message}")
            continue
        if steps:
            units.append(Plan.of(steps, f"enable the VFs of {pf}"))
    return PhasePlan("sriov", tuple(units), tuple(problems))


def needs_mig(allocs: Sequence[Allocation], snap: HostSnapshot) -> bool:
    """Whether an allocation is of a MIG-backed type (then the mig phase reads the MIG state)."""
    return any(_is_mig_backed(a, snap) for a in allocs)


def _mig(allocs: Sequence[Allocation], snap: HostSnapshot, mig_host: MigHost | None) -> PhasePlan:
    """Per GPU, one unit: MIG mode on where it is off, then each GPU instance vgpuadm recorded (`mig_instance`) at
    its recorded start, then — for MIG-backed vGPUs on instances made by hand — the instances the room left does not
    cover, placed by the capacity model (GPU instances do not survive a reboot; MIG mode does, reference §3.5). A
    recorded start that is taken or not a placement of its profile is a problem naming the domain, and nothing is
    done on that GPU."""
    host = mig_host or MigHost((), {})
    names = {t.type_id: t.name for t in snap.types()}
    wanted: dict[str, list[Allocation]] = {}
    for a in allocs:
        if not _is_mig_backed(a, snap) or _vgpu_exists(a, snap):  # a vGPU that exists sits on its GPU instance
            continue
        dev = needed_device(a)
        if dev is not None and dev in snap.functions:
            pf = snap.physical_gpu(dev)
        else:
            candidates = _candidate_pfs(dev or "", snap)
            pf = candidates[0] if candidates else ""
        wanted.setdefault(pf, []).append(a)
    units: list[Plan] = []
    problems: list[str] = []
    held: list[str] = []
    for pf, owners in sorted(wanted.items()):
        try:
            g = mig.MODE.gpu(host.gpus, pf)
            steps = mig.MODE.plan_enable(snap, host.gpus, pf) if not g.enabled else []
            if steps:  # planned in this phase: the creates after it see MIG on (a board needing a reset fails them)
                g = replace(g, mig_current="Enabled", mig_pending="Enabled")
            # in the order they were made (the first vGPU recording each, by domain and slot): the driver binds
            # each vGPU to the lowest-numbered instance with room, so the vGPUs land as they did before
            for (pid, start), who in sorted(_by_record(owners).items(),
                                            key=lambda kv: min((a.domain, a.slot) for a in kv[1])):  # fmt: skip
                if any((gi.profile_id, gi.start) == (pid, start) for gi in g.instances):
                    continue
                p = g.profile(str(pid))
                try:
                    if p is None:
                        raise NotFoundError(f"{pf} offers no MIG profile {pid}", "")
                    made = mig.MODE.plan_create([g], pf, p.name, 1, start)
                except VgpuadmError as exc:
                    raise type(exc)(
                        f"domain {who[0].domain}: GPU instance {p.name if p else pid} recorded at slot {start} on "
                        f"{pf}: {exc.message} (destroy what is in the way with `vgpuadm mig destroy`, or "
                        f"`vgpuadm destroy --vm {who[0].domain}` and create its vGPUs again)",
                        exc.hint,
                    ) from None
                steps += made
                g = replace(g, instances=(*g.instances, MigInstance(p.name, pid, -1, start, p.size, tuple(
                    _key(a) for a in who))))  # fmt: skip
            by_profile: dict[tuple[str, int], list[Allocation]] = {}
            for a in owners:
                need = host.need(pf, a.type_id or "", names.get(a.type_id or "", ""))
                if need is not None and recorded_instance(a.extra) is None:
                    by_profile.setdefault(need, []).append(a)
            for (profile, per), rest in sorted(by_profile.items()):
                room = sum(max(per - len(gi.users), 0) for gi in g.instances if gi.name == profile)
                missing = -(-(len(rest) - room) // per)
                if missing > 0:
                    made = mig.MODE.plan_create([g], pf, profile, missing)
                    steps += made
                    sizes = {x.profile_id: x.size for x in g.profiles}
                    g = replace(g, instances=(*g.instances, *(MigInstance(
                        st.profile, st.profile_id, -1, st.start, sizes.get(st.profile_id, 1), ("planned",) * per)
                        for st in made if isinstance(st, CreateGpuInstance))))  # fmt: skip
            if steps:
                units.append(Plan.of(steps, f"MIG mode and GPU instances on {pf}"))
        except VgpuadmError as exc:
            problems.append(exc.message if exc.message.startswith("domain ") else f"{pf}: {exc.message}")
            held.append(pf)
    return PhasePlan("mig", tuple(units), tuple(problems), held=tuple(held))


def _key(a: Allocation) -> str:
    return a.uuid or a.address or ""


def _by_record(owners: Sequence[Allocation]) -> dict[tuple[int, int], list[Allocation]]:
    out: dict[tuple[int, int], list[Allocation]] = {}
    for a in owners:
        rec = recorded_instance(a.extra)
        if rec is not None:
            out.setdefault(rec, []).append(a)
    return out


def _vgpu_exists(a: Allocation, snap: HostSnapshot) -> bool:
    if a.mode == DeviceMode.MDEV:
        return bool(a.uuid) and a.uuid in snap.mdevs
    vf = snap.vendor_vfs.get(a.address or "")
    return vf is not None and a.type_id == f"nvidia-{vf.current_type}"


def _is_mig_backed(a: Allocation, snap: HostSnapshot) -> bool:
    for t in snap.types():
        if t.type_id == a.type_id:  # after a reboot the allocation's own VF may not list it yet
            return bool(t.attributes.get("mig_slices"))
    return False


def _vgpu(allocs: Sequence[Allocation], snap: HostSnapshot) -> PhasePlan:
    steps: list[Step] = []
    problems: list[str] = []
    for a in sorted(allocs, key=lambda a: (a.domain, a.slot)):
        if a.mode == DeviceMode.MDEV and a.uuid and a.parent and a.type_id:
            have = snap.mdevs.get(a.uuid)
            if have is None:
                parent = snap.mdev_parents.get(a.parent)
                t = next((t for t in parent.types if t.type_id == a.type_id), None) if parent else None
                if parent is None:
                    problems.append(f"{a.domain}: mdev {a.uuid} — parent {a.parent} has not registered")
                elif t is None:
                    problems.append(f"{a.domain}: mdev {a.uuid} — parent {a.parent} offers no type {a.type_id}")
                else:
                    try:  # the mdev mode's own checks (UUID grammar, conflicts); parameters follow in their phase
                        steps += mdev.MODE.plan_create(snap, t, a.uuid)
                    except VgpuadmError as exc:
                        problems.append(f"{a.domain}: mdev {a.uuid}: {exc.message}")
            elif (have.parent, have.type_id) != (a.parent, a.type_id):
                problems.append(
                    f"{a.domain}: mdev {a.uuid} exists as {have.type_id} on {have.parent}, "
                    f"the domain wants {a.type_id} on {a.parent}"
                )
        elif a.mode == DeviceMode.VF and a.type_id:
            vf_addr = a.address or a.parent or ""
            vf = snap.vendor_vfs.get(vf_addr)
            number = a.type_id.rsplit("-", 1)[-1]
            want = int(number) if number.isdecimal() else 0
            if bad := modes.for_name(a.mode).record_problem(a):
                problems.append(bad)
            elif vf is None:
                problems.append(f"{a.domain}: VF {vf_addr} does not exist (SR-IOV not enabled on its GPU)")
            elif vf.current_type == 0:
                t = next((t for t in vf.offered if t.numeric_id == want), None)
                if t is None:
                    problems.append(f"{a.domain}: VF {vf_addr} does not offer {a.type_id} (creatable_vgpu_types)")
                else:  # the VF mode's own planner, at the recorded placement; parameters follow in their phase
                    steps += vf_vgpu.MODE.plan_create(snap, t, placement=_placement(a, snap, vf_addr))
            elif vf.current_type != want:
                problems.append(f"{a.domain}: VF {vf_addr} runs nvidia-{vf.current_type}, the domain wants {a.type_id}")
    return PhasePlan("vgpu", _units(steps, "re-create vGPUs"), tuple(problems))


def _placement(a: Allocation, snap: HostSnapshot, vf: str) -> int | None:
    """The placement ID the domain recorded, on a GPU in heterogeneous mode (the metadata grammar: 1–4 digits)."""
    pid = a.extra.get("placement_id", "")
    return int(pid) if pid.isdecimal() and heterogeneous(snap, snap.physical_gpu(vf)) else None


def _params(allocs: Sequence[Allocation], snap: HostSnapshot) -> PhasePlan:
    steps: list[Step] = []
    for a in allocs:
        if not a.params:
            continue
        if a.mode == DeviceMode.MDEV and a.uuid in snap.mdevs:
            current = snap.mdevs[a.uuid].vgpu_params
            if not params_equal(current, a.params):
                steps.append(SetVgpuParams("mdev", a.uuid, join_params(split_params(a.params)), current or ""))
        elif a.mode == DeviceMode.VF:
            vf = snap.vendor_vfs.get(a.address or a.parent or "")
            if vf is not None and vf.in_use and not params_equal(vf.vgpu_params, a.params):
                steps.append(SetVgpuParams("vf", vf.address, join_params(split_params(a.params)), vf.vgpu_params or ""))
    return PhasePlan("params", _units(steps, "write vgpu_params"))


def _vfio(allocs: Sequence[Allocation], snap: HostSnapshot) -> PhasePlan:
    # vgpuadm binds a passed-through GPU's whole IOMMU group to vfio-pci when it gives it to a guest (the
    # passthrough mode's safe sequence, reference §5.2, §5.3), so restore binds it again, managed or not.
    units: list[Plan] = []
    problems: list[str] = []
    covered: set[str] = set()
    for a in sorted(allocs, key=lambda a: (a.domain, a.slot)):
        gpu = a.parent or a.address
        if a.mode == DeviceMode.POOL and a.address:  # a VF pool's VF, bound for its guest by vgpuadm
            try:
                steps = vf_pool.MODE.plan_bind(snap, a.address)
            except VgpuadmError as exc:
                problems.append(f"{a.domain}: {a.address}: {exc.message}")
                continue
            if steps:
                units.append(Plan.of(steps, f"bind VF {a.address} for its guest"))
            continue
        if a.mode != DeviceMode.PCI or not gpu or gpu in covered:
            continue
        if gpu not in snap.functions:
            problems.append(f"{a.domain}: PCI function {gpu} does not exist")
            continue
        covered.update(snap.group_members(gpu))
        try:
            steps = passthrough.MODE.plan_bind(snap, gpu)
        except VgpuadmError as exc:
            problems.append(f"{a.domain}: {gpu}: {exc.message}")
            continue
        if steps:
            units.append(Plan.of(steps, f"bind the IOMMU group of {gpu} to vfio-pci"))
    return PhasePlan("vfio", tuple(units), tuple(problems))
