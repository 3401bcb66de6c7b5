"""Guest commands: `vgpuadm create`, `destroy`, `passthrough`, `release` and `demo` — devices made, attached to a
libvirt domain and recorded in its vgpuadm <metadata>, as one plan that rolls back on failure."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, as_bdf, as_device, plan_options


def _output_options() -> tuple[Any, Any]:
    """-q (say nothing on success) and -v/--show-xml (print the <hostdev> XML a change added) for the guest verbs."""
    import typer

    quiet = typer.Option(
        False, "-q", "--quiet", help="Print nothing when the change succeeds (errors still go to stderr)."
    )
    show_xml = typer.Option(False, "-v", "--show-xml", help="Also print the <hostdev> XML added to the domain.")
    return quiet, show_xml


def _report(
    console: Console, result: Any, as_json: bool, verb: str, *, quiet: bool = False, show_xml: bool = False
) -> None:
    if as_json:
        console.json(result.to_json())
        return
    for w in getattr(result, "warnings", ()):
        console.warn(w)
    if result.dry_run:
        console.line(f"would {result.plan.summary}:" if not result.plan.empty else result.message)
        for line in result.plan.describe():
            console.line(f"  {line}")
        return
    if quiet:
        return
    if result.plan.empty:
        console.line(f"nothing to do: {result.message}")
        return
    if verb == "attached" and result.removed:  # create --total below what the VM owns: the newest went back
        verb = "removed"
    devices = result.added if verb == "attached" else result.removed
    if not devices:  # `destroy --forget` of hostdevs the domain does not record: the steps say what went
        for line in result.plan.describe():
            console.line(f"done: {line}")
    for a in devices:
        what = a.uuid or a.address or a.extra.get("rendernode")  # the device id, whatever its mode
        kind = f"{a.type_id} " if a.type_id else ""
        where = f" on {a.parent}" if a.parent and a.parent != what else ""
        when = ", made when it starts" if a.on_demand and verb == "attached" else ""
        console.line(f"{verb} {a.mode} {kind}{what}{where} ({'to' if verb == 'attached' else 'from'} "
                     f"{result.domain}{when})")  # fmt: skip
    if show_xml and verb == "attached" and result.hostdevs:
        console.line("")
        console.line(f"hostdev XML added to {result.domain} ({result.uri}):")
        for hostdev in result.hostdevs:
            console.line(hostdev.rstrip())


def _report_adopt(console: Console, result: Any, as_json: bool, *, quiet: bool = False) -> None:
    if as_json:
        console.json(result.to_json())
        return
    if quiet and not result.dry_run:
        return
    if not result.added:
        console.line(f"nothing to adopt: no other device of domain {result.domain} is a vGPU or GPU function here"
                     if result.skipped else
                     f"nothing to adopt: vgpuadm already records every device domain {result.domain} has")  # fmt: skip
    for a in result.added:
        what = a.uuid or a.address
        kind = f"{a.type_id} " if a.type_id else ""
        where = f" on {a.parent}" if a.parent and a.parent != what else ""
        console.line(f"{'would record' if result.dry_run else 'recorded'} {a.mode} {kind}{what}{where} "
                     f"in domain {result.domain}'s metadata")  # fmt: skip
    for line in result.skipped:
        console.line(f"left as it is: {line}")


def register(app: Any) -> None:
    """Add the guest verbs to the top-level typer app."""
    import typer

    dry_opt, json_opt = plan_options()
    quiet_opt, xml_opt = _output_options()

    @app.command(
        "create",
        epilog="Example: vgpuadm create --type nvidia-63 --vm web01 --display on --param frame_rate_limiter=0",
    )
    def create_cmd(
        ctx: typer.Context,
        type_name: str = typer.Option(..., "--type", help="Type id, name or profile (nvidia-63, P4-1Q).", metavar="T"),
        vm: str = typer.Option(..., "--vm", help="The libvirt domain that gets the device(s).", metavar="NAME"),
        total: int = typer.Option(
            None,
            "--total",
            help="How many of this type the VM owns afterwards, in all (default 1; devices it has already count; "
            "fewer than it has takes the newest back). Its devices of other types stay.",
            metavar="N",
        ),
        count: int = typer.Option(None, "--count", hidden=True, metavar="N"),  # the old name of --total
        gpu: str = typer.Option(
            None, "--gpu", help="Only this GPU (a PF includes its VFs).", metavar="BDF", callback=as_bdf
        ),
        policy: str = typer.Option("pack", "--policy", help="pack (fill one GPU first) or spread.", metavar="P"),
        numa: int = typer.Option(None, "--numa", help="Only GPUs on this NUMA node.", metavar="N"),
        display: str = typer.Option("off", "--display", help="on|off: expose the vGPU's display.", metavar="on|off"),
        ramfb: bool = typer.Option(False, "--ramfb", help="Show firmware output on the display (needs --display on)."),
        param: list[str] = typer.Option(None, "--param", help="NVIDIA vgpu_params key=value.", metavar="K=V"),
        on_demand: bool = typer.Option(
            False, "--on-demand", help="Make the device(s) only while the VM runs (needs `vgpuadm hook install`)."
        ),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
        quiet: bool = quiet_opt,
        show_xml: bool = xml_opt,
    ) -> None:
        """Create vGPU(s) of a type, attach them to a VM and record them in its metadata (idempotent)."""
        from vgpuadm.errors import UsageError

        if display not in ("on", "off"):
            raise UsageError(f"--display {display!r} is not on or off", "write --display on or --display off")
        if total is not None and count is not None and total != count:
            raise UsageError(f"--total {total} and --count {count} disagree", "give --total alone")
        count = total if total is not None else count if count is not None else 1
        api.check_count(count, "devices")  # before the host or libvirt is read
        result = api.guest_create(
            ctx.obj["root"], vm, type_name, count, connect=ctx.obj.get("connect"), gpu=gpu, policy=policy, numa=numa,
            display=display == "on", ramfb=ramfb, params=param or (), dry_run=dry_run, on_demand=on_demand,
        )  # fmt: skip
        _report(ctx.obj["console"], result, as_json, "attached", quiet=quiet, show_xml=show_xml)

    def destroy_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The libvirt domain.", metavar="NAME"),
        uuid: str = typer.Option(
            None, "--uuid", help="Only this device (mdev UUID, or VF/GPU address).", metavar="U", callback=as_device
        ),
        all_: bool = typer.Option(False, "--all", help="Every device vgpuadm gave this VM."),
        forget: bool = typer.Option(
            False, "--forget", help="Only drop the VM's claim (hostdev and record); the device stays. For a copied VM."
        ),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
        quiet: bool = quiet_opt,
    ) -> None:
        """Detach a VM's vgpuadm devices, remove them and give passed-through GPUs back to their drivers."""
        result = api.guest_destroy(
            ctx.obj["root"], vm, uuid=uuid, all_=all_, connect=ctx.obj.get("connect"), dry_run=dry_run, forget=forget
        )
        _report(ctx.obj["console"], result, as_json, "removed", quiet=quiet)

    # `destroy` is a hard power-off in virsh: `give-back` and `remove` say what this one does.
    app.command("destroy", epilog="Example: vgpuadm destroy --vm web01 --all")(destroy_cmd)
    for alias in ("give-back", "remove"):
        app.command(alias, help="The same as `vgpuadm destroy`: take a VM's vgpuadm devices back.",
                    epilog=f"Example: vgpuadm {alias} --vm web01")(destroy_cmd)  # fmt: skip

    @app.command("passthrough", epilog="Example: vgpuadm passthrough --gpu 0000:65:00.0 --vm db01")
    def passthrough_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(
            ..., "--gpu", help="The GPU; its whole IOMMU group goes along.", metavar="BDF", callback=as_bdf
        ),
        vm: str = typer.Option(..., "--vm", help="The libvirt domain.", metavar="NAME"),
        force: bool = typer.Option(False, "--force", help="Allow a boot VGA GPU or a shared IOMMU group."),
        rom_file: str = typer.Option(None, "--rom-file", help="A VBIOS image for the GPU.", metavar="PATH"),
        on_demand: bool = typer.Option(
            False, "--on-demand", help="Bind it only while the VM runs (needs `vgpuadm hook install`)."
        ),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
        quiet: bool = quiet_opt,
        show_xml: bool = xml_opt,
    ) -> None:
        """Bind a whole GPU (GPU + audio …) to vfio-pci and attach it to a VM as one multifunction slot."""
        result = api.guest_passthrough(
            ctx.obj["root"],
            gpu,
            vm,
            connect=ctx.obj.get("connect"),
            force=force,
            rom_file=rom_file,
            dry_run=dry_run,
            on_demand=on_demand,
        )
        _report(ctx.obj["console"], result, as_json, "attached", quiet=quiet, show_xml=show_xml)

    @app.command("release", epilog="Example: vgpuadm release --gpu 0000:65:00.0")
    def release_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(..., "--gpu", help="The passed-through GPU.", metavar="BDF", callback=as_bdf),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
        quiet: bool = quiet_opt,
    ) -> None:
        """Detach a passed-through GPU from its VM and give it back to its host drivers."""
        result = api.guest_release(ctx.obj["root"], gpu, connect=ctx.obj.get("connect"), dry_run=dry_run)
        _report(ctx.obj["console"], result, as_json, "released", quiet=quiet)

    @app.command("adopt", epilog="Example: vgpuadm adopt --vm web01 --dry-run")
    def adopt_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The libvirt domain.", metavar="NAME"),
        dry_run: bool = dry_opt,
        as_json: bool = json_opt,
        quiet: bool = quiet_opt,
    ) -> None:
        """Record in a VM's metadata the devices its XML already has (attached by hand, or made by mdevctl), so
        that restore, apply and destroy manage them; nothing is attached or made."""
        result = api.guest_adopt(ctx.obj["root"], vm, connect=ctx.obj.get("connect"), dry_run=dry_run)
        _report_adopt(ctx.obj["console"], result, as_json, quiet=quiet)

    @app.command("demo", epilog="Example: vgpuadm demo · vgpuadm demo --dir /tmp/vgpuadm-demo   (kept; re-runnable)")
    def demo_cmd(
        ctx: typer.Context,
        directory: str = typer.Option(
            None, "--dir", help="Build the host here (new, empty, or a previous demo's: replaced); it is kept.",
            metavar="DIR",
        ),
        keep: bool = typer.Option(False, "--keep", help="Keep the temp host at the end (without --dir)."),
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """A guided tour on a simulated mixed host (libvirt's embedded driver, no GPU, no daemon): discover, a
        vGPU on a Tesla P4, a layout C VF, a passthrough GPU, a VM's view, the inventory, reboot + restore,
        destroy; each step prints the command it runs and what changed."""
        console: Console = ctx.obj["console"]

        def show(step: Any) -> None:
            if as_json:
                return
            console.line(f"$ {step.command}")
            for line in step.changes:
                console.line(f"  {line}")
            console.line("")

        result = api.demo(directory, keep=keep, report=show)
        if as_json:
            console.json({"root": result.root, "uri": result.uri, "domains": result.domains, "kept": result.kept,
                          "steps": [{"command": s.command, "changes": list(s.changes)} for s in result.steps]})  # fmt: skip
            return
        if not result.kept:
            console.line(f"removed the demo host {result.root} (--keep or --dir keeps it)")
            return
        console.line(f"the demo host is {result.root}; look around:")
        console.line(f"  vgpuadm --root {result.root} devices")
        console.line(f"  vgpuadm --root {result.root} show --vm train01")
        console.line(f"  virsh -c '{result.uri}' dumpxml db01")
