"""A typer-free path for the read commands' JSON form, the ones scripts call in loops, for `restore` as the
boot unit runs it (`restore --domain-xml-dir DIR --timeout S`), for `hook run`, which libvirt runs at every
domain's start and stop (the start waits for it: typer's import and the whole vgpuadm.api were half of it), for
`udev run`, which udevd runs for every event vgpuadm's udev rule matches (and waits for), and for
`apply -f PLAN` (typer and its pydantic were ~0.13 s of CPU of every run: bench/bench_provision.py).

Importing typer costs ~0.13 s here against ~0.02 s for a bare interpreter, which alone would break the cold-start
budget of `vgpuadm types --json` (≤ 3× `python -c pass`); for `restore`, typer's import, its command tree and its
per-option coercion were a quarter of the command's CPU (bench/bench_restore.py). Only exact, simple argument lists
take this path; anything else (help, typos, other commands, an option given twice, a value that typer might read
otherwise) goes to the typer app, which owns the real parsing and messages."""

from __future__ import annotations

from vgpuadm.cli.console import Console

TYPE_CHECKING = False  # `typing` and `collections` stay off the fast path (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Sequence

_RESTORE_OPTIONS = ("--domain-xml-dir", "--timeout")

_COMMANDS = {"gpus": set(), "types": {"--available", "--gpu"}, "devices": set()}
_APPLY_FLAGS = {"--check": "--check", "--dry-run": "--check", "--diff": "--diff", "--prune": "--prune",
                "--json": "--json"}  # fmt: skip
_GLOBAL_VALUES = {"--root": "--root", "--connect": "--connect", "-c": "--connect"}
WORDS = frozenset(
    {*_COMMANDS, "restore", "hook", "udev", "apply"}
)  # the command words this path may take (cli/app asks first)

# A JSON read (gpus, types, devices) ran whole on this path: nothing it made needs the interpreter's teardown, so
# the process may end without it (app.main).
read_done = False


class _Uncollected:
    """The cyclic collector off for a command that frees little of what it builds before the process ends: it would
    only walk the rows, documents and modules again and again (~3 % of `types --json` on a big host). At the end
    what is still alive goes to the oldest generation uncollected (gc.freeze + unfreeze) before the collector is
    back on: as it was, in the youngest, the first collection after the command walked all of it once more (16 ms
    of a 64-VM `apply`). A long-lived caller (Ansible, tests) gets it collected by its next full collection."""

    def __enter__(self) -> None:
        import gc

        self.collecting = gc.isenabled()
        gc.disable()

    def __exit__(self, *_exc: object) -> None:
        import gc

        if self.collecting:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def try_run(argv: Sequence[str], console: Console) -> int | None:
    """Run argv if it takes this path; its exit code, or None to hand it to typer."""
    planned = _apply_args(argv)
    if planned is not None:
        return _apply(argv, planned, console)
    args = list(argv)
    root = None
    if len(args) >= 2 and args[0] == "--root":
        root, args = args[1], args[2:]
    elif args and args[0].startswith("--root="):
        root, args = args[0].split("=", 1)[1], args[1:]
    if args and args[0] == "restore":
        return _restore(argv, args[1:], root, console)
    if args[:2] == ["hook", "run"]:
        return _hook_run(argv, args[2:], root, console)
    if args[:2] == ["udev", "run"]:
        return _udev_run(argv, args[2:], root, console)
    if not args or args[0] not in _COMMANDS or "--json" not in args:
        return None
    command, rest = args[0], [a for a in args[1:] if a != "--json"]
    gpu, available = None, False
    while rest:
        flag = rest.pop(0)
        name, eq, value = flag.partition("=")
        if name not in _COMMANDS[command] or (eq and (name != "--gpu" or not value)):
            return None
        if flag == "--available":
            available = True
        elif eq:
            gpu = value
        elif not rest or rest[0].startswith("-"):
            return None
        else:
            gpu = rest.pop(0)
    from vgpuadm.cli import read

    # A read builds tens of thousands of rows and records and frees none of them before it ends.
    with _Uncollected():
        if command == "gpus":
            read.gpus(console, root, True)
        elif command == "types":
            read.types(console, root, gpu, available, True)
        else:
            read.devices(console, root, True)
    global read_done
    read_done = True
    return 0


