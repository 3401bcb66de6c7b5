"""The one entry point for the CLI and the Ansible module: open a host root, discover, and (as later layers land)
plan, apply, report and restore. Wires the simulated kernel in when the root carries the simulation marker."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from vgpuadm.errors import ConflictError, UsageError
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import SIM_MARKER, Sysfs, Writer
from vgpuadm.model import Allocation, HostSnapshot, Layout

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from typing import Any

    from vgpuadm.demo import DemoResult
    from vgpuadm.executor import ExecContext, ExecResult
    from vgpuadm.guest import GuestResult
    from vgpuadm.steps import Plan, Step

DEFAULT_ROOT = "/"


def resolve_root(root: str | None) -> str:
    """--root, else $VGPUADM_ROOT, else /."""
    return os.path.abspath(root or os.environ.get("VGPUADM_ROOT") or DEFAULT_ROOT)


def open_sysfs(root: str | None = None) -> Sysfs:
    real_root = resolve_root(root)
    if not os.path.exists(os.path.join(real_root, SIM_MARKER)):
        return Sysfs(real_root)

    def sim_kernel() -> Writer:  # imported on the first write only: read commands stay fast
        from vgpuadm.sim.kernel import SimKernel

        return SimKernel(real_root)

    return Sysfs(real_root, writer_factory=sim_kernel)


def _plan(steps: list[Step], title: str) -> Plan:
    # vgpuadm.steps is imported here, not at the top: the read commands' fast path must not pay for it.
    from vgpuadm.steps import Plan

    return Plan.of(steps, title)


def discover(root: str | None = None, *, types: bool = True) -> HostSnapshot:
    """Read the host at `root`; `types=False` skips the mdev type directories (for commands that show none)."""
    return snapshot(open_sysfs(root), types=types)


# -- inventory reports (vgpuadm inventory) ---------------------------------------------------------------------


def host_name(root: str | None = None) -> str:
    """The name a host's inventory carries: <root>/etc/hostname on a non-/ root when present, else this host's."""
    import socket

    real_root = resolve_root(root)
    if real_root != "/":
        try:
            with open(os.path.join(real_root, "etc/hostname")) as f:
                name = f.read().strip()
            if name:
                return name
        except OSError:
            pass
    return socket.gethostname()


def saved_allocations(directory: str) -> list[Allocation]:
    """Allocations recorded in saved domain XML files (`virsh dumpxml` output), one *.xml per domain."""
    from vgpuadm.errors import UsageError, VgpuadmError
    from vgpuadm.virt.xml import parse_allocations

    if not os.path.isdir(directory):
        raise UsageError(f"--domains-xml {directory} is not a directory", "give a directory of saved domain XML files")
    out: list[Allocation] = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".xml"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                out.extend(parse_allocations(f.read()))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read domain XML {path}: {exc}", "save it with `virsh dumpxml DOMAIN`") from None
        except VgpuadmError as exc:
            raise UsageError(f"{path}: {exc.message}", exc.hint) from None
    return out


def libvirt_allocations(
    root: str | None, connect: str | None, simulated: bool, domains: Sequence[str] | None = None
) -> tuple[list[Allocation], str]:
    """Allocations recorded in every libvirt domain's vgpuadm metadata (only the named `domains` when given: hosts
    that share one libvirtd, as the Ansible lab does), and the URI they came from."""
    from vgpuadm.errors import NotFoundError
    from vgpuadm.virt.conn import VirtConn, choose_uri
    from vgpuadm.virt.xml import parse_allocations

    uri = choose_uri(connect, resolve_root(root), simulated)
    with VirtConn(uri) as conn:
        names = conn.list_domains() if domains is None else [d for d in conn.list_domains() if d in set(domains)]
        allocations = []
        for name in names:
            try:
                allocations += parse_allocations(conn.xml(name))
            except NotFoundError:  # undefined between listing and reading (a shared libvirtd)
                continue
    return allocations, uri


def domain_allocations(root: str | None, vm: str, *, connect: str | None = None) -> list[Allocation]:
    """What domain `vm` owns, from its vgpuadm metadata (NotFoundError when there is no such domain)."""
    from vgpuadm.virt.conn import VirtConn, choose_uri
    from vgpuadm.virt.xml import parse_allocations

    real_root = resolve_root(root)
    with VirtConn(choose_uri(connect, real_root, os.path.exists(os.path.join(real_root, SIM_MARKER)))) as conn:
        return parse_allocations(conn.xml(vm))


def inventory(
    root: str | None = None,
    *,
    connect: str | None = None,
    domains_xml: str | None = None,
    use_libvirt: bool = True,
    host: str | None = None,
    domains: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The host's inventory document (vgpuadm-inventory/1). Ownership comes from saved domain XML when given,
    else from libvirt unless use_libvirt is False (then it is reported as unknown, never as leaks)."""
    from datetime import UTC, datetime

    from vgpuadm.report.inventory import inventory as build_inventory

    snap = discover(root)
    allocations: list[Allocation] | None = None
    source = "none"
    if domains_xml is not None:
        allocations, source = saved_allocations(domains_xml), f"domains-xml:{os.path.abspath(domains_xml)}"
    elif use_libvirt:
        allocations, uri = libvirt_allocations(root, connect, snap.simulated, domains)
        source = f"libvirt:{uri}"
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return build_inventory(snap, allocations, host=host or host_name(root), generated_at=now, source=source)


