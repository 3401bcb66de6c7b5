"""`vgpuadm hook run DOMAIN OPERATION SUB-OPERATION -`: what libvirt's qemu hook executes for every domain it
starts and stops (vgpuadm/ops/hook.py). A failure is ONE line on stderr and a non-zero exit, which libvirt shows in
the error of the refused start. It imports only the hook's orchestrator (not vgpuadm.api, not typer): cli/fast.py
runs it without the typer app, since every domain start on the host waits for it."""

from typing import Any

from vgpuadm.cli.console import Console
from vgpuadm.errors import VgpuadmError
from vgpuadm.ops import hook


def run_hook(console: Console, root: str | None, args: list[str], stdin: Any) -> int:
    domain, operation, sub_operation = args[0], args[1], args[2]
    try:
        data = stdin.read(hook.MAX_DOMAIN_XML + 1) if hook.phase_of(operation, sub_operation) else b""
        result = hook.run(root, domain, operation, sub_operation, data)
    except VgpuadmError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        console.err.write(f"vgpuadm: domain {domain}: {exc.message}{hint}\n".replace("\n", " ").rstrip() + "\n")
        return exc.exit_code
    for line in result.applied:
        console.err.write(f"vgpuadm: domain {domain}: {line}\n")
    return 0
