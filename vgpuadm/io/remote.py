"""Another host's vgpuadm, reached the way its libvirt URI says (`qemu+ssh://[user@]host[:port]/system`): `ssh …
vgpuadm inventory --json` there, bounded in time and size, for `migrate check --to URI`.

The URI is checked against its grammar here, where it enters, before any part of it becomes an argument of ssh:
the scheme, a user and host name (never one starting with `-`, and `--` ends ssh's options before the host
anyway), a port, the path libvirt names (/system or /session) and the query parameters libvirt's ssh transport
takes — `keyfile` (ssh -i) and `no_verify=1` (no host key check, as libvirt does) are used; those about libvirtd's
own socket (socket, netcat, no_tty, mode, proxy, command) do not concern this call and are let through.

The same way runs the target's side of `migrate prepare|run|abort` (a Peer: `ssh … vgpuadm migrate incoming …`,
the domain's definition on its standard input). A simulated target host on this machine (`--target-root DIR`, a
root `vgpuadm sim build` made) is reached as this machine's vgpuadm with `--root DIR`, in its own process: libvirt
allows one embedded driver root per process, and the target takes its own lock as another host would.

A live move also talks to the target's libvirt (the source's libvirt sends it the running guest): the `--to` URI
itself, or for a simulated target its embedded driver, or the libvirt `--target-connect URI` names (then given to
the target's vgpuadm as its `--connect`). That URI and the migration's data address (`--migrate-uri tcp://HOST`)
are checked here too."""

from __future__ import annotations

import os
import re
import select
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from vgpuadm.errors import UsageError, VgpuadmError
from vgpuadm.host.root import HostRoot
from vgpuadm.virt.conn import embed_uri

TIMEOUT = 60.0  # seconds for the whole remote call (ssh's own connect timeout is 10)
REMOTE_COMMAND = ("vgpuadm", "inventory", "--json")
_HINT = "give the target's libvirt URI, e.g. --to qemu+ssh://root@gpu2/system, or --target-inventory FILE"
_ROOT_HINT = (
    "--target-root names a simulated host on this machine (made by `vgpuadm sim build`); reach a real host "
    "with --to qemu+ssh://HOST/system"
)
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|[0-9a-f:.]{2,45}")
_LIBVIRTD_PARAMS = frozenset(("socket", "netcat", "no_tty", "mode", "proxy", "command", "name"))
_LIBVIRT_URI = re.compile(r"qemu(\+(unix|ssh|tcp|tls))?://[!-~]{0,1000}")
_CONNECT_HINT = "give the simulated target's libvirt URI, e.g. --target-connect qemu+unix:///system?socket=/run/x/sock"
_DATA_HINT = (
    "give the address the target's libvirt listens on for the guest's memory, e.g. --migrate-uri tcp://10.0.0.2"
)


def migrate_uri(text: str | None) -> str | None:
    """A live move's data address (`tcp://HOST[:PORT]`, libvirt's migrate URI), checked: None stays None."""
    if text is None:
        return None
    try:
        parts = urlsplit(text) if len(text) <= 300 and text.isprintable() else None
        _port = parts.port if parts is not None else None  # ValueError out of 0-65535
    except ValueError:
        parts = None
    if (parts is None or parts.scheme != "tcp" or not _HOST.fullmatch(parts.hostname or "") or parts.username
            or parts.path or parts.query or parts.fragment):  # fmt: skip
        raise UsageError(f"--migrate-uri {text[:80]!r} is not tcp://HOST[:PORT]", _DATA_HINT)
    return text


def ssh_command(uri: str) -> tuple[list[str], str]:
    """The ssh command line that runs `vgpuadm inventory --json` on the host `uri` names, and that host's name."""
    argv, host = ssh_prefix(uri)
    return [*argv, *REMOTE_COMMAND[1:]], host


def ssh_prefix(uri: str) -> tuple[list[str], str]:
    """The ssh command line that runs `vgpuadm` (arguments to follow) on the host `uri` names, and its name."""
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
    return [*argv, "--", host, REMOTE_COMMAND[0]], host