def merge_inventories(paths: list[str]) -> dict[str, Any]:
    """The fleet report (vgpuadm-fleet/1) of host inventory files; any bad file stops it with its name."""
    from datetime import UTC, datetime

    from vgpuadm.report.merge import load_report, merge

    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return merge([(p, load_report(p)) for p in paths], generated_at=now)


# --- lifecycle: plan (pure, from a snapshot) and apply (the executor) ------------------------------------------


def host_lock(root: str | None = None, timeout: float | None = None) -> AbstractContextManager[None]:
    """Hold the host-wide lock (re-entrant): discover, plan and apply under one hold so that concurrent runs
    never plan against a stale snapshot."""
    from vgpuadm.executor import DEFAULT_LOCK_TIMEOUT
    from vgpuadm.executor import host_lock as _lock

    return _lock(resolve_root(root), DEFAULT_LOCK_TIMEOUT if timeout is None else timeout)


def plan_create(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
    params: str = "",
    uuids: Sequence[str] = (),
) -> tuple[Plan, list[str]]:
    """Plan `count` vGPUs of `type_name`; returns the plan and the device ids it makes (mdev UUIDs, or VF
    addresses on layout C). `uuids` fixes the mdev UUIDs (one per instance), else random ones are drawn."""
    import uuid as uuid_mod

    from vgpuadm.modes import mdev, vf_vgpu
    from vgpuadm.placement import place

    if uuids and len(uuids) != count:
        raise UsageError(f"{len(uuids)} UUIDs given for {count} devices", "give one --uuid per device, or none")
    if uuids and all(mdev.check_uuid(u) in snap.mdevs for u in uuids):
        # Idempotence: every named mdev already exists; fine when each runs the requested type.
        from vgpuadm.naming import resolve_type

        wanted = {t.type_id for t in resolve_type(snap.types(), type_name)}
        existing = [snap.mdevs[mdev.check_uuid(u)] for u in uuids]
        if all(m.type_id in wanted for m in existing):
            return _plan([], f"mdevs {', '.join(m.uuid for m in existing)} already exist"), [m.uuid for m in existing]
    placement = place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa)
    steps: list[Step] = []
    ids: list[str] = []
    for i, (_parent, t) in enumerate(placement.choices):
        if t.layout == Layout.VENDOR_VFIO:
            steps += vf_vgpu.MODE.plan_create(snap, t, params)
            ids.append(t.parent)
        else:
            dev = mdev.check_uuid(uuids[i]) if uuids else str(uuid_mod.uuid4())
            if dev in ids:
                raise UsageError(f"UUID {dev} given twice", "give distinct UUIDs")
            steps += mdev.MODE.plan_create(snap, t, dev, params)
            ids.append(dev)
    where = ", ".join(sorted({p for p, _ in placement.choices}))
    return _plan(steps, f"create {count} × {placement.type_id} on {where}"), ids


def explain_placement(
    snap: HostSnapshot,
    type_name: str,
    count: int = 1,
    *,
    gpu: str | None = None,
    policy: str = "pack",
    numa: int | None = None,
) -> str:
    """Why each candidate parent was chosen or rejected (the CapacityError, when nothing fits, says the same)."""
    from vgpuadm.errors import CapacityError
    from vgpuadm.placement import place

    try:
        return place(snap, type_name, count, gpu=gpu, policy=policy, numa=numa).explain()
    except CapacityError as exc:
        return f"placement of {type_name}: {exc.message}"


def plan_remove(snap: HostSnapshot, device_id: str) -> Plan:
    """Remove a vGPU: an mdev by UUID, or clear a layout C VF by address."""
    from vgpuadm.modes import mdev, vf_vgpu

    if device_id in snap.vendor_vfs:
        return _plan(vf_vgpu.MODE.plan_clear(snap, device_id), f"clear VF {device_id}")
    return _plan(
        mdev.MODE.plan_remove(snap, mdev.check_uuid(device_id, "as `vgpuadm devices` lists them")),
        f"remove mdev {device_id}",
    )


