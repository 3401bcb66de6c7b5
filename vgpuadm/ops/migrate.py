"""`vgpuadm migrate check`: read this host (the VM's recorded devices, the snapshot) and the target's inventory,
and ask the pure check (plan/migration.py) how each device can move there."""

from __future__ import annotations

from vgpuadm.catalog.migration import target_host
from vgpuadm.errors import UsageError
from vgpuadm.ops.session import Session
from vgpuadm.plan import migration
from vgpuadm.report.merge import load_report

TARGET_HINT = "run `vgpuadm inventory --json > target.json` on the target host and pass --target-inventory target.json"


def check(
    root: str | None,
    vm: str,
    *,
    connect: str | None = None,
    target_inventory: str | None = None,
    postcopy: bool = False,
    offline: bool = False,
) -> migration.MoveCheck:
    """How each device of `vm` can move to the host `target_inventory` describes (NotFoundError: no such
    domain; UsageError: no or a bad inventory)."""
    if not target_inventory:
        raise UsageError("migrate check needs the target host's inventory", TARGET_HINT)
    target = target_host(load_report(target_inventory), target_inventory)
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return migration.check(s.snap, vm, None, (), target, postcopy=postcopy, offline=offline)
        return migration.check(s.snap, d.name, d.running, d.allocations, target, postcopy=postcopy, offline=offline)
