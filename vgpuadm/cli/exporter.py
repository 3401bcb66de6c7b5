"""`vgpuadm exporter [install|uninstall]`: per-VM GPU usage for Prometheus (vgpuadm/ops/exporter.py) — served on
/metrics, written for node_exporter's textfile collector, or printed once — and the systemd unit that runs it."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, plan_options
from vgpuadm.cli.host import reported_as_plan


def _report(console: Console, root: str | None, result: Any, as_json: bool, done: str) -> None:
    if reported_as_plan(console, result, as_json):
        return
    path = api.HostRoot(root).real(result.path)  # the file itself, under a --root
    if result.plan.empty:
        console.line(f"nothing to do: {path} is {'installed and current' if done == 'wrote' else 'not installed'}")
    else:
        console.line(f"{done} {path}")
    if result.command:
        console.line(f"the unit runs: {api.exec_start(result.command, result.unit)}")
        console.line(f"next: {api.unit.next_step(result.unit)}")
    else:
        console.line(
            f"next: systemctl daemon-reload   (after systemctl disable --now {result.unit}, if it was enabled)"
        )


def register(app: Any) -> None:
    """Add the `exporter` group to the top-level typer app."""
    import typer

    exporter_app = typer.Typer(help="Per-VM GPU usage for Prometheus: the driver's vGPU, MIG and GPU figures joined "
                               "to the domains that own the devices.", invoke_without_command=True)  # fmt: skip

    @exporter_app.callback(
        epilog="Examples: vgpuadm exporter --listen 127.0.0.1:9847 · vgpuadm exporter --textfile "
        "/var/lib/prometheus/node-exporter/vgpuadm-usage.prom --interval 15 · vgpuadm exporter --once"
    )
    def exporter_cmd(
        ctx: typer.Context,
        listen: str = typer.Option(api.EXPORTER_LISTEN, "--listen", metavar="ADDR:PORT",
                                   help="Serve /metrics here (an IP address and port)."),
        textfile: str = typer.Option(None, "--textfile", metavar="PATH",
                                     help="Write the metrics to PATH (atomically) instead of serving them."),
        interval: float = typer.Option(None, "--interval", metavar="SECONDS",
                                       help="With --textfile: write again every SECONDS (default: once)."),
        once: bool = typer.Option(False, "--once", help="Print the metrics once and exit (exit 1: driver not read)."),
        timeout: float = typer.Option(api.EXPORTER_TIMEOUT, "--timeout", metavar="SECONDS",
                                      help="How long one sample may wait for the GPU driver."),
    ) -> None:  # fmt: skip
        """Serve per-VM GPU usage on /metrics (or write it with --textfile, print it with --once)."""
        if ctx.invoked_subcommand is not None:
            return
        from vgpuadm.errors import UsageError

        if interval is not None and (textfile is None or not 1 <= interval <= 86400):
            raise UsageError(f"--interval {interval}", "--interval goes with --textfile: 1 to 86400 seconds")
        if once and textfile is not None:
            raise UsageError("--once and --textfile disagree", "give one: --once prints the metrics, --textfile "
                             "PATH writes them")  # fmt: skip
        console = ctx.obj["console"]
        exporter = api.Exporter(ctx.obj["root"], ctx.obj.get("connect"), timeout)
        if once:
            text = exporter.exposition()
            console.line(text.rstrip("\n"))
            if exporter.error:
                console.warn(f"driver not read: {exporter.error}")
                raise typer.Exit(1)
            return
        if textfile is not None:
            up = api.exporter_write(exporter, textfile, interval)
            console.line(f"wrote {textfile}" + ("" if up else f" (driver not read: {exporter.error})"))
            return

        def ready(host: str, port: int) -> None:
            console.line(f"serving http://{'[' + host + ']' if ':' in host else host}:{port}/metrics")
            console.out.flush()

        api.exporter_serve(exporter, listen, ready)

    dry_opt, json_opt = plan_options()

    @exporter_app.command(
        "install", epilog="Example: vgpuadm exporter install --listen 127.0.0.1:9847   (then: systemctl daemon-reload "
        "&& systemctl enable --now vgpuadm-exporter.service)",
    )  # fmt: skip
    def install_cmd(
        ctx: typer.Context,
        listen: str = typer.Option(api.EXPORTER_LISTEN, "--listen", metavar="ADDR:PORT",
                                   help="The address the unit's exporter serves /metrics on."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """Write /etc/systemd/system/vgpuadm-exporter.service, ExecStart naming this vgpuadm (idempotent)."""
        result = api.exporter_install(ctx.obj["root"], listen=listen, dry_run=dry_run)
        _report(ctx.obj["console"], ctx.obj["root"], result, as_json, "wrote")

    @exporter_app.command(
        "uninstall", epilog="Example: systemctl disable --now vgpuadm-exporter.service && vgpuadm exporter uninstall"
    )
    def uninstall_cmd(ctx: typer.Context, dry_run: bool = dry_opt, as_json: bool = json_opt) -> None:
        """Remove /etc/systemd/system/vgpuadm-exporter.service (idempotent)."""
        result = api.exporter_uninstall(ctx.obj["root"], dry_run=dry_run)
        _report(ctx.obj["console"], ctx.obj["root"], result, as_json, "removed")

    app.add_typer(exporter_app, name="exporter")
