"""The `vgpuadm` command: global options, command registration, the guest verbs and the one error boundary.

Every VgpuadmError ends as `error: …` / `hint: …` on stderr with the error's exit code; no traceback reaches a
user. Plain `--json` read commands skip typer entirely (cli/fast.py)."""

import gc
import itertools
import os
import sys

from vgpuadm import api
from vgpuadm.cli import fast
from vgpuadm.cli.console import Console, OutputClosed, as_bdf, as_device, plan_options
from vgpuadm.errors import EXIT_CODES, Interrupted, NeedsRootError, UsageError, VgpuadmError

TYPE_CHECKING = False  # `typing` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

EPILOG = (
    "Examples: vgpuadm gpus · vgpuadm types --gpu 0000:01:00.0 --available · vgpuadm --root /tmp/h devices --json"
    "\n\n\b\nExit codes (with --json, errors are also a JSON object {error, hint, exit_code} on stdout):\n"
    + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES)
)


# The command modules, in registration order (the order `--help` lists them in), and the top-level commands each
# registers (tests/unit/test_cli_lazy.py checks this table against the modules). `register(app)` modules first,
# then the typer sub-apps. The four read commands are built here, in build_app.
READ_COMMANDS = ("gpus", "types", "devices", "show")
MODULES = (
    ("sim", ("sim",)),
    ("host", ("recover", "mdev", "vf", "sriov", "vfio")),
    # the guest verbs, built by register() in this module
    ("app", ("create", "destroy", "give-back", "remove", "passthrough", "release", "adopt", "demo")),
    ("declarative", ("apply", "restore", "reconcile", "mdevctl")),
    ("unit", ("unit",)),
    ("doctor", ("doctor",)),
    ("snapshot", ("snapshot",)),
    ("manpage", ("man",)),
    ("vms", ("vms",)),
    ("hook", ("hook",)),
    ("udev", ("udev",)),
    ("mig", ("mig",)),
    ("inventory", ("inventory",)),
    ("exporter", ("exporter",)),
    ("migrate", ("migrate",)),
)
SUB_APPS = ("sim", "inventory")  # modules with build_app() (a typer sub-app), not register(app)
WHOLE_TREE = ("man",)  # commands that read the whole command tree (the man page renders every command)
GLOBAL_VALUE_OPTIONS = ("--root", "--connect", "-c", "--wait")  # the root callback's options that take a value
GLOBAL_FLAGS = ("--no-wait", "--plain", "--no-headers")  # and its flags


def completing() -> bool:
    """Whether the shell asks for completions (typer's `_VGPUADM_COMPLETE*` variables): only then are the
    completers attached, and the whole tree is built."""
    return any(k.startswith("_VGPUADM_COMPLETE") for k in os.environ)


