"""`vgpuadm udev install|uninstall|status`: the udev rule that re-converges a GPU after a reset or a driver reload
(vgpuadm/ops/udev.py). `udev run`, what the rule executes, is cli/udevrun.py (hidden here)."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, plan_options
from vgpuadm.cli.host import reported_as_plan
from vgpuadm.cli.udevrun import run_udev
from vgpuadm.errors import UsageError


def _report(console: Console, root: str | None, result: Any, as_json: bool, done: str) -> None:
    if reported_as_plan(console, result, as_json):
        return
    path = api.HostRoot(root).real(result.path)  # the file itself, under a --root
    if result.plan.empty:
        state = "installed and current" if result.installed else "not installed"
        if not result.ours:
            state = "not vgpuadm's: left alone"
        console.line(f"nothing to do: {path} is {state}")
        return
    console.line(f"{done} {path}")
    if result.command:
        console.line(f"it runs: {' '.join(result.command)} udev run --parent NAME | --gpu ADDR")
    if result.reload:
        console.line(result.reload)


def register(app: Any) -> None:
    """Add the `udev` group to the top-level typer app."""
    import typer

    dry_opt, json_opt = plan_options()
    udev_app = typer.Typer(help="The udev rule that restores a GPU's devices after a GPU reset or a driver reload.",
                           no_args_is_help=True)  # fmt: skip

    @udev_app.command("install", epilog="Example: vgpuadm udev install   (then: vgpuadm udev status)")
    def install_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Write /etc/udev/rules.d/61-vgpuadm.rules, which restores a GPU's or mdev parent's recorded devices when
        it appears again (a GPU reset, a driver reload), and reload udev's rules (idempotent)."""
        _report(ctx.obj["console"], ctx.obj["root"], api.udev_install(ctx.obj["root"], dry_run=dry_run), as_json,
                "wrote")  # fmt: skip

    @udev_app.command("uninstall", epilog="Example: vgpuadm udev uninstall")
    def uninstall_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Remove /etc/udev/rules.d/61-vgpuadm.rules (a file of that name vgpuadm did not write stays); idempotent."""
        _report(ctx.obj["console"], ctx.obj["root"], api.udev_uninstall(ctx.obj["root"], dry_run=dry_run), as_json,
                "removed")  # fmt: skip

    @udev_app.command("status", epilog="Example: vgpuadm udev status --json")
    def status_cmd(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        """Whether the rule is installed and says what `vgpuadm udev install` would write."""
        console: Console = ctx.obj["console"]
        result = api.udev_status(ctx.obj["root"])
        path = api.HostRoot(ctx.obj["root"]).real(result.path)
        if as_json:
            console.json(result.to_json())
        elif not result.installed:
            console.line(f"{path}: not installed (vgpuadm udev install writes it)")
        elif not result.ours:
            console.line(f"{path}: not vgpuadm's (vgpuadm udev install refuses to overwrite it)")
        elif result.current:
            console.line(f"{path}: installed, runs {' '.join(result.command)} udev run")
        else:
            console.line(f"{path}: installed but differs from what this vgpuadm writes (vgpuadm udev install)")

    @udev_app.command("run", hidden=True)
    def run_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(None, "--gpu", metavar="ADDR", help="The PCI function the event names."),
        parent: str = typer.Option(None, "--parent", metavar="NAME", help="The mdev parent the event names."),
        worker: bool = typer.Option(False, "--worker", help="Do the run (after the settle delay), in the background."),
    ) -> None:
        """What the udev rule runs: hands off one restore of that device (the system log tells)."""
        if (gpu is None) == (parent is None):
            raise UsageError("udev run takes one of --gpu ADDR and --parent NAME", "the udev rule passes one")
        kind, name = ("gpu", gpu) if gpu is not None else ("parent", parent)
        code = run_udev(ctx.obj["root"], kind, name, worker, ctx.obj["lock"][1][1:], ctx.obj["console"].err)
        if code:
            raise typer.Exit(code)

    app.add_typer(udev_app, name="udev")