def plan_vf_type(
    snap: HostSnapshot, type_name: str, vf: str | None = None, *, params: str = "", policy: str = "pack"
) -> tuple[Plan, str]:
    """Layout C: set a vGPU type on `vf` (or on a VF placement picks); returns the plan and the VF address."""
    from vgpuadm.modes import vf_vgpu
    from vgpuadm.placement import place

    if vf is not None:
        found = vf_vgpu.MODE.find(snap, vf)
        if found.in_use:
            # A typed VF lists nothing creatable: compare with the number the name stands for instead.
            if _type_number(snap, type_name) == found.current_type:
                return _plan([], f"VF {vf} already runs nvidia-{found.current_type}"), vf
            raise ConflictError(
                f"VF {vf} already runs nvidia-{found.current_type}",
                f"clear it first with `vgpuadm vf clear {vf}` or pick another VF",
            )
    placement = place(snap, type_name, 1, gpu=vf, policy=policy)
    t = placement.choices[0][1]
    if t.layout != Layout.VENDOR_VFIO:
        raise UsageError(f"{t.type_id} on {t.parent} is an mdev type", "use `vgpuadm mdev create` for mdev types")
    return _plan(vf_vgpu.MODE.plan_create(snap, t, params), f"set {t.type_id} on VF {t.parent}"), t.parent


def _type_number(snap: HostSnapshot, type_name: str) -> int | None:
    from vgpuadm.errors import NotFoundError
    from vgpuadm.naming import resolve_type

    try:
        return resolve_type(snap.types(), type_name)[0].numeric_id
    except NotFoundError:
        digits = type_name.strip().lower().removeprefix("nvidia-")
        return int(digits) if digits.isdigit() else None


def plan_vf_clear(snap: HostSnapshot, vf: str) -> Plan:
    from vgpuadm.modes import vf_vgpu

    return _plan(vf_vgpu.MODE.plan_clear(snap, vf), f"clear VF {vf}")


def sriov_manage_present(root: str) -> bool:
    from vgpuadm.steps import SRIOV_MANAGE

    return os.access(os.path.join(root, SRIOV_MANAGE.lstrip("/")), os.X_OK)


def plan_sriov(snap: HostSnapshot, pf: str, enable: bool, num: int | None = None) -> Plan:
    """Enable (`num` VFs, default all) or disable a PF's VFs."""
    from vgpuadm.modes import sriov

    present = sriov_manage_present(snap.root)
    if enable:
        return _plan(sriov.MODE.plan_enable(snap, pf, num, sriov_manage=present), f"enable VFs of {pf}")
    return _plan(sriov.MODE.plan_disable(snap, pf, sriov_manage=present), f"disable VFs of {pf}")


def plan_vfio_bind(snap: HostSnapshot, gpu: str, force: bool = False) -> Plan:
    """Bind the whole IOMMU group of `gpu` to vfio-pci (empty when already bound)."""
    from vgpuadm.modes import passthrough

    return _plan(passthrough.MODE.plan_bind(snap, gpu, force), f"bind the IOMMU group of {gpu} to vfio-pci")


def original_drivers(root: str | None = None) -> dict[str, str]:
    """Drivers remembered by `vfio bind` under <root>/var/lib/vgpuadm/drivers.json."""
    from vgpuadm.executor import load_drivers

    return load_drivers(resolve_root(root))


def plan_vfio_restore(snap: HostSnapshot, gpu: str, original: dict[str, str] | None = None) -> Plan:
    """Give the group of `gpu` back to its original drivers (remembered ones when `original` is None)."""
    from vgpuadm.modes import passthrough

    drivers = original_drivers(snap.root) if original is None else original
    return _plan(passthrough.MODE.plan_restore(snap, gpu, drivers), f"give {gpu} back to its drivers")


def register_libvirt_steps() -> None:
    """Teach the executor the libvirt steps (attach/detach hostdev, set metadata): their kinds for the journal and
    their handlers. virt sits below the executor, so it cannot register itself. Idempotent."""
    from vgpuadm.executor import register
    from vgpuadm.virt.handlers import HANDLERS

    for step_cls, apply_fn, undo_fn, is_applied in HANDLERS:
        register(step_cls, apply_fn, undo_fn, is_applied)


def exec_context(root: str | None = None, virt: Any = None, **extras: Any) -> ExecContext:
    from vgpuadm.executor import ExecContext

    register_libvirt_steps()
    sysfs = open_sysfs(root)
    return ExecContext(sysfs=sysfs, root=sysfs.root, virt=virt, extras=dict(extras))