def command_word(argv: "Sequence[str]") -> str | None:
    """The top-level command argv invokes (the first word after the global options), or None (bare `vgpuadm`,
    `--help`, `--version`, `--install-completion`, …)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_VALUE_OPTIONS:
            i += 2
        elif arg.startswith("-"):
            if arg == "--" or not (arg.startswith(tuple(o + "=" for o in GLOBAL_VALUE_OPTIONS)) or arg in GLOBAL_FLAGS):
                return None  # --help, --version, completion options, a typo: the whole app answers them
            i += 1
        else:
            return arg
    return None


def modules_for(argv: "Sequence[str]") -> "tuple[str, ...] | None":
    """The command modules one run needs: only the invoked command's (its sibling commands' modules are not
    imported, nor their typer commands built: bench/bench_provision.py), or None for the whole app — no command
    word, an unknown one (click's own error names the near misses), a command reading the whole tree, and shell
    completion (typer completes from the whole tree)."""
    word = command_word(argv)
    if word is None or word in WHOLE_TREE or completing():
        return None
    if word in READ_COMMANDS:
        return ()
    found = tuple(m for m, words in MODULES if word in words)
    return found or None


def build_app(only: "Sequence[str] | None" = None) -> "Any":
    """The typer app; `only`: register just these command modules (see modules_for), None: every one."""
    import importlib

    import typer

    from vgpuadm.cli import read

    app = typer.Typer(
        name="vgpuadm",
        help="Give GPUs to libvirt/KVM guests: mdev vGPUs, NVIDIA vendor-VFIO VFs, MIG-backed vGPUs, SR-IOV VF pools "
        "(AMD, Intel), virtio-gpu with 3D (virtio-gl) and whole-GPU passthrough.",
        epilog=EPILOG,
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion; values: cli/completion.py
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    def _version(ctx: typer.Context, value: bool) -> None:
        if value:
            from importlib.metadata import version

            ctx.obj["console"].line(f"vgpuadm {version('vgpuadm')}")
            raise typer.Exit()

    @app.callback()
    def _global(
        ctx: typer.Context,
        root: str = typer.Option(
            None, "--root", envvar="VGPUADM_ROOT", help="Host root to read and change (default /).", metavar="DIR"
        ),
        connect: str = typer.Option(
            None,
            "--connect",
            "-c",
            metavar="URI",
            help="libvirt URI (default $LIBVIRT_DEFAULT_URI, else qemu:///system; on a simulated root, libvirt's "
            "embedded driver under the root).",
        ),
        wait: float = typer.Option(
            None, "--wait", metavar="SECONDS", help="How long a changing command waits for the host lock another "
            "vgpuadm holds (default 30; it says at once whom it waits for).",
        ),
        no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once when another vgpuadm holds the lock."),
        plain: bool = typer.Option(False, "--plain", help="Tables as tab-separated lines, every column, no box "
                                   "drawing (for awk, grep, cut)."),
        no_headers: bool = typer.Option(False, "--no-headers", help="Tables without their column names."),
        _show_version: bool = typer.Option(
            False, "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ) -> None:  # fmt: skip
        from vgpuadm import api

        console = (ctx.obj or {}).get("console") or Console()
        if wait is not None and not 0 <= wait <= 86400:
            raise UsageError(f"--wait {wait:g} is not between 0 and 86400 seconds", "e.g. --wait 120, or --no-wait")
        if no_wait and wait:
            raise UsageError("--wait and --no-wait disagree", "give one of them")
        lock = (0 if no_wait else wait, ("vgpuadm", *(ctx.obj or {}).get("argv", ())))  # wait, holder's argv
        api.set_lock_policy(lock[0], console.warn, lock[1])
        console.plain, console.headers = plain, not no_headers
        ctx.obj = {"root": root, "connect": connect, "console": console, "lock": lock}

    json_opt = typer.Option(False, "--json", help="Print JSON (validated by vgpuadm/schemas/*.schema.json).")

    @app.command("gpus", epilog="Example: vgpuadm gpus --json")
    def gpus_cmd(ctx: typer.Context, as_json: bool = json_opt) -> None:
        """List GPU functions: ids, driver, IOMMU group, NUMA node, layout, SR-IOV."""
        read.gpus(ctx.obj["console"], ctx.obj["root"], as_json)

    @app.command("types", epilog="Example: vgpuadm types --gpu 0000:01:00.0 --available")
    def types_cmd(
        ctx: typer.Context,
        gpu: str = typer.Option(None, "--gpu", "--parent", help="Only this GPU (a PF also lists its VFs).",
                                metavar="BDF", callback=as_bdf),
        available: bool = typer.Option(False, "--available", help="Only types with free instances."),
        type_name: str = typer.Option(None, "--type", help="Only this type (id, name or profile).", metavar="T"),
        per_vf: bool = typer.Option(False, "--per-vf", help="One row per parent (each VF), not per GPU."),
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """List vGPU types per GPU (mdev types and NVIDIA vendor-VFIO types); --per-vf per parent, --json always."""
        read.types(ctx.obj["console"], ctx.obj["root"], gpu, available, as_json, type_name, per_vf)

    @app.command("devices", epilog="Example: vgpuadm devices --vm web01 · vgpuadm devices --json --owners")
    def devices_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(None, "--vm", help="Only the devices this libvirt domain owns.", metavar="NAME"),
        gpu: str = typer.Option(None, "--gpu", "--parent", help="Only devices on this GPU or parent (a PF includes "
                                "its VFs).", metavar="BDF", callback=as_device),
        uuid: str = typer.Option(None, "--uuid", help="Only this device (mdev UUID or VF address).", metavar="U", callback=as_device),
        type_name: str = typer.Option(None, "--type", help="Only this type (id, name or profile).", metavar="T"),
        owners: bool = typer.Option(False, "--owners", help="With --json: add each device's owner (read from "
                                    "libvirt; the table always shows it)."),
        as_json: bool = json_opt,
    ) -> None:  # fmt: skip
        """List existing vGPUs (mdevs and typed vendor-VFIO VFs) and the VM owning each, or unowned."""
        read.devices(ctx.obj["console"], ctx.obj["root"], as_json, connect=ctx.obj.get("connect"),
                     owners=owners or not as_json, vm=vm, gpu=gpu, uuid=uuid, type_=type_name)  # fmt: skip

    @app.command("show", epilog="Example: vgpuadm show --vm web01 · vgpuadm show --vm web01 --json")
    def show_cmd(
        ctx: typer.Context,
        vm: str = typer.Option(..., "--vm", help="The libvirt domain.", metavar="NAME"),
        as_json: bool = typer.Option(False, "--json", help="Print JSON (vgpuadm/schemas/show.schema.json)."),
    ) -> None:
        """One VM's view: the devices vgpuadm gave it, where they are (GPU and model), params and options,
        made on demand or kept, and whether each exists on the host now."""
        read.show(ctx.obj["console"], ctx.obj["root"], vm, as_json, connect=ctx.obj.get("connect"))

    for name, _words in MODULES:
        if only is not None and name not in only:
            continue
        module = importlib.import_module(f"vgpuadm.cli.{name}")
        if name in SUB_APPS:
            app.add_typer(module.build_app(), name=name)
        else:
            module.register(app)
    return app


# -- the guest verbs -------------------------------------------------------------------------------------------------
def _output_options() -> "tuple[Any, Any]":
    """-q (say nothing on success) and -v/--show-xml (print the <hostdev> XML a change added) for the guest verbs."""
    import typer

    quiet = typer.Option(
        False, "-q", "--quiet", help="Print nothing when the change succeeds (errors still go to stderr)."
    )
    show_xml = typer.Option(False, "-v", "--show-xml", help="Also print the <hostdev> XML added to the domain.")
    return quiet, show_xml


def _report(
    console: Console, result: "Any", as_json: bool, verb: str, *, quiet: bool = False, show_xml: bool = False
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


def _report_adopt(console: Console, result: "Any", as_json: bool, *, quiet: bool = False) -> None:
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


def register(app: "Any") -> None:
    """Add the guest verbs (`create`, `destroy`, `passthrough`, `release`, `adopt`, `demo`) to the top-level typer
    app: devices made, attached to a libvirt domain and recorded in its vgpuadm <metadata>, as one plan that rolls
    back on failure."""
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

        def show(step: "Any") -> None:
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


LATE_OPTIONS = ("connect", "root", "plain", "no_headers")  # global options also accepted after the subcommand
VALUE_METAVARS: "dict[object, str]" = {int: "N", float: "SECONDS", "int": "N", "float": "SECONDS"}


def finish_tree(command: "Any", late: "dict[str, Any] | None" = None) -> "Any":
    """What every command gets, in one place: `-c/--connect URI` and `--root DIR` also after the subcommand
    (`vgpuadm devices -c URI`, virsh's habit; copies of the global options that store into the same place), and
    metavars that say what to type (typer's `<str>`/`<list[str]>` never show)."""
    import copy

    late = late or {p.name: p for p in command.params if p.name in LATE_OPTIONS}
    # The annotations of the command's own function (typer's callback wraps it with functools.update_wrapper).
    annotations = getattr(command.callback, "__annotations__", {})
    for param in command.params:
        if param.param_type_name == "argument":
            if param.metavar is None:
                param.metavar = param.name.upper()
            param.display_type_rich = lambda ctx: None  # the metavar says it; typer would add `<str>`
        elif not param.is_flag and param.metavar is None:
            param.metavar = VALUE_METAVARS.get(annotations.get(param.name), "VALUE")
    if hasattr(command, "commands"):
        for sub in command.commands.values():
            finish_tree(sub, late)
        if not getattr(command, "invoke_without_command", False):
            return command  # a group that runs itself (`vgpuadm inventory`) takes them like a command
    have = {o for p in command.params if p.param_type_name == "option" for o in p.opts}
    for name, option in late.items():
        if have.isdisjoint(option.opts):
            command.params.append(_late_option(option, name, copy.copy(option)))
    return command


def _late_option(option: "Any", name: str, late: "Any") -> "Any":
    def store(ctx: "Any", _param: "Any", value: "str | bool | None") -> None:
        if value is None or value is False or ctx.obj is None:
            return
        if name == "plain":
            ctx.obj["console"].plain = True
        elif name == "no_headers":
            ctx.obj["console"].headers = False
        else:
            ctx.obj[name] = value

    late.callback, late.expose_value, late.envvar = store, False, None
    words = f"{option.opts[0]} {option.metavar}" if option.metavar else option.opts[0]
    late.help = f"The same as `vgpuadm {words}` before the command."
    return late


def click_error_class() -> "Any":
    """click's ClickException, the base of every usage error the command tree raises. Found through typer's public
    BadParameter (a ClickException): typer ≥ 0.20 vendors click under a private module name, older typer uses
    click itself, and vgpuadm names neither."""
    import typer

    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def run(argv: "Sequence[str]", console: Console | None = None) -> int:
    """Run the CLI on argv; returns the exit code. Tests call this in-process.

    A reader that goes away (`vgpuadm inventory | head -1`) is not an error: exit 0, no traceback, no message;
    stdout is flushed here so that this holds for the last buffered write too."""
    console = console or Console()
    try:
        code = _run(argv, console)
        console.out.flush()
        return code
    except (BrokenPipeError, OutputClosed):
        _discard(console.out)
        return 0


def _discard(stream: "Any") -> None:
    """Point a closed pipe's fd at /dev/null: the interpreter's last flush at exit then has nowhere to fail."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def _run(argv: "Sequence[str]", console: Console) -> int:
    try:
        for arg in argv:  # Python holds undecodable bytes as surrogates: no name, path or value of ours has them
            if not arg.isascii() and any("\udc80" <= c <= "\udcff" for c in arg):
                raise UsageError(f"argument {arg.encode('utf-8', 'surrogateescape')!r} is not UTF-8 text",
                                 "give names, paths and values as UTF-8")  # fmt: skip
        code = fast.try_run(argv, console) if command_word(argv) in fast.WORDS else None
        if code is not None:
            return code
        import typer.main
        from typer import Abort, Exit

        click_exception = click_error_class()

        command = finish_tree(typer.main.get_command(build_app(modules_for(argv))))
        if completing():
            from vgpuadm.cli import completion

            completion.attach(command)
        try:
            result = command.main(args=list(argv), prog_name="vgpuadm", standalone_mode=False,
                                  obj={"console": console, "argv": tuple(argv)})  # fmt: skip
        except click_exception as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # click ≥ 8.2: a bare group raises it instead of its help
                ctx = getattr(exc, "ctx", None)
                console.line(ctx.get_help() if ctx else exc.format_message())
                return 0
            raise UsageError(exc.format_message(), "run `vgpuadm --help` for the commands and options") from None
        except Exit as exc:
            if exc.exit_code == Interrupted.exit_code:  # typer's answer to ^C outside a change
                raise KeyboardInterrupt from None
            return exc.exit_code
        except Abort:  # older typer (click's own answer to ^C)
            raise KeyboardInterrupt from None
        finally:
            from vgpuadm import api

            api.set_lock_policy()  # --wait/--no-wait were this run's: the API used in-process gets the default
        return result if isinstance(result, int) else 0
    except VgpuadmError as exc:
        return _fail(console, argv, exc)
    except KeyboardInterrupt:  # a change in flight answers ^C itself (Interrupted: what it rolled back)
        return _fail(console, argv, Interrupted("interrupted", "nothing was being changed"))
    except (BrokenPipeError, OutputClosed):
        raise
    except PermissionError as exc:  # an access check we missed: still the needs-root answer, not a bug report
        denied = NeedsRootError(
            f"permission denied: {exc.filename or exc.strerror}",
            "rerun as root, e.g. with sudo, or fix the file's owner",
        )
        return _fail(console, argv, denied)
    except Exception as exc:  # a bug of ours: still one line, with the way to get the traceback
        if os.environ.get("VGPUADM_DEBUG"):
            raise
        err = VgpuadmError(f"internal error: {type(exc).__name__}: {exc}",
                           "rerun with VGPUADM_DEBUG=1 for the traceback and report it")  # fmt: skip
        return _fail(console, argv, err, 70)


def _fail(console: Console, argv: "Sequence[str]", exc: VgpuadmError, code: int | None = None) -> int:
    """The error line (and hint) on stderr; under --json (or --format json) also the error as a JSON object on
    stdout, unless the command already printed its document (restore prints its result, then fails)."""
    code = exc.exit_code if code is None else code
    console.error(exc)
    if _wants_json(argv) and not console.printed_json:
        console.json({"error": exc.message, "hint": exc.hint, "exit_code": code})  # schemas/error.schema.json
    return code


def _wants_json(argv: "Sequence[str]") -> bool:
    args = list(argv)
    args = args[: args.index("--")] if "--" in args else args
    return (
        "--json" in args
        or "--format=json" in args
        or any(a == "--format" and b == "json" for a, b in itertools.pairwise(args))
    )


def main() -> None:
    code = run(sys.argv[1:])
    if fast.read_done:
        _end_now(code)
    gc.freeze()  # the process ends: the interpreter's last collection need not walk all it built (~9 ms of `apply`)
    sys.exit(code)


def _end_now(code: int) -> None:
    """End the process without the interpreter's teardown, once its output is out: after a read on the fast path
    (fast.read_done) nothing is left to close, and the teardown — freeing every row and record, a full collection
    — was ~5 % of a 2,560-type `types --json` (bench/README.md, sixth pass). Returns when a flush fails, for the
    usual exit to report it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
