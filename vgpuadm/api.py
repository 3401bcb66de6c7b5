"""The one entry point for the CLI and the Ansible module: open a host root, discover, and (as later layers land)
plan, apply, report and restore. Wires the simulated kernel in when the root carries the simulation marker."""

from __future__ import annotations

import os

from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import SIM_MARKER, Sysfs, Writer
from vgpuadm.model import HostSnapshot

DEFAULT_ROOT = "/"


def resolve_root(root: str | None) -> str:
    """--root, else $VGPUADM_ROOT, else /."""
    return os.path.abspath(root or os.environ.get("VGPUADM_ROOT") or DEFAULT_ROOT)


def open_sysfs(root: str | None = None) -> Sysfs:
    real_root = resolve_root(root)
    writer: Writer | None = None
    if os.path.exists(os.path.join(real_root, SIM_MARKER)):
        from vgpuadm.sim.kernel import SimKernel

        writer = SimKernel(real_root)
    return Sysfs(real_root, writer)


def discover(root: str | None = None) -> HostSnapshot:
    return snapshot(open_sysfs(root))
