"""`vgpuadm vms`: this host's libvirt domains, running or not, with the vgpuadm devices each one's metadata records
(the VM list of the Cockpit page's Allocate form, and a quick "who has what" for operators)."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console


def vms(console: Console, root: str | None, connect: str | None, as_json: bool) -> None:
    rows = api.vms(root, connect=connect)
    if as_json:
        console.json(rows)
        return
    table = []
    for r in rows:
        for i, d in enumerate(r["devices"] or [None]):
            first = (r["name"], r["state"]) if i == 0 else ("", "")
            table.append((*first, *((d["type_id"] or d["mode"], d["uuid"] or d["address"], d["parent"]) if d else
                                    ("-", "-", "-"))))  # fmt: skip
    console.table(
        "VMs",
        ["name", "state", "type", "device", "parent"],
        table,
        keep=("name", "device", "parent"),
        optional=("parent",),
        empty='no libvirt domains here (define one: see README "Give a VM a GPU")',
    )


def register(app: Any) -> None:
    """Add `vms` to the top-level typer app."""
    import typer

    @app.command("vms", epilog="Example: vgpuadm vms --json")
    def vms_cmd(
        ctx: typer.Context,
        as_json: bool = typer.Option(
            False, "--json", help="Print JSON (validated by vgpuadm/schemas/vms.schema.json)."
        ),
    ) -> None:
        """List this host's libvirt domains with their state and the vgpuadm devices each owns."""
        vms(ctx.obj["console"], ctx.obj["root"], ctx.obj.get("connect"), as_json)
