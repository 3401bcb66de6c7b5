"""`vgpuadm doctor`: one line per check (`pass`, `warn` or `fail`) with the fix under it; exit 1 when a check fails.
The checks live in vgpuadm/report/doctor.py, the reading in vgpuadm/ops/doctor.py."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console

EXIT_FAILED = 1  # some check failed; warnings alone exit 0


def doctor(console: Console, root: str | None, connect: str | None, as_json: bool) -> int:
    facts, checks = api.doctor(root, connect)
    for w in facts.snap.warnings:
        console.warn(w)
    doc = api.doctor_json(facts.snap.root, checks)
    if as_json:
        console.json(doc)
    else:
        width = max(len(c.check) for c in checks)
        for c in checks:
            console.line(f"{c.status:<4}  {c.check:<{width}}  {c.detail}")
            if c.hint:
                console.line(f"{'':<4}  {'':<{width}}  fix: {c.hint}")
        s = doc["summary"]
        console.line(f"{s['pass']} passed, {s['warn']} warning(s), {s['fail']} failed")
    return 0 if doc["ok"] else EXIT_FAILED


def register(app: Any) -> None:
    """Add `doctor` to the top-level typer app."""
    import typer

    @app.command(
        "doctor",
        epilog="Exit status: 0 when no check fails (warnings allowed), 1 when one fails. "
        "Example: vgpuadm doctor --json",
    )
    def doctor_cmd(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print JSON (vgpuadm/schemas/doctor.schema.json)."),
    ) -> None:
        """Check that this host can give GPUs to VMs: IOMMU, VFIO, drivers, tools, libvirt, groups, leaks."""
        code = doctor(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), as_json)
        if code:
            raise typer.Exit(code)
