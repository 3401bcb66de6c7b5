"""`vgpuadm mig status|profiles|instances|enable|disable|create|destroy`: the host's MIG state as nvidia-smi reports
it, as a table or JSON (schemas mig-status, mig-profiles, mig-instances), and MIG changes planned by the mig mode
(modes/mig.py) and run by the executor; every changing verb takes --dry-run and --json."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, as_bdf, plan_options
from vgpuadm.cli.host import run_plan
from vgpuadm.errors import UsageError
from vgpuadm.model import is_pci_address, pci_address
from vgpuadm.report.mig import profile_rows, status_rows


def status(console: Console, root: str | None, as_json: bool) -> None:
    rows = status_rows(api.mig.read(root))
    if as_json:
        console.json(rows)
        return
    console.table("MIG", ["GPU", "address", "product", "MIG", "pending", "instances"],
                  [(r["gpu_index"], r["address"], r["product"], r["mig_current"], r["mig_pending"], r["instances"])
                   for r in rows])  # fmt: skip


def profiles(console: Console, root: str | None, gpu: str | None, as_json: bool) -> None:
    rows = profile_rows(api.mig.read(root), _gpu(gpu) if gpu else None)
    if as_json:
        console.json(rows)
        return
    console.table("MIG GPU-instance profiles", ["GPU", "profile", "id", "free/total", "GiB", "placements"],
                  [(r["gpu_index"], r["name"], r["profile_id"], f"{r['free']}/{r['total']}", r["memory_gib"],
                    " ".join(f"{p['start']}:{p['size']}" for p in r["placements"])) for r in rows])  # fmt: skip


def instances(console: Console, root: str | None, as_json: bool, connect: str | None = None) -> None:
    rows = api.mig.instances(root, connect)
    if as_json:
        console.json(rows)
        return
    console.table("MIG GPU instances", ["GPU", "profile", "instance", "placement", "state", "vGPUs", "VM",
                                        "made for"],
                  [(r["gpu_index"], r["name"], r["instance_id"], f"{r['start']}:{r['size']}", r["state"],
                    " ".join(r["vgpus"]) or "-", r["owner"] or "-", r["made_for"] or "-") for r in rows])  # fmt: skip


def register(app: Any) -> None:
    """Add the `mig` group to the top-level typer app."""
    import typer

    group = typer.Typer(help="MIG: GPU-instance profiles, placements and instances (read through nvidia-smi).",
                        no_args_is_help=True)  # fmt: skip
    json_opt = typer.Option(False, "--json", help="Print JSON (schemas in vgpuadm/schemas).")

    @group.command("status", epilog="Example: vgpuadm mig status --json")
    def status_cmd(ctx: typer.Context, as_json: bool = json_opt) -> None:
        """MIG mode (current and pending) of every GPU."""
        status(ctx.obj["console"], ctx.obj["root"], as_json)

    @group.command("profiles", epilog="Example: vgpuadm mig profiles --gpu 0000:18:00.0")
    def profiles_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(None, "--gpu", help="Only this GPU.", metavar="BDF", callback=as_bdf),
        as_json: bool = json_opt,
    ) -> None:
        """GPU-instance profiles with free/total counts and placements."""
        profiles(ctx.obj["console"], ctx.obj["root"], gpu, as_json)

    @group.command("instances", epilog="Example: vgpuadm mig instances --json")
    def instances_cmd(ctx: typer.Context, as_json: bool = json_opt) -> None:
        """GPU instances, their placements and the vGPUs on them."""
        instances(ctx.obj["console"], ctx.obj["root"], as_json, ctx.obj.get("connect"))

    dry_opt, plan_json = plan_options()
    gpu_opt = typer.Option(..., "--gpu", help="The GPU (PF address).", metavar="BDF", callback=as_bdf)

    @group.command("enable", epilog="Example: vgpuadm mig enable --gpu 0000:18:00.0")
    def enable_cmd(ctx: typer.Context, gpu: str = gpu_opt, dry_run: bool = dry_opt, as_json: bool = plan_json) -> None:
        """Turn MIG mode on (refused while a vGPU runs on the GPU)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], api.mig.plan_enable(_gpu(gpu), True), dry_run, as_json)

    @group.command("disable", epilog="Example: vgpuadm mig disable --gpu 0000:18:00.0")
    def disable_cmd(ctx: typer.Context, gpu: str = gpu_opt, dry_run: bool = dry_opt, as_json: bool = plan_json) -> None:
        """Turn MIG mode off (refused while GPU instances or vGPUs exist)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], api.mig.plan_enable(_gpu(gpu), False), dry_run, as_json)

    @group.command("create", epilog="Example: vgpuadm mig create --gpu 0000:18:00.0 --profile 1g.18gb --count 2")
    def create_cmd(
        ctx: typer.Context,
        gpu: str = gpu_opt,
        profile: str = typer.Option(..., "--profile", help="GPU-instance profile name or id (1g.18gb, 19).",
                                    metavar="P"),
        count: int = typer.Option(1, "--count", help="How many instances.", metavar="N", min=1, max=8),
        placement: int = typer.Option(None, "--placement", help="Start slot (default: the one that keeps larger "
                                      "profiles possible).", metavar="START", min=0, max=7),
        dry_run: bool = dry_opt,
        as_json: bool = plan_json,
    ) -> None:  # fmt: skip
        """Create GPU instances at placements that keep larger profiles possible."""
        run_plan(ctx.obj["console"], ctx.obj["root"], api.mig.plan_create(_gpu(gpu), profile, count, placement),
                 dry_run, as_json)  # fmt: skip

    @group.command("destroy", epilog="Example: vgpuadm mig destroy --gpu 0000:18:00.0 --instance 1")
    def destroy_cmd(
        ctx: typer.Context,
        gpu: str = gpu_opt,
        instance: list[int] = typer.Option(None, "--instance", help="GPU instance id (repeatable).", metavar="ID",
                                           min=0, max=63),
        all_: bool = typer.Option(False, "--all", help="Every GPU instance of the GPU."),
        dry_run: bool = dry_opt,
        as_json: bool = plan_json,
    ) -> None:  # fmt: skip
        """Destroy GPU instances (refused while a vGPU uses one)."""
        if bool(instance) == all_:
            raise UsageError("give --instance ID or --all", "`vgpuadm mig instances` lists the instance ids")
        run_plan(ctx.obj["console"], ctx.obj["root"], api.mig.plan_destroy(_gpu(gpu), None if all_ else instance),
                 dry_run, as_json)  # fmt: skip

    app.add_typer(group, name="mig")


def _gpu(text: str) -> str:
    if not is_pci_address(text):
        raise UsageError(f'"{text}" is not a PCI address', "give the GPU as in `vgpuadm mig status`, e.g. 0000:18:00.0")
    return pci_address(text)
