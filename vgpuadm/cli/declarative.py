"""Declarative and reboot-survival commands: `vgpuadm apply -f`, `restore`, `reconcile`, `mdevctl export|import`."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, SyslogConsole, logged, plan_options
from vgpuadm.errors import ConflictError, NotFoundError

EXIT_DRIFTED = 1  # `restore --check`: something differs from the record (0: nothing does)


def apply(console: Console, root: str | None, connect: str | None, plan_file: str, check: bool, show_diff: bool,
          prune: bool, as_json: bool = False) -> None:  # fmt: skip
    if check or as_json:
        result = api.apply_plan_file(plan_file, root, connect=connect, check=check, prune=prune)
    else:
        with console.progress("apply") as progress:
            result = api.apply_plan_file(plan_file, root, connect=connect, prune=prune, progress=progress)
    if as_json:
        console.json(result.to_json())
        return
    d = result.diff
    if show_diff or check:
        for line in d.lines():
            console.line(line)
    for vm in d.untouched:
        console.line(f"left alone: {vm} (not in the plan; --prune removes its devices)")
    for warning in result.warnings:
        console.line(f"warning: {warning}")
    if d.empty:
        console.line("nothing to do: the host matches the plan")
    elif check:
        back = f"bring back {len(d.missing)} missing device(s), then " if d.missing else ""
        console.line(f"would {back}run {len(result.plan.steps)} step(s); nothing was changed (--check)")
    else:
        if result.restored:
            console.line(f"brought back {len(d.missing)} missing device(s) in {len(result.restored)} restore step(s)")
        if not result.plan.empty or not result.restored:
            console.line(f"applied {len(result.applied)} step(s): {result.plan.summary}")


def restore(console: Console, root: str | None, connect: str | None, domain_xml_dir: str | None,
            timeout: float, as_json: bool = False, dry_run: bool = False, gpus: tuple[str, ...] = (),
            parents: tuple[str, ...] = ()) -> None:  # fmt: skip
    report = None if as_json else console.line
    result = api.restore(root, connect=connect, domain_xml_dir=domain_xml_dir, timeout=timeout, report=report,
                         dry_run=dry_run, gpus=gpus, parents=parents)  # fmt: skip
    if as_json:
        console.json(result.to_json())  # printed even with problems: the error below still makes the exit non-zero
    elif dry_run:
        console.line(f"would run {len(result.planned)} step(s) first for {result.devices} recorded device(s); "
                     "nothing was changed (--dry-run)")  # fmt: skip
    elif not result.done and not result.problems and not result.held:
        on = _on(result.gpus, result.parents)
        console.line(f"nothing to restore: all {result.devices} recorded device(s){on} are in place")
    elif result.done:
        on = _on(result.gpus, result.parents)
        console.line(f"restored: {len(result.done)} step(s) for {result.devices} recorded device(s){on}")
    if result.held and not result.problems:
        raise ConflictError(
            f"{len(result.held)} device(s) of running domains are gone and were left alone: {'; '.join(result.held[:3])}"
            + (" …" if len(result.held) > 3 else ""),
            "a running guest lost its device: shut the domain down, then run `vgpuadm restore` (it recreates the "
            "device with the same UUID)",
        )
    if result.problems:
        first = result.problems[0]
        raise NotFoundError(
            f"{len(result.problems)} device(s) could not be restored: {'; '.join(result.problems)}"
            if len(result.problems) < 4
            else f"{len(result.problems)} device(s) could not be restored, first: {first}",
            "check that the GPU driver and its daemons run (nvidia-vgpud, nvidia-vgpu-mgr), then run "
            "`vgpuadm restore` again; it only redoes what is missing",
        )


def _on(gpus: tuple[str, ...], parents: tuple[str, ...]) -> str:
    """ " on GPU 0000:18:00.0" for a restore of some GPUs or parents (as the user named them), "" for the host."""
    named = [*(f"GPU {g}" for g in gpus), *(f"parent {p}" for p in parents)]
    return f" on {', '.join(named)}" if named else ""


def restore_check(console: Console, root: str | None, connect: str | None, domain_xml_dir: str | None,
                  as_json: bool, gpus: tuple[str, ...], parents: tuple[str, ...]) -> int:  # fmt: skip
    """`restore --check`: the drift, one line each; EXIT_DRIFTED when there is some."""
    result = api.restore_check(root, connect=connect, domain_xml_dir=domain_xml_dir, gpus=gpus, parents=parents)
    if as_json:
        console.json(result.to_json())
    else:
        for line in result.drift:
            console.line(f"drift: {line}")
        if result.drift:
            console.line(f"{len(result.drift)} difference(s) from what {result.devices} recorded device(s) need; "
                         f"`vgpuadm restore{''.join(f' --gpu {g}' for g in result.gpus)}"
                         f"{''.join(f' --parent {p}' for p in result.parents)}` brings them back")  # fmt: skip
        else:
            console.line(
                f"no drift: all {result.devices} recorded device(s){_on(result.gpus, result.parents)} are as recorded"
            )
    return EXIT_DRIFTED if result.drift else 0


def reconcile(console: Console, root: str | None, connect: str | None, fix: bool, finish: bool,
              as_json: bool = False, dry_run: bool = False) -> None:  # fmt: skip
    result = api.reconcile(root, connect=connect, fix=fix, finish=finish, dry_run=dry_run)
    if as_json:
        console.json(result.to_json())
        return
    for line in result.recovered:
        console.line(f"journal: {line}")
    if not result.recovered:
        console.line("journal: no interrupted change")
    for leak in result.leaks:
        console.line(f"{('would remove' if dry_run else 'removed') if fix else 'leak'}: {leak.describe()}")
    if not result.leaks:
        console.line("no leaked devices")
    elif not fix:
        console.line(f"{len(result.leaks)} leaked device(s); `vgpuadm reconcile --fix` removes them")
    for line in result.lost:
        console.warn(f"recorded but missing: {line} (run `vgpuadm restore`)")
    for domain, state, running in result.moving:
        if state == "incoming" and running:  # it moved here live: only the mark is left to drop
            console.warn(f"domain {domain} is incoming and runs here: its live move stopped after the guest came "
                         f"(`vgpuadm migrate finish --vm {domain}` here ends it)")  # fmt: skip
            continue
        console.warn(f"domain {domain} is {state}: its move to or from another host stopped half-way (`vgpuadm "
                     f"migrate run --vm {domain}` on the source goes on, `vgpuadm migrate abort --vm {domain}` goes "
                     "back)")  # fmt: skip


def mdevctl_export(console: Console, root: str | None, connect: str | None, domain_xml_dir: str | None,
                   from_host: bool, dry_run: bool = False, as_json: bool = False) -> None:  # fmt: skip
    result = api.mdevctl_export(root, connect=connect, domain_xml_dir=domain_xml_dir, from_host=from_host,
                                dry_run=dry_run)  # fmt: skip
    if as_json:
        console.json(result.to_json())
        return
    verb = "would write" if dry_run else "wrote"
    real = api.HostRoot(root).real  # the files themselves, under a --root
    for d, changed in result.written:
        console.line(f"{verb if changed else 'unchanged'} {real(d.host_path)} ({d.mdev_type}, start={d.start})")
    if not result.written:
        console.line("no mdevs to export")
    elif dry_run:
        console.line("nothing was changed (--dry-run)")


def mdevctl_import(console: Console, root: str | None, check: bool, include_manual: bool,
                   as_json: bool = False) -> None:  # fmt: skip
    result = api.mdevctl_import(root, check=check, include_manual=include_manual)
    if as_json:
        console.json(result.to_json())
    for p in result.problems:
        console.warn(p)
    if as_json:
        return
    for line in result.applied:
        console.line(line)
    if result.plan.empty:
        console.line("nothing to do: every mdevctl definition is running")
    elif check:
        console.line("nothing was changed (--check)")


def register(app: Any) -> None:
    """Add apply, restore, reconcile and the mdevctl group to the top-level typer app."""
    import typer

    dry_opt, json_opt = plan_options()

    @app.command(
        "apply",
        epilog="Example: vgpuadm apply -f plan.yaml --check   (shows the diff, changes nothing; then "
        "vgpuadm apply -f plan.yaml --diff to make it so) · cat plan.yaml | vgpuadm apply -f -",
    )
    def apply_cmd(
        ctx: typer.Context,
        plan_file: str = typer.Option(
            ...,
            "-f",
            "--file",
            help="The plan (YAML, vgpuadm/schemas/plan-v1); `-` reads it from stdin.",
            metavar="PLAN",
        ),
        check: bool = typer.Option(False, "--check", "--dry-run", help="Show what would change; change nothing."),
        show_diff: bool = typer.Option(False, "--diff", help="Print the changes (+ add, - remove, ~ change)."),
        prune: bool = typer.Option(False, "--prune", help="Also take devices from VMs the plan does not name."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (schemas/apply.schema.json)."),
    ) -> None:
        """Make the host match a plan: devices per VM (type and count, or passthrough). Idempotent; VMs the plan
        does not name are left alone; never takes a device from a running VM."""
        apply(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), plan_file, check, show_diff, prune, as_json)

    @app.command(
        "restore",
        epilog="Examples: vgpuadm restore --timeout 120   (run at boot by vgpuadm-restore.service) · after a GPU "
        "reset: vgpuadm restore --gpu 0000:18:00.0 · vgpuadm restore --check   (exit 1 when something drifted)",
    )
    def restore_cmd(
        ctx: typer.Context,
        domain_xml_dir: str = typer.Option(
            None, "--domain-xml-dir", metavar="DIR",
            help="Read domains from XML files (e.g. /etc/libvirt/qemu) instead of asking libvirt (at boot, before it runs).",
        ),
        old_domain_xml_dir: str = typer.Option(None, "--domains-xml", hidden=True, metavar="DIR"),  # inventory's old name
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for GPUs to register.", metavar="S"),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (schemas/restore.schema.json)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print what restore would do first; change nothing."),
        gpus: list[str] = typer.Option([], "--gpu", metavar="ADDR",
                                       help="Only the devices and enablers of this GPU (its PF address; repeatable)."),
        parents: list[str] = typer.Option([], "--parent", metavar="NAME",
                                          help="Only the devices on this mdev parent (a PCI address, a VF, mtty; "
                                               "repeatable)."),
        check: bool = typer.Option(False, "--check", help="Report what differs from the record (one line each), "
                                   "change nothing; exit 1 when something does."),
        to_syslog: bool = typer.Option(False, "--syslog", help="Send the outcome to the system log (ident vgpuadm), "
                                       "nothing to the terminal: for runs nobody watches."),
    ) -> None:  # fmt: skip
        """After a reboot, re-create every device the domains' vgpuadm metadata records: driver, SR-IOV VFs, vGPU
        types and mdevs (same UUIDs), vgpu_params, vfio-pci binds. After a GPU reset or a driver reload, --gpu or
        --parent re-converges that GPU or parent only. A running domain's gone device is reported, never recreated
        (exit 5). Idempotent."""
        xml_dir = domain_xml_dir or old_domain_xml_dir
        console: Console = ctx.obj["console"]
        if to_syslog:  # the outcome, errors included, to the system log; the exit code still tells
            console = SyslogConsole(err=console.err)
            api.set_lock_policy(ctx.obj["lock"][0], console.warn, ctx.obj["lock"][1])  # a wait for the lock: logged
        scope = (tuple(gpus), tuple(parents))

        def run() -> int:
            if check:
                return restore_check(console, ctx.obj["root"], ctx.obj.get("connect"), xml_dir, as_json, *scope)
            restore(console, ctx.obj["root"], ctx.obj.get("connect"), xml_dir, timeout, as_json, dry_run, *scope)
            return 0

        code = logged(console, run) if to_syslog else run()
        if code:
            raise typer.Exit(code)

    @app.command("reconcile", epilog="Example: vgpuadm reconcile --fix")
    def reconcile_cmd(
        ctx: typer.Context,
        fix: bool = typer.Option(False, "--fix", help="Remove the devices no domain owns."),
        finish: bool = typer.Option(False, "--finish", help="Complete an interrupted change instead of rolling back."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (schemas/reconcile.schema.json)."),
        dry_run: bool = dry_opt,
    ) -> None:
        """List devices that no domain owns (leaks; --fix removes them). It first does what `vgpuadm recover` does
        (rolls back, or --finish completes, a change a crash interrupted), so one command cleans up after a crash."""
        reconcile(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), fix, finish, as_json, dry_run)

    mdevctl_app = typer.Typer(help="mdevctl interop: /etc/mdevctl.d/<parent>/<uuid> definitions.", no_args_is_help=True)

    @mdevctl_app.command("export", epilog="Example: vgpuadm mdevctl export   (then: mdevctl list --defined)")
    def export_cmd(
        ctx: typer.Context,
        domain_xml_dir: str = typer.Option(
            None, "--domain-xml-dir", help="Read domains from XML files.", metavar="DIR"
        ),
        old_domain_xml_dir: str = typer.Option(
            None, "--domains-xml", hidden=True, metavar="DIR"
        ),  # inventory's old name
        from_host: bool = typer.Option(False, "--from-host", help="Export every existing mdev, owned or not."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Write an mdevctl definition (start=auto) for every mdev the domains own, so mdevctl's udev rule can
        re-create them at boot."""
        mdevctl_export(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"),
                       domain_xml_dir or old_domain_xml_dir, from_host, dry_run, as_json)  # fmt: skip

    @mdevctl_app.command("import", epilog="Example: vgpuadm mdevctl import --check")
    def import_cmd(
        ctx: typer.Context,
        check: bool = typer.Option(False, "--check", "--dry-run", help="Show what would be created; change nothing."),
        include_manual: bool = typer.Option(False, "--all", help="Also start definitions with start=manual."),
        as_json: bool = json_opt,
    ) -> None:
        """Create the mdevs that mdevctl definitions describe and that do not exist yet."""
        mdevctl_import(ctx.obj["console"], ctx.obj["root"], check, include_manual, as_json)

    app.add_typer(mdevctl_app, name="mdevctl")
