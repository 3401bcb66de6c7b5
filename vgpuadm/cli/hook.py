"""`vgpuadm hook run|install|uninstall|status`: libvirt's qemu hook for on-demand devices (vgpuadm/ops/hook.py).
`hook run`, what libvirt executes, is cli/hookrun.py."""

import sys
from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, plan_options
from vgpuadm.cli.hookrun import run_hook
from vgpuadm.cli.host import reported_as_plan


def _report(console: Console, root: str | None, result: Any, as_json: bool, done: str) -> None:
    if reported_as_plan(console, result, as_json):
        return
    path, real = api.HostRoot(root).real(result.path), api.HostRoot(root).real  # the files themselves, under a --root
    if result.plan.empty:
        console.line(f"nothing to do: {path} is {'installed and current' if result.installed else 'not installed'}")
        return
    console.line(f"{done} {path}")
    if result.why:
        console.line(f"why there: {result.why}")
    if result.command:
        console.line(f"it runs: {' '.join(result.command)} hook run DOMAIN OPERATION SUB-OPERATION -")
    if result.chained and done == "wrote":
        console.line(f"and then the script that was there before, kept as {real(result.chained)}")
    elif result.chained:
        console.line(f"and put back the script it chained ({real(result.chained)}) as {path}")
    console.line(f"next: {api.hook.NEXT_STEP}")


def register(app: Any) -> None:
    """Add the `hook` group to the top-level typer app."""
    import typer

    hook_app = typer.Typer(help="libvirt's qemu hook: on-demand vGPUs made at start, freed at stop.",
                           no_args_is_help=True)  # fmt: skip

    @hook_app.command(
        "run",
        epilog="libvirt runs it (through the installed hook) as: vgpuadm hook run web01 prepare begin - < domain.xml",
    )
    def run_cmd(
        ctx: typer.Context,
        domain: str = typer.Argument(..., help="The domain libvirt starts or stops."),
        operation: str = typer.Argument(..., help="libvirt's operation (prepare, release, …)."),
        sub_operation: str = typer.Argument(..., help="libvirt's sub-operation (begin, end, …)."),
        extra: str = typer.Argument("-", help="libvirt's extra argument (ignored)."),
    ) -> None:
        """Make (prepare/begin) or free (release/end) a domain's on-demand devices; its XML is read from stdin."""
        code = run_hook(ctx.obj["console"], ctx.obj["root"], [domain, operation, sub_operation], sys.stdin.buffer)
        if code:
            raise typer.Exit(code)

    dry_opt, json_opt = plan_options()

    @hook_app.command("install", epilog="Example: vgpuadm hook install && systemctl reload libvirtd")
    def install_cmd(
        ctx: typer.Context,
        single_script: bool | None = typer.Option(
            None,
            "--single-script/--qemu-d",
            help="Write hooks/qemu (chaining one that is there), or hooks/qemu.d/vgpuadm. Default: qemu.d/ when the "
            "installed libvirt runs it (6.5.0 and later).",
            show_default=False,
        ),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Install libvirt's qemu hook that makes on-demand devices at start and frees them at stop (idempotent)."""
        result = api.hook_install(ctx.obj["root"], single_script=single_script, dry_run=dry_run)
        _report(ctx.obj["console"], ctx.obj["root"], result, as_json, "wrote")

    @hook_app.command("uninstall", epilog="Example: vgpuadm hook uninstall")
    def uninstall_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Remove vgpuadm's qemu hook (a script it chained goes back to hooks/qemu); idempotent."""
        result = api.hook_uninstall(ctx.obj["root"], dry_run=dry_run)
        _report(ctx.obj["console"], ctx.obj["root"], result, as_json, "removed")

    @hook_app.command("status", epilog="Example: vgpuadm hook status --json")
    def status_cmd(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        """Whether the hook is installed and says what `vgpuadm hook install` would write."""
        console: Console = ctx.obj["console"]
        result = api.hook_status(ctx.obj["root"])
        real = api.HostRoot(ctx.obj["root"]).real
        if as_json:
            console.json(result.to_json())
        elif not result.installed:
            console.line(f"{real(result.path)}: not installed (vgpuadm hook install writes it)")
        elif result.current:
            console.line(f"{real(result.path)}: installed, runs {' '.join(result.command)} hook run"
                         + (f"; chains {real(result.chained)}" if result.chained else ""))  # fmt: skip
        else:
            console.line(
                f"{real(result.path)}: installed but differs from what this vgpuadm writes (vgpuadm hook install)"
            )

    app.add_typer(hook_app, name="hook")
