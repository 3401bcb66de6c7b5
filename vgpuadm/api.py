"""The one surface the CLI and the Ansible module call: typed re-exports of the orchestrators in vgpuadm.ops (and
the pure planners they share). No logic lives here; where each behaviour lives is named beside it.

A name is imported when it is first used (PEP 562), so a command loads only the orchestrator it runs: `create` does
not import inventory, doctor, snapshots or the demo. Type checkers read the imports under TYPE_CHECKING, which
tests/unit/test_api_surface.py keeps equal to _HOMES."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands and the hook (bench_cold_start.py)
if TYPE_CHECKING:
    from typing import Any

    from vgpuadm.catalog.capacity import why_no_types
    from vgpuadm.executor import set_lock_policy
    from vgpuadm.host.discover import model_names
    from vgpuadm.host.discover import snapshot as read_host
    from vgpuadm.host.root import EMBED_LIBVIRT, HostRoot, resolve_root, write_report
    from vgpuadm.host.umockdev import load as load_umockdev
    from vgpuadm.io.unitfile import exec_start
    from vgpuadm.ops import declarative, guest, hook, mdevctl, udevrun, unit
    from vgpuadm.ops import mig as mig
    from vgpuadm.ops.declarative import ApplyResult, ReconcileResult, apply_desired, apply_plan_file, reconcile
    from vgpuadm.ops.demo import DemoResult
    from vgpuadm.ops.demo import run as demo
    from vgpuadm.ops.doctor import doctor
    from vgpuadm.ops.exporter import DEFAULT_LISTEN as EXPORTER_LISTEN
    from vgpuadm.ops.exporter import DEFAULT_TIMEOUT as EXPORTER_TIMEOUT
    from vgpuadm.ops.exporter import Exporter
    from vgpuadm.ops.exporter import install as exporter_install
    from vgpuadm.ops.exporter import serve as exporter_serve
    from vgpuadm.ops.exporter import uninstall as exporter_uninstall
    from vgpuadm.ops.exporter import write_loop as exporter_write
    from vgpuadm.ops.fleet import merge_inventories
    from vgpuadm.ops.guest import (
        GuestResult,
    )
    from vgpuadm.ops.guest import (
        adopt as guest_adopt,
    )
    from vgpuadm.ops.guest import (
        create as guest_create,
    )
    from vgpuadm.ops.guest import (
        create_many as guest_create_many,
    )
    from vgpuadm.ops.guest import (
        destroy as guest_destroy,
    )
    from vgpuadm.ops.guest import (
        passthrough as guest_passthrough,
    )
    from vgpuadm.ops.guest import (
        release as guest_release,
    )
    from vgpuadm.ops.hook import install as hook_install
    from vgpuadm.ops.hook import run as hook_run
    from vgpuadm.ops.hook import status as hook_status
    from vgpuadm.ops.hook import uninstall as hook_uninstall
    from vgpuadm.ops.host import (
        apply,
        discover,
        host_lock,
        open_sysfs,
        original_drivers,
        plan_sriov,
        plan_vfio_restore,
        recover,
    )
    from vgpuadm.ops.host import (
        run as run_host_verb,
    )
    from vgpuadm.ops.inventory import (
        device_users,
        domain_allocations,
        inventory,
        show_vm,
        vms,
    )
    from vgpuadm.ops.mdevctl import export as mdevctl_export
    from vgpuadm.ops.mdevctl import import_ as mdevctl_import
    from vgpuadm.ops.migrate import abort as migrate_abort
    from vgpuadm.ops.migrate import abort_here as migrate_abort_here
    from vgpuadm.ops.migrate import check as migrate_check
    from vgpuadm.ops.migrate import finish as migrate_finish
    from vgpuadm.ops.migrate import incoming as migrate_incoming
    from vgpuadm.ops.migrate import move as migrate_move
    from vgpuadm.ops.restore import DriftResult, RestoreResult, restore, restore_check
    from vgpuadm.ops.snapshot import import_ as snapshot_import
    from vgpuadm.ops.snapshot import take as snapshot
    from vgpuadm.ops.udev import install as udev_install
    from vgpuadm.ops.udev import status as udev_status
    from vgpuadm.ops.udev import uninstall as udev_uninstall
    from vgpuadm.ops.unit import UnitResult
    from vgpuadm.ops.unit import install as unit_install
    from vgpuadm.ops.unit import status as unit_status
    from vgpuadm.ops.unit import uninstall as unit_uninstall
    from vgpuadm.plan.devices import (
        check_count,
        explain_placement,
        plan_create,
        plan_remove,
        plan_vf_clear,
        plan_vf_type,
        plan_vfio_bind,
    )
    from vgpuadm.plan.guest import passthrough_functions
    from vgpuadm.report.doctor import to_json as doctor_json
    from vgpuadm.sim.faults import clear_faults, inject_fault, inject_stall
    from vgpuadm.sim.profiles import PROFILES as SIM_PROFILES
    from vgpuadm.sim.profiles import build as sim_build
    from vgpuadm.sim.reboot import reboot as sim_reboot
    from vgpuadm.sim.reset import reload_driver as sim_reload_driver
    from vgpuadm.sim.reset import reset as sim_reset
    from vgpuadm.sim.reset import set_ecc as sim_ecc
    from vgpuadm.sim.usage import set_gpu_usage as sim_gpu_usage
    from vgpuadm.sim.usage import set_vgpu_usage as sim_vgpu_usage
    from vgpuadm.steps import Plan
    from vgpuadm.virt import hookcall
    from vgpuadm.virt.conn import EMBED_SUBDIR, embed_uri, prepare_embedded

_HOMES: dict[str, tuple[str, str]] = {
    "HostRoot": ("vgpuadm.host.root", "HostRoot"),
    "EMBED_LIBVIRT": ("vgpuadm.host.root", "EMBED_LIBVIRT"),
    "read_host": ("vgpuadm.host.discover", "snapshot"),
    "model_names": ("vgpuadm.host.discover", "model_names"),
    "why_no_types": ("vgpuadm.catalog.capacity", "why_no_types"),
    "check_count": ("vgpuadm.plan.devices", "check_count"),
    "Plan": ("vgpuadm.steps", "Plan"),
    "hookcall": ("vgpuadm.virt", "hookcall"),
    "exec_start": ("vgpuadm.io.unitfile", "exec_start"),
    "SIM_PROFILES": ("vgpuadm.sim.profiles", "PROFILES"),
    "sim_build": ("vgpuadm.sim.profiles", "build"),
    "EMBED_SUBDIR": ("vgpuadm.virt.conn", "EMBED_SUBDIR"),
    "embed_uri": ("vgpuadm.virt.conn", "embed_uri"),
    "prepare_embedded": ("vgpuadm.virt.conn", "prepare_embedded"),
    "load_umockdev": ("vgpuadm.host.umockdev", "load"),
    "sim_reboot": ("vgpuadm.sim.reboot", "reboot"),
    "sim_reset": ("vgpuadm.sim.reset", "reset"),
    "sim_reload_driver": ("vgpuadm.sim.reset", "reload_driver"),
    "sim_ecc": ("vgpuadm.sim.reset", "set_ecc"),
    "clear_faults": ("vgpuadm.sim.faults", "clear_faults"),
    "inject_fault": ("vgpuadm.sim.faults", "inject_fault"),
    "inject_stall": ("vgpuadm.sim.faults", "inject_stall"),
    "sim_gpu_usage": ("vgpuadm.sim.usage", "set_gpu_usage"),
    "sim_vgpu_usage": ("vgpuadm.sim.usage", "set_vgpu_usage"),
    "EXPORTER_LISTEN": ("vgpuadm.ops.exporter", "DEFAULT_LISTEN"),
    "EXPORTER_TIMEOUT": ("vgpuadm.ops.exporter", "DEFAULT_TIMEOUT"),
    "Exporter": ("vgpuadm.ops.exporter", "Exporter"),
    "exporter_install": ("vgpuadm.ops.exporter", "install"),
    "exporter_serve": ("vgpuadm.ops.exporter", "serve"),
    "exporter_uninstall": ("vgpuadm.ops.exporter", "uninstall"),
    "exporter_write": ("vgpuadm.ops.exporter", "write_loop"),
    "ApplyResult": ("vgpuadm.ops.declarative", "ApplyResult"),
    "DemoResult": ("vgpuadm.ops.demo", "DemoResult"),
    "GuestResult": ("vgpuadm.ops.guest", "GuestResult"),
    "ReconcileResult": ("vgpuadm.ops.declarative", "ReconcileResult"),
    "RestoreResult": ("vgpuadm.ops.restore", "RestoreResult"),
    "DriftResult": ("vgpuadm.ops.restore", "DriftResult"),
    "restore_check": ("vgpuadm.ops.restore", "restore_check"),
    "UnitResult": ("vgpuadm.ops.unit", "UnitResult"),
    "apply": ("vgpuadm.ops.host", "apply"),
    "apply_desired": ("vgpuadm.ops.declarative", "apply_desired"),
    "apply_plan_file": ("vgpuadm.ops.declarative", "apply_plan_file"),
    "declarative": ("vgpuadm.ops", "declarative"),
    "demo": ("vgpuadm.ops.demo", "run"),
    "device_users": ("vgpuadm.ops.inventory", "device_users"),
    "discover": ("vgpuadm.ops.host", "discover"),
    "doctor": ("vgpuadm.ops.doctor", "doctor"),
    "doctor_json": ("vgpuadm.report.doctor", "to_json"),
    "domain_allocations": ("vgpuadm.ops.inventory", "domain_allocations"),
    "explain_placement": ("vgpuadm.plan.devices", "explain_placement"),
    "guest": ("vgpuadm.ops", "guest"),
    "guest_adopt": ("vgpuadm.ops.guest", "adopt"),
    "guest_create": ("vgpuadm.ops.guest", "create"),
    "guest_create_many": ("vgpuadm.ops.guest", "create_many"),
    "guest_destroy": ("vgpuadm.ops.guest", "destroy"),
    "guest_passthrough": ("vgpuadm.ops.guest", "passthrough"),
    "guest_release": ("vgpuadm.ops.guest", "release"),
    "hook": ("vgpuadm.ops", "hook"),
    "hook_install": ("vgpuadm.ops.hook", "install"),
    "hook_run": ("vgpuadm.ops.hook", "run"),
    "hook_status": ("vgpuadm.ops.hook", "status"),
    "hook_uninstall": ("vgpuadm.ops.hook", "uninstall"),
    "host_lock": ("vgpuadm.ops.host", "host_lock"),
    "inventory": ("vgpuadm.ops.inventory", "inventory"),
    "mdevctl": ("vgpuadm.ops", "mdevctl"),
    "mdevctl_export": ("vgpuadm.ops.mdevctl", "export"),
    "mdevctl_import": ("vgpuadm.ops.mdevctl", "import_"),
    "merge_inventories": ("vgpuadm.ops.fleet", "merge_inventories"),
    "mig": ("vgpuadm.ops", "mig"),
    "open_sysfs": ("vgpuadm.ops.host", "open_sysfs"),
    "original_drivers": ("vgpuadm.ops.host", "original_drivers"),
    "passthrough_functions": ("vgpuadm.plan.guest", "passthrough_functions"),
    "plan_create": ("vgpuadm.plan.devices", "plan_create"),
    "plan_remove": ("vgpuadm.plan.devices", "plan_remove"),
    "plan_sriov": ("vgpuadm.ops.host", "plan_sriov"),
    "plan_vf_clear": ("vgpuadm.plan.devices", "plan_vf_clear"),
    "plan_vf_type": ("vgpuadm.plan.devices", "plan_vf_type"),
    "plan_vfio_bind": ("vgpuadm.plan.devices", "plan_vfio_bind"),
    "plan_vfio_restore": ("vgpuadm.ops.host", "plan_vfio_restore"),
    "migrate_abort": ("vgpuadm.ops.migrate", "abort"),
    "migrate_abort_here": ("vgpuadm.ops.migrate", "abort_here"),
    "migrate_check": ("vgpuadm.ops.migrate", "check"),
    "migrate_finish": ("vgpuadm.ops.migrate", "finish"),
    "migrate_incoming": ("vgpuadm.ops.migrate", "incoming"),
    "migrate_move": ("vgpuadm.ops.migrate", "move"),
    "reconcile": ("vgpuadm.ops.declarative", "reconcile"),
    "recover": ("vgpuadm.ops.host", "recover"),
    "resolve_root": ("vgpuadm.host.root", "resolve_root"),
    "restore": ("vgpuadm.ops.restore", "restore"),
    "run_host_verb": ("vgpuadm.ops.host", "run"),
    "set_lock_policy": ("vgpuadm.executor", "set_lock_policy"),
    "show_vm": ("vgpuadm.ops.inventory", "show_vm"),
    "snapshot": ("vgpuadm.ops.snapshot", "take"),
    "snapshot_import": ("vgpuadm.ops.snapshot", "import_"),
    "udev_install": ("vgpuadm.ops.udev", "install"),
    "udev_status": ("vgpuadm.ops.udev", "status"),
    "udev_uninstall": ("vgpuadm.ops.udev", "uninstall"),
    "udevrun": ("vgpuadm.ops", "udevrun"),
    "unit": ("vgpuadm.ops", "unit"),
    "unit_install": ("vgpuadm.ops.unit", "install"),
    "unit_status": ("vgpuadm.ops.unit", "status"),
    "unit_uninstall": ("vgpuadm.ops.unit", "uninstall"),
    "vms": ("vgpuadm.ops.inventory", "vms"),
    "write_report": ("vgpuadm.host.root", "write_report"),
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'vgpuadm.api' has no attribute {name!r}") from None
    home = _import(module)
    value = getattr(home, attr) if hasattr(home, attr) else _import(f"{module}.{attr}")
    globals()[name] = value
    return value


def _import(module: str) -> Any:
    """importlib.import_module of an absolute name, without importing importlib (and its warnings) on the read
    commands' path (bench/bench_cold_start.py)."""
    __import__(module)
    return sys.modules[module]
