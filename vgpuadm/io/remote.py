"""Another host's vgpuadm, reached the way its libvirt URI says (`qemu+ssh://[user@]host[:port]/system`): `ssh …
vgpuadm inventory --json` there, bounded in time and size, for `migrate check --to URI`.

The URI is checked against its grammar here, where it enters, before any part of it becomes an argument of ssh:
the scheme, a user and host name (never one starting with `-`, and `--` ends ssh's options before the host
anyway), a port, the path libvirt names (/system or /session) and the query parameters libvirt's ssh transport
takes — `keyfile` (ssh -i) and `no_verify=1` (no host key check, as libvirt does) are used; those about libvirtd's
own socket (socket, netcat, no_tty, mode, proxy, command) do not concern this call and are let through."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from urllib.parse import parse_qsl, urlsplit

from vgpuadm.errors import UsageError, VgpuadmError

TIMEOUT = 60.0  # seconds for the whole remote call (ssh's own connect timeout is 10)
REMOTE_COMMAND = ("vgpuadm", "inventory", "--json")
_HINT = "give the target's libvirt URI, e.g. --to qemu+ssh://root@gpu2/system, or --target-inventory FILE"
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|[0-9a-f:.]{2,45}")
_LIBVIRTD_PARAMS = frozenset(("socket", "netcat", "no_tty", "mode", "proxy", "command", "name"))


def ssh_command(uri: str) -> tuple[list[str], str]:
    """The ssh command line that runs `vgpuadm inventory --json` on the host `uri` names, and that host's name."""
    if len(uri) > 1024 or not uri.isprintable():
        raise UsageError("--to is not a libvirt URI", _HINT)
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise UsageError(f"--to {uri[:80]}: not a libvirt URI", _HINT) from None
    if parts.scheme != "qemu+ssh":
        raise UsageError(f"--to {uri[:80]}: vgpuadm reads another host over ssh only (qemu+ssh://)", _HINT)
    host, user = parts.hostname or "", parts.username
    if not _HOST.fullmatch(host) or (user is not None and not _USER.fullmatch(user)) or parts.password is not None:
        raise UsageError(f"--to {uri[:80]}: the user or host name is not one ssh takes", _HINT)
    if parts.path not in ("/system", "/session") or parts.fragment:
        raise UsageError(f"--to {uri[:80]}: the path is /system or /session", _HINT)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    for key, value in parse_qsl(parts.query, keep_blank_values=True, max_num_fields=16):
        if key == "keyfile" and value.startswith("/") and "\n" not in value:
            argv += ["-i", value]
        elif key == "no_verify" and value in ("0", "1"):
            argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"] if value == "1" else []
        elif key not in _LIBVIRTD_PARAMS:
            raise UsageError(f"--to {uri[:80]}: the URI parameter {key[:32]!r} is not one vgpuadm knows", _HINT)
    if port is not None:
        argv += ["-p", str(port)]
    if user is not None:
        argv += ["-l", user]
    return [*argv, "--", host, *REMOTE_COMMAND], host


def run(argv: list[str], host: str, limit: int, timeout: float = TIMEOUT) -> bytes:
    """The standard output of `argv` (at most `limit` bytes, within `timeout` seconds); VgpuadmError naming `host`
    when ssh or the remote vgpuadm fails, says too much or takes too long (the call is then killed)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise VgpuadmError(f"cannot run ssh: {exc.strerror}", "install the OpenSSH client (openssh-client)") from None
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    out = bytearray()
    try:
        fd = proc.stdout.fileno()
        while len(out) <= limit:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise VgpuadmError(f"{host} did not answer within {timeout:g} s", "check that ssh to it works")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out += chunk
        if len(out) > limit:
            raise VgpuadmError(f"{host} sent more than {limit >> 20} MiB", "check the vgpuadm there")
        err = proc.stderr.read(4096).decode("utf-8", "replace")
        code = proc.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise VgpuadmError(f"{host} did not answer within {timeout:g} s", "check that ssh to it works") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if code != 0:
        first = next((line.strip() for line in err.splitlines() if line.strip()), f"exit status {code}")[:200]
        raise VgpuadmError(f"ssh {host} vgpuadm inventory --json failed: {first}",
                          "check `ssh HOST vgpuadm inventory --json` by hand (vgpuadm must be on its PATH)")  # fmt: skip
    return bytes(out)
