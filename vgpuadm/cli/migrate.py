"""`vgpuadm migrate check`: how each of a VM's devices can move to another host — live, only with the VM stopped
(cold), or not at all, with the reason (ops/migrate.py, plan/migration.py; schema migrate-check)."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console

MOVE_WORDS = {"live": "can move live", "cold": "can move only stopped (cold)", "no": "cannot move"}


def check(console: Console, root: str | None, connect: str | None, vm: str, to: str | None,
          target_inventory: str | None, postcopy: bool, offline: bool, as_json: bool) -> int:  # fmt: skip
    """Print the check; the exit code: 0 when the VM can move the way asked (live while it runs, unless
    --offline; else cold), 1 when it cannot."""
    result = api.migrate_check(root, vm, connect=connect, to=to, target_inventory=target_inventory,
                               postcopy=postcopy, offline=offline)  # fmt: skip
    if as_json:
        console.json(result.to_json())
        return 0 if result.ok else 1
    state = {True: "running", False: "shut off", None: "unknown"}[result.running]
    where = to or f"host {result.target}"
    console.line(f"{result.domain} ({state}) to {where}: {MOVE_WORDS[result.move]}")
    if not result.devices:
        console.line("  no vgpuadm device recorded: nothing of vgpuadm's is in the way")
    for d in result.devices:
        on = f" to GPU {d.target_gpu}" if d.target_gpu else ""
        why = f": {'; '.join(d.reasons)}" if d.reasons else ""
        console.line(f"  {d.what}: {d.move}{on}{why}")
    for note in result.notes:
        console.line(f"note: {note}")
    return 0 if result.ok else 1


def register(app: Any) -> None:
    """Add the `migrate` group to the top-level typer app."""
    import typer

    group = typer.Typer(help="Move a VM with GPU devices to another libvirt host.", no_args_is_help=True)

    @group.command("check", epilog="Example: vgpuadm migrate check --vm web01 --to qemu+ssh://gpu2/system "
                   "--target-inventory gpu2.json")  # fmt: skip
    def check_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain to move.", metavar="NAME"),
        to: str = typer.Option(None, "--to", metavar="URI", help="The target's libvirt URI; without --target-inventory its vgpuadm is asked over ssh (qemu+ssh://)."),
        target_inventory: str = typer.Option(None, "--target-inventory", metavar="FILE",
                                             help="The target host's `vgpuadm inventory --json`."),
        postcopy: bool = typer.Option(False, "--postcopy", help="Check a post-copy move (refused with VFIO)."),
        offline: bool = typer.Option(False, "--offline", help="Check a move with the VM stopped (cold)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schemas/migrate-check.schema.json)."),
    ) -> None:  # fmt: skip
        """Say per device whether the VM can move to the target live, only stopped, or not at all, and why."""
        code = check(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), vm, to, target_inventory,
                     postcopy, offline, as_json)  # fmt: skip
        if code:
            raise typer.Exit(code)

    app.add_typer(group, name="migrate")
