"""`vgpuadm hook run|install|uninstall|status`: libvirt's qemu hook for on-demand devices (vgpuadm/ops/hook.py).
`hook run` is what libvirt executes: a failure is ONE line on stderr and a non-zero exit, which libvirt shows in
the error of the refused start."""

import sys
from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console
from vgpuadm.errors import VgpuadmError


def run_hook(console: Console, root: str | None, args: list[str], stdin: Any) -> int:
    domain, operation, sub_operation = args[0], args[1], args[2]
    try:
        data = stdin.read(api.hook.MAX_DOMAIN_XML + 1) if api.hook.phase_of(operation, sub_operation) else b""
        result = api.hook_run(root, domain, operation, sub_operation, data)
    except VgpuadmError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        console.err.write(f"vgpuadm: domain {domain}: {exc.message}{hint}\n".replace("\n", " ").rstrip() + "\n")
        return exc.exit_code
    for line in result.applied:
        console.err.write(f"vgpuadm: domain {domain}: {line}\n")
    return 0


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

    app.add_typer(hook_app, name="hook")
