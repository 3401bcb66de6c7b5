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
  vfio    passthrough functions bound to vfio-pci again, VF pools' VFs bound for their guests

The order is declared once, in RESTORE_ORDER, each phase with the host reads it needs before it plans (the caller
does them: planning stays pure) and what a reset of a GPU (nvidia-smi -r, a recovered Xid, a driver reload) loses
that the phase makes again (`loses`: the enablers' own words here or in their mode's file, the device modes'
`reset_loses`; reset_losses() lists them in order).

After a reset the same phases re-converge one GPU or one mdev parent (`Scope`: the allocations on it, and the
enablers of that GPU only), and `drift` says what differs from the record without changing anything (`restore
--check`, `doctor`): a recorded device that is gone, and each step an enabler phase would plan against the host as
it is. The enablers that are not devices (driver, SR-IOV, host policies, MIG, params)
have their builders here; a device phase ("vgpu", "vfio") plans each allocation whose mode (modes/*.py) names it
as its `restore_phase`, by asking that mode (`Mode.plan_rebuild`). Every phase is idempotent: what already matches
produces no step, so a second restore plans nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from vgpuadm import modes
from vgpuadm.catalog.mig import MigHost, MigInstance, recorded_instance
from vgpuadm.errors import NotFoundError, VgpuadmError
from vgpuadm.model import Allocation, HostSnapshot, is_pci_address
from vgpuadm.modes import mig, sriov
from vgpuadm.plan import policies
from vgpuadm.steps import (
    CreateGpuInstance,
    DriversProbe,
    Plan,
    Step,
)


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
    return modes.of(a).host_device(a)


def missing_devices(allocations: Iterable[Allocation], snap: HostSnapshot) -> list[str]:
    """Devices the allocations need that the host does not show yet (parents not registered, VFs not enabled)."""
    out = {
        dev
        for a in allocations
        if (dev := needed_device(a)) is not None
        and not modes.of(a).device_shown(snap, a)
        and not modes.of(a).record_problem(a)
    }  # fmt: skip (a record rejected anyway: no wait)
    return sorted(out)


def all_present(allocations: Iterable[Allocation], snap: HostSnapshot) -> bool:
    return not missing_devices(allocations, snap)


@dataclass(frozen=True)
class HostReads:
    """What the caller read from the host for a phase (the reads its Phase declares). `sriov_manage`: NVIDIA's
    sriov-manage is installed (the only way to enable the VFs of a PF bound to nvidia). `mig_host`: the MIG state
    nvidia-smi reports. `policy_state`: the applied `gpus:` section's state file."""

    sriov_manage: bool = False
    mig_host: MigHost | None = None
    policy_state: str | None = None
    gpus: frozenset[str] | None = None  # the GPUs (PFs) whose enablers this restore may change (None: every GPU)


Builder = Callable[[Sequence[Allocation], HostSnapshot, HostReads], PhasePlan]


@dataclass(frozen=True)
class Phase:
    """One phase of restore, its place in the order declared once (RESTORE_ORDER). `build`: an enabler's planner;
    None for a device phase, where each allocation's mode plans its device (the modes whose `restore_phase` is
    `name`). The host reads the phase needs first, done by the caller (planning stays pure):"""

    name: str
    build: Builder | None = None
    waits_for_devices: bool = False  # wait (up to --timeout) until the host shows every device (missing_devices)
    reads_mig: bool = False  # the MIG state, when an allocation is of a MIG-backed type (needs_mig)
    reads_policies: bool = False  # the policy state file and the GPUs' policies, where heterogeneous mode is wanted
    loses: tuple[str, ...] = ()  # what a GPU reset loses that this enabler makes again (device phases: the modes')

    def plan(self, allocations: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
        if self.build is not None:
            return self.build(allocations, snap, reads)
        return _devices(self.name, allocations, snap)


def plan_phase(
    phase: str, allocations: Sequence[Allocation], snap: HostSnapshot, *, sriov_manage: bool = False,
    mig_host: MigHost | None = None, policy_state: str | None = None, gpus: frozenset[str] | None = None,
) -> PhasePlan:  # fmt: skip
    """The work of one phase (by name; see HostReads for the keywords)."""
    return _BY_NAME[phase].plan(allocations, snap, HostReads(sriov_manage, mig_host, policy_state, gpus))


def _devices(phase: str, allocs: Sequence[Allocation], snap: HostSnapshot) -> PhasePlan:
    """A device phase: each allocation whose mode makes its device in `phase`, in domain and slot order, planned
    by its mode; a device that cannot come back is a problem, the others still do."""
    units: list[Plan] = []
    problems: list[str] = []
    done: set[str] = set()
    for a in sorted(allocs, key=lambda a: (a.domain, a.slot)):
        mode = modes.of(a)
        if mode.restore_phase == phase:
            more, trouble = mode.plan_rebuild(snap, a, done)
            units += more
            problems += trouble
    return PhasePlan(phase, tuple(units), tuple(problems))


def _policies(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
    placed = {gpu for a in allocs if (gpu := modes.of(a).heterogeneous_gpu(snap, a)) is not None}
    steps = policies.restore_steps(snap, reads.policy_state, placed, only=reads.gpus)
    return PhasePlan("policies", _units(steps, "host policies"))


def _driver(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
    # A PF that hosts vGPUs (directly, or through its VFs) must run its vendor driver; drivers_probe with no
    # override binds the native driver. A PF already bound to something (even vfio-pci) is left alone.
    steps: list[Step] = []
    for pf in _pfs_needed(allocs, snap):
        if reads.gpus is not None and pf not in reads.gpus:  # re-converging some GPUs: not another candidate PF
            continue
        fn = snap.functions.get(pf)
        if fn is not None and fn.driver is None and not fn.driver_override:
            steps.append(DriversProbe(pf))
    return PhasePlan("driver", _units(steps, "bind vendor drivers"))


def _pfs_needed(allocs: Sequence[Allocation], snap: HostSnapshot) -> list[str]:
    pfs: set[str] = set()
    for dev in {needed_device(a) for a in allocs if modes.of(a).needs_vendor_driver}:
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


def _sriov(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
    # The SR-IOV mode's enable sequence: NVIDIA's sriov-manage for PFs bound to nvidia (the driver has no
    # sriov_configure), sriov_numvfs = sriov_totalvfs otherwise.
    units: list[Plan] = []
    problems: list[str] = []
    pfs: set[str] = set()
    pool_pfs = {a.address: pf for a in allocs if (pf := modes.of(a).sriov_pf(snap, a)) is not None}
    for dev in missing_devices(allocs, snap):
        pfs.update([pool_pfs[dev]] if dev in pool_pfs else _candidate_pfs(dev, snap))
    if reads.gpus is not None:  # re-converging some GPUs: a missing VF's other candidate PFs are not touched
        pfs &= reads.gpus
    for pf in sorted(pfs):
        try:
            steps = sriov.MODE.plan_enable(snap, pf, sriov_manage=reads.sriov_manage)
        except VgpuadmError as exc:
            problems.append(f"{pf}: {exc.message}")
            continue
        if steps:
            units.append(Plan.of(steps, f"enable the VFs of {pf}"))
    return PhasePlan("sriov", tuple(units), tuple(problems))


def needs_mig(allocs: Sequence[Allocation], snap: HostSnapshot) -> bool:
    """Whether an allocation is of a MIG-backed type (then the mig phase reads the MIG state), or may be: a missing
    vGPU that recorded a GPU instance, or whose type no GPU lists now (with MIG mode off — after a reset on Hopper
    and newer — a GPU lists none of its MIG-backed types; the MIG state says which types need it)."""
    listed = {t.type_id for t in snap.types()}
    return any(_is_mig_backed(a, snap) or (modes.of(a).needs_vendor_driver and modes.of(a).missing(snap, a)
                                           and (recorded_instance(a.extra) is not None or a.type_id not in listed))
               for a in allocs)  # fmt: skip


def _mig(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
    """Per GPU, one unit: MIG mode on where it is off, then each GPU instance vgpuadm recorded (`mig_instance`) at
    its recorded start, then — for MIG-backed vGPUs on instances made by hand — the instances the room left does not
    cover, placed by the capacity model (GPU instances do not survive a reboot; MIG mode does, reference §3.5). A
    recorded start that is taken or not a placement of its profile is a problem naming the domain, and nothing is
    done on that GPU."""
    host = reads.mig_host or MigHost((), {})
    names = {t.type_id: t.name for t in snap.types()}
    wanted: dict[str, list[Allocation]] = {}
    for a in allocs:
        if _vgpu_exists(a, snap):  # a vGPU that exists sits on its GPU instance
            continue
        dev = needed_device(a)
        if dev is not None and dev in snap.functions:
            pf = snap.physical_gpu(dev)
        else:
            candidates = _candidate_pfs(dev or "", snap)
            pf = candidates[0] if candidates else ""
        if _is_mig_backed(a, snap, host, pf):
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
    mode = modes.of(a)
    return mode.needs_vendor_driver and not mode.missing(snap, a)


def _is_mig_backed(a: Allocation, snap: HostSnapshot, host: MigHost | None = None, pf: str = "") -> bool:
    """Whether `a` is of a MIG-backed type: as the host lists its type, else (no GPU lists it: MIG mode is off) as
    the MIG state of its GPU `pf` says, or as its record of a GPU instance says."""
    for t in snap.types():
        if t.type_id == a.type_id:  # after a reboot the allocation's own VF may not list it yet
            return bool(t.attributes.get("mig_slices"))
    if recorded_instance(a.extra) is not None:
        return True
    return host is not None and host.need(pf, a.type_id or "", "") is not None


def _params(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads) -> PhasePlan:
    steps = [step for a in allocs if (step := modes.of(a).restore_params(snap, a)) is not None]
    return PhasePlan("params", _units(steps, "write vgpu_params"))


RESTORE_ORDER: tuple[Phase, ...] = (
    Phase("driver", _driver),  # a reset keeps the driver bound; a reload that did not probe a GPU needs it
    Phase("sriov", _sriov, loses=sriov.MODE.reset_loses),
    Phase("policies", _policies, reads_policies=True, loses=("heterogeneous mode", "the vGPU scheduler")),
    Phase("mig", _mig, reads_mig=True, loses=mig.MODE.reset_loses),
    Phase("vgpu", waits_for_devices=True),
    Phase("params", _params, loses=("vgpu_params",)),
    Phase("vfio"),
)
PHASES = tuple(p.name for p in RESTORE_ORDER)
DEVICE_PHASES = tuple(p.name for p in RESTORE_ORDER if p.build is None)  # the modes make their devices in these
_BY_NAME = {p.name: p for p in RESTORE_ORDER}


def reset_losses() -> list[tuple[str, tuple[str, ...]]]:
    """(phase, what a GPU reset loses that the phase makes again), in restore order: the enablers' declarations
    and, for a device phase, those of the modes whose devices it makes."""
    out = []
    for p in RESTORE_ORDER:
        loses = p.loses + tuple(w for m in modes.MODES if m.restore_phase == p.name for w in m.reset_loses)
        if loses:
            out.append((p.name, loses))
    return out


# -- one GPU or one mdev parent (restore --gpu/--parent) ----------------------------------------------------------


def gpus_of(dev: str, snap: HostSnapshot) -> list[str]:
    """The physical GPUs (PFs) a host device may belong to: its PF when the host shows it, else (a VF gone with
    SR-IOV) the PFs that could own it (_candidate_pfs); a non-PCI parent (mtty) is its own."""
    if dev in snap.functions or not is_pci_address(dev):
        return [snap.physical_gpu(dev)]
    return _candidate_pfs(dev, snap)


@dataclass(frozen=True)
class Scope:
    """What a restore re-converges: every recorded device (both empty), or the devices on the GPUs named (their
    VFs, mdevs, passthrough functions) and on the mdev parents named (an mdev parent or a layout C VF by name)."""

    gpus: frozenset[str] = frozenset()
    parents: frozenset[str] = frozenset()

    @property
    def whole(self) -> bool:
        return not self.gpus and not self.parents

    def covers(self, a: Allocation, snap: HostSnapshot) -> bool:
        if self.whole:
            return True
        dev = needed_device(a)
        if dev is None:
            return False
        pf = modes.of(a).sriov_pf(snap, a)  # a pool VF records its PF
        return dev in self.parents or bool(self.gpus.intersection([pf] if pf else gpus_of(dev, snap)))

    def enabler_gpus(self, allocs: Sequence[Allocation], snap: HostSnapshot) -> frozenset[str] | None:
        """The GPUs whose enablers (SR-IOV, policies, MIG) this restore may change: None for the whole host; the
        GPUs named, and for a parent named the GPU it is on."""
        if self.whole:
            return None
        on_parents = {
            g for a in allocs if needed_device(a) in self.parents for g in gpus_of(needed_device(a) or "", snap)
        }
        return frozenset(self.gpus | on_parents | {snap.physical_gpu(p) for p in self.parents})


# -- drift: what differs from the record, changing nothing (restore --check, doctor) -----------------------------


def drift(allocs: Sequence[Allocation], snap: HostSnapshot, reads: HostReads, running: frozenset[str] = frozenset()
          ) -> list[str]:  # fmt: skip
    """One line per difference between the record and the host, by phase ("phase: …"): each step an enabler phase
    would plan against the host as it is (VFs off, MIG mode off, a GPU instance, heterogeneous mode, the scheduler,
    vgpu_params) and what it cannot do, and each recorded device that is gone (with its domain when that domain
    runs: restore does not touch it). Pure: the caller read the host (HostReads, for every phase at once)."""
    out: list[str] = []
    for spec in RESTORE_ORDER:
        if spec.build is None:
            for a in sorted(allocs, key=lambda a: (a.domain, a.slot)):
                mode = modes.of(a)
                if mode.restore_phase == spec.name and mode.missing(snap, a) and not mode.record_problem(a):
                    held = f" ({a.domain} is running: stop it and run restore)" if a.domain in running else ""
                    out.append(f"{spec.name}: {a.domain}: {mode.describe(a)} is gone{held}")
            continue
        pp = spec.plan([a for a in allocs if a.domain not in running], snap, reads)
        out += [f"{spec.name}: not as recorded: would {s.describe()}" for s in pp.steps]
        out += [f"{spec.name}: {p}" for p in pp.problems]
    return out
