"""A typer-free path for the read commands' JSON form, the ones scripts call in loops.

Importing typer costs ~0.13 s here against ~0.02 s for a bare interpreter, which alone would break the cold-start
budget of `vgpuadm types --json` (≤ 3× `python -c pass`). Only exact, simple argument lists take this path;
anything else (help, typos, other commands) goes to the typer app, which owns the real parsing and messages."""

from __future__ import annotations

from collections.abc import Sequence

from vgpuadm.cli.console import Console

_COMMANDS = {"gpus": set(), "types": {"--available", "--gpu"}, "devices": set()}


def try_run(argv: Sequence[str], console: Console) -> bool:
    """Run argv if it is a plain read command with --json; False to hand it to typer."""
    args = list(argv)
    root = None
    if len(args) >= 2 and args[0] == "--root":
        root, args = args[1], args[2:]
    elif args and args[0].startswith("--root="):
        root, args = args[0].split("=", 1)[1], args[1:]
    if not args or args[0] not in _COMMANDS or "--json" not in args:
        return False
    command, rest = args[0], [a for a in args[1:] if a != "--json"]
    gpu, available = None, False
    while rest:
        flag = rest.pop(0)
        name, eq, value = flag.partition("=")
        if name not in _COMMANDS[command] or (eq and (name != "--gpu" or not value)):
            return False
        if flag == "--available":
            available = True
        elif eq:
            gpu = value
        elif not rest or rest[0].startswith("-"):
            return False
        else:
            gpu = rest.pop(0)
    import gc

    from vgpuadm.cli import read

    # A read builds tens of thousands of rows and records and frees none of them before it ends: the cyclic
    # collector would only walk them, again and again (~3 % of `types --json` on a big host).
    collecting = gc.isenabled()
    gc.disable()
    try:
        if command == "gpus":
            read.gpus(console, root, True)
        elif command == "types":
            read.types(console, root, gpu, available, True)
        else:
            read.devices(console, root, True)
    finally:
        if collecting:
            gc.enable()
    return True
