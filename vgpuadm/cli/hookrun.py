"""`vgpuadm hook run DOMAIN OPERATION SUB-OPERATION -`: what libvirt's qemu hook executes for every domain it
starts and stops (vgpuadm/ops/hook.py). A failure is ONE line on stderr and a non-zero exit, which libvirt shows in
the error of the refused start. cli/fast.py runs it without the typer app, since every domain start on the host
waits for it: an operation the hook leaves alone, or a domain without on-demand devices (most of them), is answered
from virt/hookcall.py alone; only a domain with on-demand devices loads the orchestrator."""

from typing import Any

from vgpuadm import api
from vgpuadm.cli.console import Console, one_line
from vgpuadm.errors import VgpuadmError


def run_hook(console: Console, root: str | None, args: list[str], stdin: Any, argv: tuple[str, ...] = ()) -> int:
    """`argv`: the command line, told to another vgpuadm waiting for the host lock (typer's path sets the policy
    in its global options and passes none)."""
    domain, operation, sub_operation = args[0], args[1], args[2]
    try:
        phase = api.hookcall.phase_of(operation, sub_operation)
        if not phase:
            return 0
        text, doc = api.hookcall.read_domain_xml(stdin.read(api.hookcall.MAX_DOMAIN_XML + 1), domain)
        if not api.hookcall.has_on_demand(doc):
            return 0
        if argv:  # as the typer app's global options do: the default wait, told on stderr, argv as the holder
            api.set_lock_policy(None, console.warn, argv)
        try:
            result = api.hook.run_on_demand(root, domain, phase, text)
        finally:
            if argv:
                api.set_lock_policy()
    except VgpuadmError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        console.err.write(f"vgpuadm: domain {one_line(domain)}: {one_line(exc.message + hint)}\n")
        return exc.exit_code
    for line in (*result.applied, *result.left):
        console.err.write(f"vgpuadm: domain {one_line(domain)}: {one_line(line)}\n")
    return 0
