"""The one surface the CLI and the Ansible module call: typed re-exports of the orchestrators in vgpuadm.ops (and
the pure planners they share). No logic lives here; where each behaviour lives is named beside it."""

from __future__ import annotations

from vgpuadm.executor import set_lock_policy
from vgpuadm.host.root import resolve_root
from vgpuadm.ops import declarative, guest, hook, mdevctl, unit
from vgpuadm.ops import mig as mig
from vgpuadm.ops.declarative import (
    ApplyResult,
    ReconcileResult,
    RestoreResult,
    apply_desired,
    apply_plan_file,
    reconcile,
    restore,
)
from vgpuadm.ops.demo import DemoResult
from vgpuadm.ops.demo import run as demo
from vgpuadm.ops.doctor import doctor
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
from vgpuadm.ops.inventory import device_users, domain_allocations, inventory, merge_inventories, show_vm, vms
from vgpuadm.ops.mdevctl import export as mdevctl_export
from vgpuadm.ops.mdevctl import import_ as mdevctl_import
from vgpuadm.ops.snapshot import import_ as snapshot_import
from vgpuadm.ops.snapshot import take as snapshot
from vgpuadm.ops.unit import UnitResult
from vgpuadm.ops.unit import install as unit_install
from vgpuadm.ops.unit import status as unit_status
from vgpuadm.ops.unit import uninstall as unit_uninstall
from vgpuadm.plan.devices import (
    explain_placement,
    plan_create,
    plan_remove,
    plan_vf_clear,
    plan_vf_type,
    plan_vfio_bind,
)
from vgpuadm.plan.guest import passthrough_functions
from vgpuadm.report.doctor import to_json as doctor_json

__all__ = [
    "ApplyResult",
    "DemoResult",
    "GuestResult",
    "ReconcileResult",
    "RestoreResult",
    "UnitResult",
    "apply",
    "apply_desired",
    "apply_plan_file",
    "declarative",
    "demo",
    "device_users",
    "discover",
    "doctor",
    "doctor_json",
    "domain_allocations",
    "explain_placement",
    "guest",
    "guest_adopt",
    "guest_create",
    "guest_create_many",
    "guest_destroy",
    "guest_passthrough",
    "guest_release",
    "hook",
    "hook_install",
    "hook_run",
    "hook_status",
    "hook_uninstall",
    "host_lock",
    "inventory",
    "mdevctl",
    "mdevctl_export",
    "mdevctl_import",
    "merge_inventories",
    "mig",
    "open_sysfs",
    "original_drivers",
    "passthrough_functions",
    "plan_create",
    "plan_remove",
    "plan_sriov",
    "plan_vf_clear",
    "plan_vf_type",
    "plan_vfio_bind",
    "plan_vfio_restore",
    "reconcile",
    "recover",
    "resolve_root",
    "restore",
    "run_host_verb",
    "set_lock_policy",
    "show_vm",
    "snapshot",
    "snapshot_import",
    "unit",
    "unit_install",
    "unit_status",
    "unit_uninstall",
    "vms",
]  # fmt: skip
