"""Host-side verbs: `vgpuadm mdev|vf|sriov|vfio …` and `vgpuadm recover`. Each discovers, plans and applies under
the host lock (so concurrent runs never plan against a stale view); --dry-run prints the plan and changes nothing
(no lock, no journal); --json prints {changed, dry_run, summary, steps, devices}."""

from collections.abc import Callable, Sequence
from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, as_bdf, as_uuid, plan_options
from vgpuadm.model import HostSnapshot

Planner = Callable[[HostSnapshot], tuple[api.Plan, list[str]]]
Frees = Callable[[HostSnapshot], Sequence[str]]


def run_plan(
    console: Console, root: str | None, planner: Planner, dry_run: bool, as_json: bool, *,
    frees: Frees | None = None, force: bool = False, connect: str | None = None,
) -> None:  # fmt: skip
    """Discover → plan → apply (or print the plan), then report. `frees`: the devices the verb takes away, refused
    while a domain owns one (with `force`: also taken from the domain's record, in the same plan)."""
    plan, ids, result = api.run_host_verb(root, planner, dry_run=dry_run, frees=frees, force=force, connect=connect)
    if as_json:
        console.json(
            {"changed": result.changed, "dry_run": dry_run, "summary": plan.summary, "steps": plan.describe(),
             "devices": ids}
        )  # fmt: skip
        return
    if plan.empty:
        console.line(f"nothing to do ({plan.summary})")
        return
    prefix = "would run" if dry_run else "done"
    for line in plan.describe():
        console.line(f"{prefix}: {line}")
    if dry_run:
        console.line("dry run: nothing was changed")
    for dev in ids:
        console.line(dev)


def _force_option() -> Any:
    import typer

    return typer.Option(False, "--force", help="Also when a VM owns it: detach it and drop it from the VM's record.")


def _params(values: list[str] | None) -> str:
    return ", ".join(values or [])  # the mode checks them and writes `k=v, k=v` (modes/base.py check_params)


def register(app: Any) -> None:
    """Add the host verbs to the top-level typer app."""
    app.add_typer(_mdev_app(), name="mdev")
    app.add_typer(_vf_app(), name="vf")
    app.add_typer(_sriov_app(), name="sriov")
    app.add_typer(_vfio_app(), name="vfio")
    _recover_cmd(app)


def reported_as_plan(console: Console, result: Any, as_json: bool) -> bool:
    """The part every install/uninstall report shares: the result as JSON, or a dry run's steps. False when the
    caller still has to tell what was done."""
    if as_json:
        console.json(result.to_json())
        return True
    if result.dry_run and not result.plan.empty:
        console.line(f"would {result.plan.summary}:")
        for line in result.plan.describe():
            console.line(f"  {line}")
        return True
    return False


