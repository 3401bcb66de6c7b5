"""`vgpuadm migrate check --to qemu+ssh://…` reads the target host through a real OpenSSH server (Debian's sshd on
127.0.0.1, its own host key and config in the test's directory): the target's vgpuadm runs there with the simulated
target root in its environment (`environment=` in authorized_keys), exactly as `ssh HOST vgpuadm inventory --json`
(and the target's part of `migrate run`) would on another machine. And the URIs that must never reach ssh's command
line are refused where they enter."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.libvirt.embedded_host import EMBED_ETC, allocations, define, hostdev_keys, mdevs, vgpuadm
from vgpuadm.sim.profiles import build

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """A real sshd on 127.0.0.1 whose one key runs vgpuadm against the simulated target root `dst`; yields the
    URI's authority and query (user@host:port, ?keyfile=…&no_verify=1) and the target root."""
    dst = tmp_path / "dst"
    build("p4", str(dst))
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vgpuadm").write_text(f'#!/bin/sh\nexec {sys.executable} -m vgpuadm "$@"\n')
    (bin_dir / "vgpuadm").chmod(0o755)
    key = (tmp_path / "client_key.pub").read_text().strip()
    env = f'environment="VGPUADM_ROOT={dst}",environment="PATH={bin_dir}:/usr/bin:/bin"'
    (tmp_path / "authorized_keys").write_text(f"{env} {key}\n")
    port = _free_port()
    config = tmp_path / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path}/host_key\n"
                      f"AuthorizedKeysFile {tmp_path}/authorized_keys\nStrictModes no\nUsePAM no\n"
                      "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitUserEnvironment yes\n"
                      f"PermitRootLogin prohibit-password\nPidFile {tmp_path}/sshd.pid\n")  # fmt: skip
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "sshd exited"
            assert time.monotonic() < deadline, "sshd did not listen within 30 s"
            time.sleep(0.1)
    try:
        yield f"{getpass.getuser()}@127.0.0.1:{port}", dst, f"?keyfile={tmp_path}/client_key&no_verify=1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_target_is_read_over_ssh_as_its_libvirt_uri_names_it(tmp_path: Path, sshd) -> None:
    authority, dst, query = sshd
    src = tmp_path / "src"
    build("p4", str(src))
    define(src, "mg-ssh")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-ssh").code == 0
    define(dst, "mg-busy")
    assert vgpuadm(dst, "create", "--type", "nvidia-63", "--vm", "mg-busy", "--total", "16").code == 0  # full
    uri = f"qemu+ssh://{authority}/system{query}"
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-ssh", "--to", uri)
    assert r.code == 1, r.err
    assert r.out.splitlines()[0] == f"mg-ssh (shut off) to {uri}: cannot move"
    assert r.out.splitlines()[1].endswith(": no: no free nvidia-63 on the target")
    assert vgpuadm(dst, "destroy", "--vm", "mg-busy", "--all").code == 0
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-ssh", "--to", uri)
    assert (r.code, r.out.splitlines()[0]) == (0, f"mg-ssh (shut off) to {uri}: can move live"), r.err
    assert r.out.splitlines()[1].endswith(": live to GPU 0000:01:00.0")


def test_a_target_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "src"
    build("p4", str(src))
    define(src, "mg-down")
    port = _free_port()  # nothing listens there
    r = vgpuadm(src, "migrate", "check", "--vm", "mg-down", "--to", f"qemu+ssh://127.0.0.1:{port}/system?no_verify=1")
    assert (r.code, r.out) == (1, "")
    error, hint = r.err.splitlines()
    assert error.startswith("error: ssh 127.0.0.1 vgpuadm inventory --json failed: ssh: connect to host 127.0.0.1 "
                            f"port {port}: Connection refused")  # fmt: skip
    assert hint == "hint: check `ssh HOST vgpuadm inventory --json` by hand (vgpuadm must be on its PATH)"


