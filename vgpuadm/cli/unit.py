"""`vgpuadm unit install|uninstall|status`: the systemd unit that runs `vgpuadm restore` at boot, written with
ExecStart naming this vgpuadm (see vgpuadm/ops/unit.py). systemctl itself is left to the user: the next step is
printed."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, plan_options
from vgpuadm.cli.host import reported_as_plan


def _report(console: Console, root: str | None, result: Any, as_json: bool, done: str) -> None:
    if reported_as_plan(console, result, as_json):
        return
    path = api.HostRoot(root).real(result.path)  # the file itself, under a --root
    if result.plan.empty:
        state = "installed and current" if done == "wrote" else "not installed"
        console.line(f"nothing to do: {path} is {state}")
    else:
        console.line(f"{done} {path}")
    if result.command:
        console.line(f"the unit runs: {api.exec_start(result.command)}")
    if done == "wrote":
        console.line(f"next: {api.unit.NEXT_STEP}")
    else:
        console.line(f"next: systemctl daemon-reload   (after systemctl disable {result.unit}, if it was enabled)")


def status(console: Console, root: str | None, as_json: bool) -> None:
    result = api.unit_status(root)
    if as_json:
        console.json(result.to_json())
        return
    path = api.HostRoot(root).real(result.path)
    if not result.installed:
        console.line(f"{path}: not installed (vgpuadm unit install writes it)")
    elif result.current:
        console.line(f"{path}: installed, {api.exec_start(result.command)}")
    else:
        console.line(f"{path}: installed but differs from what this vgpuadm writes (vgpuadm unit install)")


def register(app: Any) -> None:
    """Add the `unit` group to the top-level typer app."""
    import typer

    dry_opt, json_opt = plan_options()
    unit_app = typer.Typer(help="The systemd unit that runs `vgpuadm restore` at boot.", no_args_is_help=True)

    @unit_app.command(
        "install",
        epilog="Example: vgpuadm unit install   (then: systemctl daemon-reload && systemctl enable "
        "vgpuadm-restore.service)",
    )
    def install_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Write /etc/systemd/system/vgpuadm-restore.service, ExecStart naming this vgpuadm (idempotent)."""
        _report(ctx.obj["console"], ctx.obj["root"], api.unit_install(ctx.obj["root"], dry_run=dry_run), as_json,
                "wrote")  # fmt: skip

    @unit_app.command(
        "uninstall", epilog="Example: systemctl disable vgpuadm-restore.service && vgpuadm unit uninstall"
    )
    def uninstall_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Remove /etc/systemd/system/vgpuadm-restore.service (idempotent)."""
        _report(ctx.obj["console"], ctx.obj["root"], api.unit_uninstall(ctx.obj["root"], dry_run=dry_run), as_json,
                "removed")  # fmt: skip

    @unit_app.command("status", epilog="Example: vgpuadm unit status --json")
    def status_cmd(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Whether the unit file is installed and says what `vgpuadm unit install` would write."""
        status(ctx.obj["console"], ctx.obj["root"], as_json)

    app.add_typer(unit_app, name="unit")