def _mdev_app() -> Any:
    import typer

    dry_opt, json_opt = plan_options()
    app = typer.Typer(help="Create and remove mediated vGPUs (layouts A and B).", no_args_is_help=True)

    @app.command(
        "create",
        epilog="Example: vgpuadm mdev create --type P4-1Q --count 2 --policy spread --param frame_rate_limiter=0",
    )
    def create_cmd(
        ctx: typer.Context,
        type_name: str = typer.Option(..., "--type", help="Type id, name or profile (nvidia-63, P4-1Q).", metavar="T"),
        gpu: str = typer.Option(None, "--gpu", help="Only this GPU (a PF includes its VFs).", metavar="BDF", callback=as_bdf),
        count: int = typer.Option(1, "--count", help="How many new devices to make (those that exist do not "
                                  "count; `vgpuadm create --total` sets a VM's total).", metavar="N"),
        policy: str = typer.Option("pack", "--policy", help="pack (fill the busiest GPU) or spread.", metavar="P"),
        numa: int = typer.Option(None, "--numa", help="Only GPUs on this NUMA node.", metavar="N"),
        uuid: list[str] = typer.Option(None, "--uuid", help="The mdev UUID (repeat per device).", metavar="U"),
        param: list[str] = typer.Option(None, "--param", help="NVIDIA vgpu_params key=value (repeatable).",
                                        metavar="K=V"),
        explain: bool = typer.Option(False, "--explain", help="Also print why each GPU was chosen or rejected."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """Create COUNT mdevs of a type, placed by policy."""
        console: Console = ctx.obj["console"]
        root = ctx.obj["root"]
        api.check_count(count)  # before the host is read

        def planner(snap: HostSnapshot) -> tuple[api.Plan, list[str]]:
            if explain and not as_json:
                console.line(api.explain_placement(snap, type_name, count, gpu=gpu, policy=policy, numa=numa))
            return api.plan_create(
                snap, type_name, count, gpu=gpu, policy=policy, numa=numa, params=_params(param), uuids=uuid or ()
            )

        run_plan(console, root, planner, dry_run, as_json, connect=ctx.obj.get("connect"))

    @app.command("remove", epilog="Example: vgpuadm mdev remove 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001")
    def remove_cmd(
        ctx: typer.Context,
        uuid: str = typer.Argument(..., help="The mdev UUID.", callback=as_uuid),
        force: bool = _force_option(),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Remove an mdev (refused while a VM owns it, unless --force)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], lambda s: (api.plan_remove(s, uuid), []), dry_run, as_json,
                 frees=lambda s: [uuid], force=force, connect=ctx.obj.get("connect"))  # fmt: skip

    return app


def _vf_app() -> Any:
    import typer

    dry_opt, json_opt = plan_options()
    app = typer.Typer(help="NVIDIA vendor-VFIO VFs (layout C): set or clear a VF's vGPU type.", no_args_is_help=True)

    @app.command("set-type", epilog="Example: vgpuadm vf set-type --type H200X-4C --vf 0000:18:00.4")
    def set_type_cmd(
        ctx: typer.Context,
        type_name: str = typer.Option(..., "--type", help="Type id, number or profile (1420, H200X-4C).", metavar="T"),
        vf: str = typer.Option(
            None, "--vf", help="This VF (default: one placement picks).", metavar="BDF", callback=as_bdf
        ),
        policy: str = typer.Option("pack", "--policy", help="pack or spread when --vf is omitted.", metavar="P"),
        param: list[str] = typer.Option(None, "--param", help="NVIDIA vgpu_params key=value.", metavar="K=V"),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Give a VF a vGPU type (writes nvidia/current_vgpu_type)."""

        def planner(snap: HostSnapshot) -> tuple[api.Plan, list[str]]:
            plan, address = api.plan_vf_type(snap, type_name, vf, params=_params(param), policy=policy)
            return plan, [address]

        run_plan(ctx.obj["console"], ctx.obj["root"], planner, dry_run, as_json, connect=ctx.obj.get("connect"))

    @app.command("clear", epilog="Example: vgpuadm vf clear 0000:18:00.4")
    def clear_cmd(
        ctx: typer.Context,
        vf: str = typer.Argument(..., help="The VF address.", callback=as_bdf),
        force: bool = _force_option(),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Destroy the vGPU on a VF (writes 0 to nvidia/current_vgpu_type; refused while a VM owns it)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], lambda s: (api.plan_vf_clear(s, vf), []), dry_run, as_json,
                 frees=lambda s: [vf], force=force, connect=ctx.obj.get("connect"))  # fmt: skip

    return app


def _sriov_app() -> Any:
    import typer

    dry_opt, json_opt = plan_options()
    app = typer.Typer(help="Enable or disable a PF's SR-IOV VFs.", no_args_is_help=True)

    @app.command(
        "enable",
        epilog="Example: vgpuadm sriov enable 0000:41:00.0   (an NVIDIA PF: all its VFs, through "
        "sriov-manage; --num N is for other PFs, through sriov_numvfs)",
    )
    def enable_cmd(
        ctx: typer.Context,
        pf: str = typer.Argument(..., help="The PF address.", callback=as_bdf),
        num: int = typer.Option(
            None,
            "--num",
            help="How many VFs (default all); not for NVIDIA PFs, whose sriov-manage enables all.",
            metavar="N",
        ),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Enable VFs (sriov_numvfs, or NVIDIA's sriov-manage -e for PFs bound to nvidia)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], lambda s: (api.plan_sriov(s, pf, True, num), []), dry_run,
                 as_json, connect=ctx.obj.get("connect"))  # fmt: skip

    @app.command("disable", epilog="Example: vgpuadm sriov disable 0000:41:00.0")
    def disable_cmd(
        ctx: typer.Context,
        pf: str = typer.Argument(..., help="The PF address.", callback=as_bdf),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Disable all VFs of a PF (refused while a VF hosts a vGPU)."""
        run_plan(
            ctx.obj["console"],
            ctx.obj["root"],
            lambda s: (api.plan_sriov(s, pf, False), []),
            dry_run,
            as_json,
            connect=ctx.obj.get("connect"),
        )

    return app


def _vfio_app() -> Any:
    import typer

    dry_opt, json_opt = plan_options()
    app = typer.Typer(help="Whole-GPU passthrough: bind a GPU's IOMMU group to vfio-pci and back.",
                      no_args_is_help=True)  # fmt: skip

    @app.command("bind", epilog="Example: vgpuadm vfio bind 0000:65:00.0")
    def bind_cmd(
        ctx: typer.Context,
        gpu: str = typer.Argument(..., help="The GPU address.", callback=as_bdf),
        force: bool = typer.Option(False, "--force", help="Also take a boot VGA GPU or host-used group members."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Bind the GPU and every endpoint of its IOMMU group (e.g. its HD audio) to vfio-pci."""
        run_plan(ctx.obj["console"], ctx.obj["root"], lambda s: (api.plan_vfio_bind(s, gpu, force), []), dry_run,
                 as_json)  # fmt: skip

    @app.command("unbind", epilog="Example: vgpuadm vfio unbind 0000:65:00.0")
    def unbind_cmd(
        ctx: typer.Context,
        gpu: str = typer.Argument(..., help="The GPU address.", callback=as_bdf),
        force: bool = _force_option(),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Give the GPU's group back to the drivers it had before `vfio bind` (refused while a VM owns it)."""
        run_plan(ctx.obj["console"], ctx.obj["root"], lambda s: (api.plan_vfio_restore(s, gpu), []), dry_run,
                 as_json, frees=lambda s: api.passthrough_functions(s, gpu), force=force,
                 connect=ctx.obj.get("connect"))  # fmt: skip

    return app


def _recover_cmd(app: Any) -> None:
    import typer

    dry_opt, json_opt = plan_options()

    @app.command("recover", epilog="Example: vgpuadm --root /tmp/h recover --dry-run")
    def recover_cmd(
        ctx: typer.Context,
        finish: bool = typer.Option(False, "--finish", help="Complete the interrupted plan instead of undoing it."),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
    ) -> None:
        """Roll back (or --finish) a change that a crashed vgpuadm left half done (its journal). Every "interrupted
        change" message names this command; `vgpuadm reconcile` runs it too, then looks for leaked devices."""
        console: Console = ctx.obj["console"]
        done = api.recover(ctx.obj["root"], finish=finish, connect=ctx.obj.get("connect"), dry_run=dry_run)
        if as_json:  # schemas/change.schema.json
            n = len(done)
            console.json({"changed": bool(done) and not dry_run, "dry_run": dry_run,
                          "summary": "recover an interrupted change" if done else "nothing to recover",
                          "steps": [f"step {i}/{n} {line}" for i, line in enumerate(done, 1)], "devices": []})  # fmt: skip
            return
        if not done:
            console.line("nothing to recover")
        for line in done:
            console.line(line)
