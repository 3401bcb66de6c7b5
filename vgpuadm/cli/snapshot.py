"""`vgpuadm snapshot OUT.tar.gz`: what discovery reads on this host, redacted, for a bug report or a simulated
copy (`vgpuadm sim import`). The capture lives in vgpuadm/ops/snapshot.py."""

from typing import Any

from vgpuadm import api


def register(app: Any) -> None:
    """Add `snapshot` to the top-level typer app."""
    import typer

    @app.command("snapshot", epilog="Example: vgpuadm snapshot host.tar.gz && vgpuadm sim import host.tar.gz /tmp/h")
    def snapshot_cmd(
        ctx: typer.Context,
        out: str = typer.Argument(..., metavar="OUT.tar.gz", help="The archive to write (0600)."),
        as_json: bool = typer.Option(False, "--json", help="Print {path, members, simulated, nvidia_smi, …}."),
    ) -> None:
        """Capture exactly what discovery reads (and nvidia-smi's outputs), serials and GPU UUIDs redacted."""
        result = api.snapshot(ctx.obj["root"], out)
        console = ctx.obj["console"]
        if as_json:
            console.json(result.to_json())
            return
        smi = f", nvidia-smi {' / '.join(result.nvidia_smi)}" if result.nvidia_smi else ""
        console.line(f"wrote {result.path}: {result.members} paths{smi}, {result.redacted_uuids} GPU UUID(s) redacted")
        console.line(f"next: vgpuadm sim import {result.path} DIR   (a host root to read, or attach to a bug report)")
