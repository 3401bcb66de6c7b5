"""`vgpuadm migrate check`: how each of a VM's devices can move to another host — live, only with the VM stopped
(cold), or not at all, with the reason (ops/migrate.py, plan/migration.py; schema migrate-check). `migrate prepare`,
`run` and `abort` move it (live while it runs, else cold) and undo a move that stopped half-way, `finish` ends one on
the target; `migrate incoming` is the target's part, run there by the source's vgpuadm (hidden; schema
migrate-step)."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, plan_options
from vgpuadm.errors import UsageError

MOVE_WORDS = {"live": "can move live", "cold": "can move only stopped (cold)", "no": "cannot move"}


def check(console: Console, root: str | None, connect: str | None, vm: str, to: str | None,
          target_inventory: str | None, postcopy: bool, offline: bool, as_json: bool,
          target_root: str | None = None, target_connect: str | None = None) -> int:  # fmt: skip
    """Print the check; the exit code: 0 when the VM can move the way asked (live while it runs, unless
    --offline; else cold), 1 when it cannot."""
    result = api.migrate_check(root, vm, connect=connect, to=to, target_inventory=target_inventory,
                               postcopy=postcopy, offline=offline, target_root=target_root,
                               target_connect=target_connect)  # fmt: skip
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


def report(console: Console, result: Any, as_json: bool, done: str, would: str) -> None:
    """A move (MoveResult) or one host's part of it (MoveStep): what was done (or would be), step by step."""
    if as_json:
        console.json(result.to_json())
        return
    pairs = result.steps if hasattr(result, "target") else [("this host", s) for s in result.steps]
    if not pairs:
        console.line(f"nothing to do: domain {result.domain} records no move here" if result.state == "none" else
                     f"nothing to do: domain {result.domain} is {result.state} already")  # fmt: skip
        return
    console.line(f"{would if result.dry_run else done}:")
    for where, step in pairs:
        console.line(f"  {where}: {step}")


def _target_options() -> tuple[Any, Any, Any]:
    import typer

    to = typer.Option(
        None,
        "--to",
        metavar="URI",
        help="The target's libvirt URI (qemu+ssh://[user@]host/system): its vgpuadm is run over ssh.",
    )
    root = typer.Option(
        None,
        "--target-root",
        metavar="DIR",
        help="A simulated target host on this machine (a root `vgpuadm sim build` made).",
    )
    connect = typer.Option(
        None,
        "--target-connect",
        metavar="URI",
        help="The simulated target's libvirt when not its embedded one (given to its vgpuadm as --connect).",
    )
    return to, root, connect  # fmt: skip


