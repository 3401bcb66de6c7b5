"""`vgpuadm migrate check`: read this host (the VM's recorded devices, the snapshot) and the target's inventory,
and ask the pure check (plan/migration.py) how each device can move there."""

from __future__ import annotations

from vgpuadm.catalog.migration import target_host
from vgpuadm.errors import UsageError
from vgpuadm.io import remote
from vgpuadm.ops.session import Session
from vgpuadm.plan import migration
from vgpuadm.report.merge import MAX_REPORT, load_report, parse_report

TARGET_HINT = (
    "give the target's libvirt URI (--to qemu+ssh://root@gpu2/system: its vgpuadm is asked over ssh), or "
    "run `vgpuadm inventory --json > target.json` there and pass --target-inventory target.json"
)


def check(
    root: str | None,
    vm: str,
    *,
    connect: str | None = None,
    to: str | None = None,
    target_inventory: str | None = None,
    postcopy: bool = False,
    offline: bool = False,
) -> migration.MoveCheck:
    """How each device of `vm` can move to the target host: the one `target_inventory` describes, else the one the
    libvirt URI `to` names, whose vgpuadm is asked over ssh (NotFoundError: no such domain; UsageError: no target
    or a bad inventory; HostIOError: the target did not answer)."""
    if target_inventory:
        target = target_host(load_report(target_inventory), target_inventory)
    elif to:
        argv, host = remote.ssh_command(to)
        where = f"the inventory {host} sent"
        target = target_host(parse_report(remote.run(argv, host, MAX_REPORT), where), where)
    else:
        raise UsageError("migrate check needs the target host: --to URI or --target-inventory FILE", TARGET_HINT)
    with Session.read(root, connect) as s:
        d = s.domains().by_name.get(vm)
        if d is None:
            s.virt.xml(vm)  # raises NotFoundError naming the domain
            return migration.check(s.snap, vm, None, (), target, postcopy=postcopy, offline=offline)
        return migration.check(s.snap, d.name, d.running, d.allocations, target, postcopy=postcopy, offline=offline)