def apply(
    plan: Plan,
    root: str | None = None,
    *,
    dry_run: bool = False,
    virt: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> ExecResult:
    """Execute `plan` on the host at `root` (lock, journal, rollback on failure). dry_run changes nothing."""
    from vgpuadm.executor import execute

    return execute(plan, exec_context(root, virt), dry_run=dry_run, progress=progress)


def recover(
    root: str | None = None, *, finish: bool = False, virt: Any = None, connect: str | None = None
) -> list[str]:
    """Roll back (default) or finish a change a crashed run left in the journal; [] when there was none. When the
    journal holds libvirt steps (attach/detach/metadata) and no `virt` is given, a connection is opened (`connect`,
    else the default URI for this root)."""
    from vgpuadm.executor import read_journal
    from vgpuadm.executor import recover as _recover

    ctx = exec_context(root, virt)
    doc = read_journal(ctx.root) or {}
    kinds = {s.get("kind") for s in doc.get("plan", {}).get("steps", [])}
    if virt is None and kinds & {"attach-hostdev", "detach-hostdev", "set-metadata"}:
        from vgpuadm.virt.conn import VirtConn, choose_uri

        with VirtConn(choose_uri(connect, ctx.root, ctx.sysfs.simulated)) as conn:
            ctx.virt = conn
            return _recover(ctx, finish=finish)
    return _recover(ctx, finish=finish)


# --- guests: create/destroy/passthrough/release as one plan with the libvirt steps (vgpuadm/guest.py) ------------


def guest_create(root: str | None, vm: str, type_name: str, count: int = 1, **options: Any) -> GuestResult:
    """Give domain `vm` `count` devices of `type_name` in total (idempotent); see vgpuadm.guest.create."""
    from vgpuadm import guest

    return guest.create(root, vm, type_name, count, **options)


def guest_destroy(root: str | None, vm: str, **options: Any) -> GuestResult:
    """Detach and free devices of `vm` (--uuid U or --all); see vgpuadm.guest.destroy."""
    from vgpuadm import guest

    return guest.destroy(root, vm, **options)


def guest_passthrough(root: str | None, gpu: str, vm: str, **options: Any) -> GuestResult:
    """Pass the whole GPU (its IOMMU group) through to `vm`; see vgpuadm.guest.passthrough."""
    from vgpuadm import guest

    return guest.passthrough(root, gpu, vm, **options)


def guest_release(root: str | None, gpu: str, **options: Any) -> GuestResult:
    """Take a passed-through GPU back and return it to its host drivers; see vgpuadm.guest.release."""
    from vgpuadm import guest

    return guest.release(root, gpu, **options)


def demo(directory: str | None = None, profile: str = "p4") -> DemoResult:
    """Build a simulated host with demo domains in libvirt's embedded driver and give web01 one nvidia-63."""
    from vgpuadm import demo as _demo

    return _demo.run(directory, profile)


# --- declarative plans and reboot survival: apply -f, restore, reconcile, mdevctl (vgpuadm/sync.py) -------------


def apply_plan_file(plan_file: str, root: str | None = None, **options: Any) -> Any:
    """Make the host match a plan file (options: connect, check, prune, progress); returns sync.ApplyResult."""
    from vgpuadm import sync

    return sync.apply_plan(resolve_root(root), plan_file, **options)


def restore(root: str | None = None, **options: Any) -> Any:
    """Rebuild the domains' devices after a reboot (options: connect, domain_xml_dir, timeout, report)."""
    from vgpuadm import sync

    return sync.restore(resolve_root(root), **options)


def reconcile(root: str | None = None, **options: Any) -> Any:
    """Finish or roll back a crashed change, list (and with fix=True remove) devices no domain owns."""
    from vgpuadm import sync

    return sync.reconcile(resolve_root(root), **options)


def mdevctl_export(root: str | None = None, **options: Any) -> Any:
    from vgpuadm import sync

    return sync.mdevctl_export(resolve_root(root), **options)


def mdevctl_import(root: str | None = None, **options: Any) -> Any:
    from vgpuadm import sync

    return sync.mdevctl_import(resolve_root(root), **options)


def guest_create_many(root: str | None, requests: list[tuple[str, int]], type_name: str,
                      **options: Any) -> list[GuestResult]:  # fmt: skip
    """Provision several domains (name, total count) with one type as one plan; see vgpuadm.guest.create_many."""
    from vgpuadm import guest

    return guest.create_many(root, requests, type_name, **options)
