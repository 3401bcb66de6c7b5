"""`vgpuadm migrate check`: read this host (the VM's recorded devices, the snapshot) and the target's inventory,
and ask the pure check (plan/migration.py) how each device can move there."""

from __future__ import annotations

from vgpuadm.catalog.migration import GpuDriver, target_host
from vgpuadm.errors import UsageError
from vgpuadm.host import nvidia_smi
from vgpuadm.host.nvidia_smi_vgpu import parse_query_xml
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
        return migration.check(s.snap, d.name, d.running, d.allocations, target, postcopy=postcopy, offline=offline,
                               drivers=_drivers(s))  # fmt: skip


def _drivers(s: Session) -> dict[str, GpuDriver]:
    """What this host's NVIDIA driver reports per GPU that a live move needs to match (`nvidia-smi -q -x`; nothing
    without nvidia-smi or when it fails: the check then says what it did not compare)."""
    if nvidia_smi.locate(s.root) is None:
        return {}
    result = nvidia_smi.capture(s.root, nvidia_smi.QUERY_XML)
    gpus = parse_query_xml(result.stdout.encode()) if result is not None and result.returncode == 0 else []
    return {g.address: GpuDriver(None if g.ecc == "N/A" else g.ecc, g.driver_version) for g in gpus}
