"""Helpers for the declarative tests: a simulated host root with domains in libvirt's embedded QEMU driver under it.

libvirt allows one embedded driver root per process, so every vgpuadm command runs as its own process (the real
CLI, as a user or systemd runs it); the domains' persistent XML is read from the files the driver keeps under the
root. No mocks: real libvirt, the simulated kernel, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from vgpuadm.model import Allocation
from vgpuadm.virt.xml import parse_allocations, parse_hostdevs

REPO = Path(__file__).resolve().parents[2]
EMBED_ETC = "var/lib/vgpuadm/libvirt/etc/qemu"  # the embedded driver's persistent domain XML under a sim root

_DEFINE = """
import json, sys
from vgpuadm.virt.conn import VirtConn, embed_uri
from vgpuadm.virt.xml import domain_definition
vnc = sys.argv[2] == "vnc"
with VirtConn(embed_uri(sys.argv[1])) as c:
    print(json.dumps({n: c.uuid(c.define(domain_definition(n, memory_mib=64, vnc=vnc))) for n in sys.argv[3:]}))
"""

_DEFINE_XML = """
import sys
from vgpuadm.virt.conn import VirtConn, embed_uri
with VirtConn(embed_uri(sys.argv[1])) as c:
    c.define(sys.stdin.read())
"""

_AUTOSTART = """
import sys
from vgpuadm.virt.conn import VirtConn, embed_uri
with VirtConn(embed_uri(sys.argv[1])) as c:
    for n in sys.argv[2:]:
        c.domain(n).setAutostart(1)
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LIBVIRT_DEFAULT_URI", "VGPUADM_ROOT", "COLUMNS")}
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "160"  # what a pipe gets (cli/console.py), whatever $COLUMNS the runner has
    env.update(extra or {})
    return env


def vgpuadm(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    proc = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), *args], capture_output=True,
                          text=True, env=_env(env), timeout=300, check=False)  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def define(root: Path, *names: str, vnc: bool = True) -> dict[str, str]:
    """Define diskless domains in the root's embedded driver (with a VNC <graphics> device unless `vnc=False`);
    returns name → domain UUID."""
    proc = _helper(_DEFINE, str(root), "vnc" if vnc else "-", *names)
    return dict(json.loads(proc.stdout))


def define_xml(root: Path, text: str) -> None:
    """Define a domain from its XML in the root's embedded driver (as `virsh define` of an edited dump does)."""
    proc = subprocess.run([sys.executable, "-c", _DEFINE_XML, str(root)], input=text, capture_output=True, text=True,
                          env=_env(), timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, f"embedded libvirt define: exit {proc.returncode}\n{proc.stderr}"


def autostart(root: Path, *names: str) -> None:
    """Mark domains of the root's embedded driver to start with the driver (virsh autostart)."""
    _helper(_AUTOSTART, str(root), *names)


def _helper(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a libvirt helper script in its own process; a failure fails the test with what libvirt said."""
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=_env(),
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, f"embedded libvirt helper {args}: exit {proc.returncode}\n{proc.stderr}"
    return proc


def domain_xml(root: Path, name: str) -> str:
    return (root / EMBED_ETC / f"{name}.xml").read_text()


def allocations(root: Path, name: str) -> list[Allocation]:
    return parse_allocations(domain_xml(root, name))


def hostdev_keys(root: Path, name: str) -> list[str]:
    return [ref.key for ref in parse_hostdevs(domain_xml(root, name))]


def mdevs(root: Path) -> list[str]:
    d = root / "sys/bus/mdev/devices"
    return sorted(os.listdir(d)) if d.is_dir() else []


def attr(root: Path, host_path: str) -> str:
    return (root / host_path.lstrip("/")).read_text()


def install_sriov_manage(root: Path) -> None:
    """Put the test stand-in for NVIDIA's sriov-manage (tests/data/sriov-manage-sim) where vgpuadm looks for it."""
    script = root / "usr/lib/nvidia/sriov-manage"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO}/tests/data/sriov-manage-sim" "$@"\n')
    script.chmod(0o755)