def _restore(argv: Sequence[str], rest: list[str], root: str | None, console: Console) -> int | None:
    """`restore [--domain-xml-dir DIR] [--timeout S] [--json]`, each at most once; S plain decimal seconds."""
    values: dict[str, str] = {}
    as_json = False
    while rest:
        flag = rest.pop(0)
        name, eq, value = flag.partition("=")
        if flag == "--json" and not as_json:
            as_json = True
            continue
        if name not in _RESTORE_OPTIONS or name in values:
            return None
        if not eq:
            if not rest:
                return None
            value = rest.pop(0)
        if not value or value.startswith("-"):
            return None
        values[name] = value
    seconds = values.get("--timeout", "60")
    whole, dot, fraction = seconds.partition(".")
    if not (whole.isdigit() and whole.isascii() and (not dot or (fraction.isdigit() and fraction.isascii()))):
        return None  # typer's own float reading decides anything else (1e3, inf, " 5")
    from vgpuadm import api
    from vgpuadm.cli import declarative

    # As the typer app's global options do: the default lock wait, the waits told on stderr, argv as the holder.
    api.set_lock_policy(None, console.warn, ("vgpuadm", *argv))
    try:
        declarative.restore(console, root, None, values.get("--domain-xml-dir"), float(seconds), as_json)
    finally:
        api.set_lock_policy()
    return 0


def _hook_run(argv: Sequence[str], words: list[str], root: str | None, console: Console) -> int | None:
    """`hook run DOMAIN OPERATION SUB-OPERATION [-]` as the installed hook runs it: three plain words and `-`."""
    if len(words) not in (3, 4) or any(w.startswith("-") for w in words[:3]) or words[3:] not in ([], ["-"]):
        return None
    import sys

    from vgpuadm.cli import hookrun

    return hookrun.run_hook(console, root, words[:3], sys.stdin.buffer, ("vgpuadm", *argv))


def _udev_run(argv: Sequence[str], words: list[str], root: str | None, console: Console) -> int | None:
    """`udev run --gpu ADDR|--parent NAME [--worker]` as the udev rule and its hand-off run it."""
    worker = words[2:] == ["--worker"]
    if len(words) not in (2, 3) or words[0] not in ("--gpu", "--parent") or (len(words) == 3 and not worker):
        return None
    if not words[1] or words[1].startswith("-"):
        return None
    from vgpuadm.cli import udevrun

    return udevrun.run_udev(root, words[0][2:], words[1], worker, argv, console.err)


def _apply_args(argv: Sequence[str]) -> dict[str, str] | None:
    """`[--root R] [--connect|-c URI] apply -f|--file PLAN [--check|--dry-run] [--diff] [--prune] [--json]`, each
    at most once, as {option: value} (a flag's value is ""); PLAN is `-` (stdin) or a word not starting with `-`,
    the other values words not starting with `-`. None for anything else."""
    args = list(argv)
    values: dict[str, str] = {}
    while args and args[0] != "apply":
        if not _take(args, _GLOBAL_VALUES, values):
            return None
    if not args:
        return None
    del args[0]
    while args:
        flag = _APPLY_FLAGS.get(args[0])
        if flag is not None and flag not in values:
            values[flag] = ""
            del args[0]
        elif flag is not None or not _take(args, {"-f": "-f", "--file": "-f"}, values):
            return None
    return values if "-f" in values else None


def _take(args: list[str], names: dict[str, str], values: dict[str, str]) -> bool:
    """Move the option at args[0] and its value (`NAME VALUE`, or `--name=VALUE`) into `values` under its canonical
    name; False when it is not one of `names`, is given again, or its value is missing or looks like an option."""
    name, eq, value = args[0].partition("=")
    option = names.get(name)
    if option is None or option in values or (eq and not name.startswith("--")):
        return False
    if not eq:
        if len(args) < 2:
            return False
        value = args[1]
        del args[1]
    del args[0]
    if not value or (value.startswith("-") and not (option == "-f" and value == "-")):
        return False
    values[option] = value
    return True


def _apply(argv: Sequence[str], values: dict[str, str], console: Console) -> int:
    # The modules, the plan, the domains' XML and the steps are kept until the process ends.
    with _Uncollected():
        from vgpuadm import api
        from vgpuadm.cli import declarative

        # As the typer app's global options do: the default lock wait, the waits told on stderr, argv as the holder.
        api.set_lock_policy(None, console.warn, ("vgpuadm", *argv))
        try:
            declarative.apply(console, values.get("--root"), values.get("--connect"), values["-f"],
                              "--check" in values, "--diff" in values, "--prune" in values, "--json" in values)  # fmt: skip
        finally:
            api.set_lock_policy()
    return 0
