"""Concurrent vgpuadm processes on one simulated root: libvirt keeps the embedded driver (and the lock on its pid
file) until a process exits, so a process that has released the host lock still holds it for a moment. The next
one waits for it instead of failing with "Failed to acquire pid file" (which cannot be retried in-process)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import _env, define, hostdev_keys, mdevs

pytestmark = pytest.mark.libvirt


def test_concurrent_verbs_on_one_embedded_root_all_succeed(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    vms = [f"concemb{i:02d}" for i in range(4)]
    define(root, *vms)
    args = [sys.executable, "-m", "vgpuadm", "--root", str(root), "create", "--type", "nvidia-63", "--count", "2"]
    procs = [
        subprocess.Popen([*args, "--vm", vm], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        for vm in vms
    ]
    outs = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert [code for code, _, _ in outs] == [0] * 4, outs
    owned = [k for vm in vms for k in hostdev_keys(root, vm)]
    assert len(owned) == 8 and sorted(owned) == mdevs(root)
