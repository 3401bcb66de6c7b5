"""`vgpuadm mig status|profiles|instances`: the host's MIG state as nvidia-smi reports it (host/mig.py), as a table
or JSON (schemas mig-status, mig-profiles, mig-instances). Read-only."""

from typing import Any

from vgpuadm.cli.console import Console
from vgpuadm.errors import UsageError
from vgpuadm.host import mig
from vgpuadm.host.root import HostRoot
from vgpuadm.model import is_pci_address, pci_address
from vgpuadm.report.mig import instance_rows, profile_rows, status_rows


def status(console: Console, root: str | None, as_json: bool) -> None:
    rows = status_rows(mig.read(HostRoot(root)))
    if as_json:
        console.json(rows)
        return
    console.table("MIG", ["GPU", "address", "product", "MIG", "pending", "instances"],
                  [(r["gpu_index"], r["address"], r["product"], r["mig_current"], r["mig_pending"], r["instances"])
                   for r in rows])  # fmt: skip


def profiles(console: Console, root: str | None, gpu: str | None, as_json: bool) -> None:
    if gpu is not None and not is_pci_address(gpu):
        raise UsageError(f'"{gpu}" is not a PCI address', "give the GPU as in `vgpuadm mig status`, e.g. 0000:18:00.0")
    rows = profile_rows(mig.read(HostRoot(root)), pci_address(gpu) if gpu else None)
    if as_json:
        console.json(rows)
        return
    console.table("MIG GPU-instance profiles", ["GPU", "profile", "id", "free/total", "GiB", "placements"],
                  [(r["gpu_index"], r["name"], r["profile_id"], f"{r['free']}/{r['total']}", r["memory_gib"],
                    " ".join(f"{p['start']}:{p['size']}" for p in r["placements"])) for r in rows])  # fmt: skip


def instances(console: Console, root: str | None, as_json: bool) -> None:
    rows = instance_rows(mig.read(HostRoot(root)))
    if as_json:
        console.json(rows)
        return
    console.table("MIG GPU instances", ["GPU", "profile", "instance", "placement", "vGPUs"],
                  [(r["gpu_index"], r["name"], r["instance_id"], f"{r['start']}:{r['size']}",
                    " ".join(r["vgpus"]) or "free") for r in rows])  # fmt: skip


def register(app: Any) -> None:
    """Add the `mig` group to the top-level typer app."""
    import typer

    group = typer.Typer(help="MIG: GPU-instance profiles, placements and instances (read through nvidia-smi).",
                        no_args_is_help=True)  # fmt: skip
    json_opt = typer.Option(False, "--json", help="Print JSON (schemas in vgpuadm/schemas).")

    @group.command("status")
    def status_cmd(ctx: typer.Context, as_json: bool = json_opt) -> None:
        """MIG mode (current and pending) of every GPU."""
        status(ctx.obj["console"], ctx.obj["root"], as_json)

    @group.command("profiles")
    def profiles_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(None, "--gpu", help="Only this GPU.", metavar="BDF"),
        as_json: bool = json_opt,
    ) -> None:
        """GPU-instance profiles with free/total counts and placements."""
        profiles(ctx.obj["console"], ctx.obj["root"], gpu, as_json)

    @group.command("instances")
    def instances_cmd(ctx: typer.Context, as_json: bool = json_opt) -> None:
        """GPU instances, their placements and the vGPUs on them."""
        instances(ctx.obj["console"], ctx.obj["root"], as_json)

    app.add_typer(group, name="mig")