@pytest.mark.parametrize(
    ("uri", "error"),
    [
        ("qemu:///system", "vgpuadm reads another host over ssh only (qemu+ssh://)"),
        ("qemu+ssh://-oProxyCommand=touch%20x/system", "the user or host name is not one ssh takes"),
        ("qemu+ssh://-oProxyCommand=x@gpu2/system", "the user or host name is not one ssh takes"),
        ("qemu+ssh://gpu2/system?keyfile=relative", "the URI parameter 'keyfile' is not one vgpuadm knows"),
        ("qemu+ssh://gpu2/system?sshopt=x", "the URI parameter 'sshopt' is not one vgpuadm knows"),
        ("qemu+ssh://gpu2/etc", "the path is /system or /session"),
        ("qemu+ssh://gpu2:99999/system", "not a libvirt URI"),
    ],
)
def test_uris_that_must_not_reach_ssh_are_refused_where_they_enter(tmp_path: Path, uri: str, error: str) -> None:
    src = tmp_path / "src"
    build("p4", str(src))
    r = vgpuadm(src, "migrate", "check", "--vm", "any", "--to", uri)
    assert r.code == 2 and r.err.splitlines()[0].endswith(error), r.err
    assert not (tmp_path / "x").exists() and not Path("x").exists()


def test_a_shut_off_vm_moves_over_ssh(tmp_path: Path, sshd) -> None:
    """`migrate run --to qemu+ssh://…`: the target's part (`vgpuadm migrate incoming|finish`, the domain's
    definition on its standard input) runs through the real sshd as on another machine."""
    authority, dst, query = sshd
    src = tmp_path / "src"
    build("p4", str(src))
    define(src, "mg-move")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-move").code == 0
    (uuid,) = mdevs(src)
    uri = f"qemu+ssh://{authority}/system{query}"
    host = authority.split("@")[1].split(":")[0]
    r = vgpuadm(src, "migrate", "run", "--vm", "mg-move", "--to", uri)
    assert (r.code, r.err) == (0, ""), r.err
    assert r.out.splitlines()[0] == f"moved domain mg-move to {host}:"
    assert r.out.splitlines()[-1] == f"  {host}: step 1/1 record domain mg-move's devices as settled (the move is over)"
    assert (mdevs(src), mdevs(dst), hostdev_keys(dst, "mg-move")) == ([], [uuid], [uuid])
    assert not (src / EMBED_ETC / "mg-move.xml").exists()
    # the target refuses a second copy of the domain: the source stays as it was
    define(src, "mg-move")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mg-move").code == 0
    r = vgpuadm(src, "migrate", "run", "--vm", "mg-move", "--to", uri)
    assert (r.code, r.out) == (1, "")
    assert r.err.splitlines() == [
        f"error: ssh {host} vgpuadm migrate incoming failed: domain mg-move is defined on this host already",
        "hint: undefine it here (virsh undefine mg-move) or move the VM to another host",
    ]
    assert [a.extra for a in allocations(src, "mg-move")] == [{"display": "off"}]


def test_the_remote_command_line_carries_each_argument_as_one_word(tmp_path: Path, sshd) -> None:
    """ssh hands the remote command to the target's shell as one string: a domain name and vgpu_params with spaces
    and shell syntax reach the target's vgpuadm each as one argument, and nothing runs (the `touch` would make its
    file in the ssh user's home, where the remote shell starts)."""
    authority, dst, query = sshd
    src = tmp_path / "src"
    build("p4", str(src))
    marker = Path.home() / f"vgpuadm-pwned-{uuid.uuid4().hex}"
    vm = f"mg $(touch {marker.name}) x"
    define(src, vm)
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", vm, "--param", "frame_rate_limiter=0",
                   "--param", "enable_uvm=0").code == 0  # fmt: skip
    try:
        r = vgpuadm(src, "migrate", "run", "--vm", vm, "--to", f"qemu+ssh://{authority}/system{query}")
        assert not marker.exists()
    finally:
        marker.unlink(missing_ok=True)
    assert (r.code, r.err) == (0, ""), r.err
    (moved,) = allocations(dst, vm)
    assert moved.params == "frame_rate_limiter=0, enable_uvm=0"
