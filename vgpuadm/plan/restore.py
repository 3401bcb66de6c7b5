"""Rebuilding a host after a reboot from the domains' vgpuadm metadata: the order of the work and the waiting.

Pure planning: each phase turns (allocations, a fresh snapshot) into a steps.Plan; the API runs the phases in
order, re-discovering between them, because each phase makes the devices the next one needs:

  driver  vendor driver bound to every PF a vGPU needs (nothing to do when the boot bound it)
  sriov   SR-IOV VFs enabled on the PFs whose VFs the allocations name (VFs vanish at reboot, reference §7)
  policies  heterogeneous (mixed-size) mode on again where the applied `gpus:` section or a recorded placement ID
          wants it (the mode does not survive a reboot), the scheduler where the driver did not load it
          (plan/policies.py)
  mig     MIG mode on, then one GPU instance per MIG-backed allocation that has no free instance of its profile,
          placed by the capacity model (the same order places them where vgpuadm placed them before)
  vgpu    mdevs (layouts A/B) with the UUIDs the domain XML names, VF vGPU types (layout C) at their recorded
          placement IDs
  params  vgpu_params written after create and before the guest starts (reference §2.5)
  vfio    passthrough functions bound to vfio-pci again

Every phase is idempotent: what already matches produces no step, so a second restore plans nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from vgpuadm.catalog.capacity import heterogeneous
from vgpuadm.catalog.mig import MigGpu
from vgpuadm.catalog.naming import mig_profile_name
from vgpuadm.errors import VgpuadmError
from vgpuadm.model import Allocation, DeviceMode, HostSnapshot
from vgpuadm.modes import mdev, mig, passthrough, sriov, vf_pool, vf_vgpu
from vgpuadm.modes.base import join_params, split_params
from vgpuadm.plan import policies
from vgpuadm.plan.desired import params_equal
from vgpuadm.steps import (
    DriversProbe,
    Plan,
    SetVgpuParams,
    Step,
)

PHASES = ("driver", "sriov", "policies", "mig", "vgpu", "params", "vfio")
T = TypeVar("T")


@dataclass(frozen=True)
class PhasePlan:
    """A phase's work as independent units (one per device): a unit that fails is rolled back alone and the
    others still run, so one broken GPU does not keep every other guest from its devices."""

    phase: str
    units: tuple[Plan, ...] = ()
    problems: tuple[str, ...] = ()  # allocations this phase cannot restore, one line each
    skipped: tuple[str, ...] = ()  # work this version does not do (MIG)

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
    out = {dev for a in allocations if (dev := needed_device(a)) is not None and dev not in present.get(a.mode, {dev})}
    return sorted(out)


def plan_phase(
    phase: str, allocations: Sequence[Allocation], snap: HostSnapshot, *, sriov_manage: bool = False,
    mig_gpus: Sequence[MigGpu] | None = None, policy_state: str | None = None,
) -> PhasePlan:  # fmt: skip
    """The work of one phase. `sriov_manage`: NVIDIA's sriov-manage is installed (the only way to enable the VFs
    of a PF bound to nvidia). `mig_gpus`: the MIG state nvidia-smi reports (read when `needs_mig` says so)."""
    if phase == "sriov":
        return _sriov(allocations, snap, sriov_manage)
    if phase == "mig":
        return _mig(allocations, snap, mig_gpus)
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


def mig_backed(allocs: Sequence[Allocation], snap: HostSnapshot) -> list[tuple[Allocation, str]]:
    """(allocation, GPU-instance profile) of every MIG-backed allocation."""
    names = {t.type_id: t.name for t in snap.types()}
    out = []
    for a in allocs:
        profile = mig_profile_name(names.get(a.type_id or "", "")) if a.type_id and _is_mig_backed(a, snap) else None
        if profile:
            out.append((a, profile))
    return out


def needs_mig(allocs: Sequence[Allocation], snap: HostSnapshot) -> bool:
    return bool(mig_backed(allocs, snap))


def _mig(allocs: Sequence[Allocation], snap: HostSnapshot, gpus: Sequence[MigGpu] | None) -> PhasePlan:
    """MIG mode on where it is off, then the GPU instances the MIG-backed allocations need that no free instance
    of their profile covers (GPU instances do not survive a reboot; MIG mode does, reference §3.5)."""
    wanted: dict[str, dict[str, list[Allocation]]] = {}
    for a, profile in mig_backed(allocs, snap):
        if _vgpu_exists(a, snap):  # it already sits on its GPU instance
            continue
        dev = needed_device(a)
        if dev is not None and dev in snap.functions:
            pf = snap.physical_gpu(dev)
        else:
            candidates = _candidate_pfs(dev or "", snap)
            pf = candidates[0] if candidates else ""
        wanted.setdefault(pf, {}).setdefault(profile, []).append(a)
    units: list[Plan] = []
    problems: list[str] = []
    for pf, profiles in sorted(wanted.items()):
        try:
            g = mig.MODE.gpu(gpus or (), pf)
            if not g.enabled:
                enable = mig.MODE.plan_enable(snap, gpus or (), pf)
                if enable:
                    units.append(Plan.of(enable, f"enable MIG mode on {pf}"))
                if (
                    enable
                ):  # planned in this phase: the creates after it see MIG on (a board needing a reset fails them)
                    g = MigGpu(g.index, g.address, g.product, "Enabled", "Enabled", g.virtualization_mode,
                               g.host_vgpu_mode, g.profiles, g.instances)  # fmt: skip
            for profile, owners in sorted(profiles.items()):
                free = [gi for gi in g.instances if gi.name == profile and not gi.users]
                missing = len(owners) - len(free)
                if missing > 0:
                    steps = mig.MODE.plan_create([g], pf, profile, missing)
                    units.append(Plan.of(steps, f"create {missing} {profile} GPU instance(s) on {pf}"))
        except VgpuadmError as exc:
            problems.append(f"{pf}: {exc.message}")
    return PhasePlan("mig", tuple(units), tuple(problems))


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
            if not want:  # recorded metadata is outside input: a VF's type is nvidia-<number>
                problems.append(f"{a.domain}: vf device #{a.slot}: type {a.type_id[:80]!r} is not nvidia-<number>")
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


def wait_until(probe: Callable[[], T], done: Callable[[T], bool], timeout: float, interval: float = 0.05) -> T:
    """Call `probe` until `done(result)` or `timeout` seconds pass; returns the last result either way. Polls with
    a growing interval (parents register when the vendor daemon is ready: nvidia-vgpud can take seconds)."""
    retrying = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_exponential(multiplier=interval, max=1.0),
        retry=retry_if_result(lambda r: not done(r)),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
    )
    result: T = retrying(probe)
    return result
