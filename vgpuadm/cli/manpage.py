"""`vgpuadm man`: the manual page vgpuadm(8), generated from the CLI itself (every command, its help, options and
arguments, as `--help` shows them), so it cannot drift from the program. `vgpuadm man > vgpuadm.8; man -l
vgpuadm.8` reads it."""

from typing import Any

from vgpuadm.cli.console import Console

EXIT_STATUS = (
    ("0", "success (doctor: no check failed; warnings allowed)"),
    ("1", "other errors; doctor: a check failed"),
    ("2", "usage: a bad option, argument or input file"),
    ("3", "not found: a GPU, type, VM or file that does not exist"),
    ("4", "capacity: the request does not fit"),
    ("5", "conflict: the device is in use, or a change is pending"),
    ("6", "unsafe: refused to protect the host or a VM"),
    ("7", "host I/O: a kernel write or read failed"),
    ("8", "libvirt refused or is unreachable"),
    ("70", "internal error (a bug: rerun with VGPUADM_DEBUG=1)"),
    ("77", "needs root"),
    ("130", "interrupted"),
)
ENVIRONMENT = (
    ("VGPUADM_ROOT", "the host root, as --root"),
    ("LIBVIRT_DEFAULT_URI", "the libvirt URI when --connect is not given"),
    ("VGPUADM_NVIDIA_SMI", "the nvidia-smi to run on /"),
    ("VGPUADM_DEBUG", "set to 1 to get the traceback of an internal error"),
)
FILES = (
    ("/run/vgpuadm/lock", "the host lock every change holds"),
    ("/var/lib/vgpuadm/journal.json", "the journal of a change in flight (vgpuadm recover)"),
    ("/var/lib/vgpuadm/drivers.json", "the drivers GPUs had before vfio bind"),
    ("/var/lib/vgpuadm/on-demand-mig.json", "the MIG GPU instances the qemu hook made for on-demand vGPUs"),
    ("/etc/mdevctl.d/", "mdevctl definitions (vgpuadm mdevctl export)"),
    ("/etc/systemd/system/vgpuadm-restore.service", "the boot-time restore unit (vgpuadm unit install)"),
)


def esc(text: str) -> str:
    """Text as roff shows it literally: backslashes, hyphens and a leading control character escaped."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    lines = [("\\&" + ln) if ln.startswith((".", "'")) else ln for ln in out.splitlines()]
    return "\n".join(lines)


def _commands(command: Any, ctx: Any, path: list[str]) -> list[tuple[list[str], Any, Any]]:
    out = []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        sub_ctx = type(ctx)(sub, info_name=name, parent=ctx)
        out.append(([*path, name], sub, sub_ctx))
        if hasattr(sub, "list_commands"):
            out.extend(_commands(sub, sub_ctx, [*path, name]))
    return out


def _options(command: Any, ctx: Any) -> list[str]:
    lines = []
    for param in command.params:
        record = param.get_help_record(ctx)
        if not record and param.param_type_name == "argument":
            record = (param.human_readable_name, "")
        if not record:
            continue
        lines += [".TP", f"\\fB{esc(record[0])}\\fR", esc(" ".join(record[1].split())) or "\\&"]
    return lines


def render(command: Any, version: str) -> str:
    """The roff text of vgpuadm(8) for the click command tree `command`."""
    import typer

    top = typer.Context(command, info_name="vgpuadm")
    lines = [
        f'.TH VGPUADM 8 "" "vgpuadm {esc(version)}" "System Administration"',
        ".SH NAME",
        "vgpuadm \\- give GPUs to libvirt/KVM guests: mdev vGPUs, NVIDIA vendor\\-VFIO VFs, whole\\-GPU passthrough",
        ".SH SYNOPSIS",
        ".B vgpuadm",
        "[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        esc(" ".join((command.help or "").split())),
        ".SH GLOBAL OPTIONS",
        *_options(command, top),
        ".SH COMMANDS",
    ]
    for path, sub, ctx in _commands(command, top, ["vgpuadm"]):
        lines.append(f'.SS "{esc(" ".join(path))}"')
        lines.append(esc(" ".join((sub.help or sub.short_help or "").split())) or "\\&")
        if sub.epilog:
            lines += [".PP", esc(" ".join(sub.epilog.split()))]
        lines += _options(sub, ctx)
    lines.append(".SH EXIT STATUS")
    for code, text in EXIT_STATUS:
        lines += [".TP", f"\\fB{code}\\fR", esc(text)]
    lines.append(".SH ENVIRONMENT")
    for name, text in ENVIRONMENT:
        lines += [".TP", f"\\fB{name}\\fR", esc(text)]
    lines.append(".SH FILES")
    for name, text in FILES:
        lines += [".TP", f"\\fI{esc(name)}\\fR", esc(text)]
    lines += [".SH SEE ALSO", "\\fBvirsh\\fR(1), \\fBmdevctl\\fR(8), \\fBdriverctl\\fR(8)", ""]
    return "\n".join(lines)


def register(app: Any) -> None:
    """Add `man` to the top-level typer app."""
    import typer

    @app.command("man", epilog="Example: vgpuadm man > vgpuadm.8 && man -l vgpuadm.8")
    def man_cmd(ctx: typer.Context) -> None:
        """Print the manual page vgpuadm(8) (roff), generated from this CLI."""
        from importlib.metadata import version

        console: Console = ctx.obj["console"]
        console.out.write(render(ctx.find_root().command, version("vgpuadm")))