@dataclass(frozen=True)
class Peer:
    """The target host's vgpuadm: `argv` runs it (arguments to follow); `name` names the host in messages; `ssh`:
    reached over ssh (else a simulated host on this machine); `libvirt`: the target's libvirt URI, which a live
    move sends the running guest to."""

    argv: tuple[str, ...]
    name: str
    ssh: bool
    libvirt: str

    def call(self, args: list[str], limit: int, *, stdin: bytes | None = None, timeout: float = TIMEOUT) -> bytes:
        """The standard output of `vgpuadm ARGS` on the target (VgpuadmError naming the host when it fails)."""
        verb = f"vgpuadm {' '.join(args[:2])}"
        shown = f"ssh {self.name} {verb}" if self.ssh else f"{verb} on {self.name}"
        hint = (f"check `ssh {self.name} vgpuadm {' '.join(args[:2])}` by hand (vgpuadm must be on its PATH)" if self.ssh
                else f"check `vgpuadm {' '.join(self.argv[3:])} {' '.join(args[:2])}` by hand")  # fmt: skip
        # ssh joins the remote command into one string for the target's shell: each argument quoted, one word there
        words = [shlex.quote(a) for a in args] if self.ssh else args
        return run([*self.argv, *words], self.name, limit, timeout, what=shown, hint=hint, stdin=stdin)


def peer(to: str | None, target_root: str | None, target_connect: str | None = None) -> Peer:
    """The target's vgpuadm: over ssh for a qemu+ssh:// `to`, else the simulated host `target_root` on this
    machine (checked here: an existing directory holding a simulated host, named by its real path), whose libvirt
    is its embedded driver, or `target_connect` (checked here; only with `target_root`)."""
    if target_connect is not None and target_root is None:
        raise UsageError("--target-connect names a simulated target's libvirt: it goes with --target-root",
                         "a real target's libvirt is the --to URI itself")  # fmt: skip
    if target_root is not None:
        if len(target_root) > 4096 or not target_root.isprintable() or not os.path.isdir(target_root):
            raise UsageError(f"--target-root {target_root[:80]!r} is no directory", _ROOT_HINT)
        path = os.path.realpath(target_root)
        if not HostRoot(path).simulated:
            raise UsageError(f"--target-root {path[:80]} is no simulated host", _ROOT_HINT)
        if target_connect is None:
            return Peer((sys.executable, "-m", "vgpuadm", "--root", path), f"the simulated host {path}", False,
                        embed_uri(path))  # fmt: skip
        if not _LIBVIRT_URI.fullmatch(target_connect):
            raise UsageError(f"--target-connect {target_connect[:80]!r} is not a libvirt URI", _CONNECT_HINT)
        return Peer((sys.executable, "-m", "vgpuadm", "--root", path, "--connect", target_connect),
                    f"the simulated host {path}", False, target_connect)  # fmt: skip
    if to is None:
        raise UsageError("the target host is missing: give --to URI or --target-root DIR", _HINT)
    argv, host = ssh_prefix(to)
    return Peer(tuple(argv), host, True, to)


def run(argv: list[str], host: str, limit: int, timeout: float = TIMEOUT, *, what: str = "",
        hint: str = "", stdin: bytes | None = None) -> bytes:  # fmt: skip
    """The standard output of `argv` (at most `limit` bytes, within `timeout` seconds; `stdin` its input);
    VgpuadmError naming `host` when ssh or the remote vgpuadm fails (`what` it ran, `hint` the fix), says too much
    or takes too long (the call is then killed)."""
    what = what or f"ssh {host} vgpuadm inventory --json"
    hint = hint or "check `ssh HOST vgpuadm inventory --json` by hand (vgpuadm must be on its PATH)"
    with tempfile.TemporaryFile() as given:  # the input from a file: nothing to interleave with reading the output
        given.write(stdin or b"")
        given.seek(0)
        return _run(argv, host, limit, timeout, what, hint, given if stdin is not None else subprocess.DEVNULL)


def _run(argv: list[str], host: str, limit: int, timeout: float, what: str, hint: str, stdin: Any) -> bytes:
    try:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
        lines = [line.strip() for line in err.splitlines() if line.strip()]  # ssh's own warnings come first
        first = next((x for x in lines if x.startswith("error: ")), lines[0] if lines else f"exit status {code}")[:400]
        theirs = next((line.strip()[6:] for line in err.splitlines() if line.startswith("hint: ")), "")[:400]
        raise VgpuadmError(f"{what} failed: {first.removeprefix('error: ')}", theirs or hint)
    return bytes(out)