def register(app: Any) -> None:
    """Add the `migrate` group to the top-level typer app."""
    import typer

    group = typer.Typer(help="Move a VM with GPU devices to another libvirt host.", no_args_is_help=True)
    to_opt, root_opt, connect_opt = _target_options()

    @group.command("check", epilog="Example: vgpuadm migrate check --vm web01 --to qemu+ssh://gpu2/system "
                   "--target-inventory gpu2.json")  # fmt: skip
    def check_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain to move.", metavar="NAME"),
        to: str = typer.Option(None, "--to", metavar="URI", help="The target's libvirt URI; without --target-inventory its vgpuadm is asked over ssh (qemu+ssh://)."),
        target_inventory: str = typer.Option(None, "--target-inventory", metavar="FILE",
                                             help="The target host's `vgpuadm inventory --json`."),
        target_root: str = root_opt,
        target_connect: str = connect_opt,
        postcopy: bool = typer.Option(False, "--postcopy", help="Check a post-copy move (refused with VFIO)."),
        offline: bool = typer.Option(False, "--offline", help="Check a move with the VM stopped (cold)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON (schemas/migrate-check.schema.json)."),
    ) -> None:  # fmt: skip
        """Say per device whether the VM can move to the target live, only stopped, or not at all, and why."""
        code = check(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), vm, to, target_inventory,
                     postcopy, offline, as_json, target_root, target_connect)  # fmt: skip
        if code:
            raise typer.Exit(code)

    dry_opt, json_opt = plan_options()

    @group.command("prepare", epilog="Example: vgpuadm migrate prepare --vm web01 --to qemu+ssh://gpu2/system")
    def prepare_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain to move.", metavar="NAME"),
        to: str = to_opt,
        target_root: str = root_opt,
        target_connect: str = connect_opt,
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Make the VM's devices on the target through its own vgpuadm and record them incoming there (outgoing
        here); `migrate run` finishes the move, `migrate abort` undoes it."""
        result = api.migrate_move(ctx.obj["root"], vm, to=to, target_root=target_root, target_connect=target_connect,
                                  connect=ctx.obj.get("connect"), dry_run=dry_run, finish=False)  # fmt: skip
        report(ctx.obj["console"], result, as_json, f"prepared domain {vm} on {result.target}",
               f"would prepare domain {vm} on {result.target}")  # fmt: skip

    @group.command("run", epilog="Example: vgpuadm migrate run --vm web01 --to qemu+ssh://gpu2/system --dry-run")
    def run_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain to move.", metavar="NAME"),
        to: str = to_opt,
        target_root: str = root_opt,
        target_connect: str = connect_opt,
        offline: bool = typer.Option(False, "--offline", help="Move the VM stopped (cold): refused while it runs."),
        migrate_uri: str = typer.Option(None, "--migrate-uri", metavar="tcp://HOST[:PORT]",
                                        help="A live move's data address on the target (libvirt's migrate URI)."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """Move a VM and its devices to the target: its devices made there, the domain defined there; a running VM
        then moves live (libvirt: live, post-copy off), a shut-off one is undefined here; its devices here freed.
        A failure leaves the VM here as it was (running on, when it ran)."""
        result = api.migrate_move(ctx.obj["root"], vm, to=to, target_root=target_root, target_connect=target_connect,
                                  migrate_uri=migrate_uri, connect=ctx.obj.get("connect"), dry_run=dry_run,
                                  offline=offline)  # fmt: skip
        report(ctx.obj["console"], result, as_json, f"moved domain {vm} to {result.target}",
               f"would move domain {vm} to {result.target}")  # fmt: skip

    @group.command("abort", epilog="Example: vgpuadm migrate abort --vm web01 --to qemu+ssh://gpu2/system")
    def abort_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain whose move stopped half-way.", metavar="NAME"),
        to: str = to_opt,
        target_root: str = root_opt,
        target_connect: str = connect_opt,
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Undo a move that stopped half-way: the target's part first (when --to or --target-root names it: the
        domain and devices it made there go), then this host's (an incoming domain goes; an outgoing one stays,
        as it was)."""
        if to is None and target_root is None:
            result: Any = api.migrate_abort_here(ctx.obj["root"], vm, connect=ctx.obj.get("connect"), dry_run=dry_run)
        else:
            result = api.migrate_abort(ctx.obj["root"], vm, to=to, target_root=target_root,
                                       target_connect=target_connect, connect=ctx.obj.get("connect"),
                                       dry_run=dry_run)  # fmt: skip
        report(ctx.obj["console"], result, as_json, f"aborted the move of domain {vm}",
               f"would abort the move of domain {vm}")  # fmt: skip

    @group.command("incoming", hidden=True)
    def incoming_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", metavar="NAME"),
        definition: str = typer.Option(..., "--definition", metavar="FILE",
                                       help="The domain's XML without vgpuadm's devices ('-': standard input)."),
        type_name: str = typer.Option(..., "--type", metavar="TYPE"),
        count: int = typer.Option(1, "--count", metavar="N"),
        uuids: list[str] = typer.Option([], "--uuid", metavar="UUID", help="The source's mdev UUIDs, in order."),
        params: list[str] = typer.Option([], "--param", metavar="KEY=VALUE"),
        display: str = typer.Option("off", "--display", metavar="on|off"),
        ramfb: bool = typer.Option(False, "--ramfb"),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """The target's part of `migrate prepare|run` (run there by the source): define the domain and give it
        devices of the type, recorded incoming."""
        if display not in ("on", "off"):
            raise UsageError(f"--display {display[:40]!r} is on or off", "write --display on or --display off")
        result = api.migrate_incoming(ctx.obj["root"], vm, "/dev/stdin" if definition == "-" else definition,
                                      type_name, count, uuids=tuple(uuids), params=tuple(params),
                                      display=display == "on", ramfb=ramfb, connect=ctx.obj.get("connect"),
                                      dry_run=dry_run)  # fmt: skip
        report(ctx.obj["console"], result, as_json, f"prepared incoming domain {vm}",
               f"would prepare incoming domain {vm}")  # fmt: skip

    @group.command("finish", epilog="Example: vgpuadm migrate finish --vm web01   # on the target")
    def finish_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The domain that moved here.", metavar="NAME"),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """On the target: record the move as over (its devices stop being incoming). `migrate run` does it last;
        run it by hand when that last step failed after the domain left the source."""
        result = api.migrate_finish(ctx.obj["root"], vm, connect=ctx.obj.get("connect"), dry_run=dry_run)
        report(ctx.obj["console"], result, as_json, f"finished the move of domain {vm}",
               f"would finish the move of domain {vm}")  # fmt: skip

    app.add_typer(group, name="migrate")
