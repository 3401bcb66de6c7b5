"""vgpu_migration run ad hoc by real ansible-core on the source host: check mode prints every step on both hosts
and changes nothing; the task moves the shut-off VM cold to the target (two simulated hosts, each with libvirt's
embedded driver under its root, the target's vgpuadm its own process); a rerun is ok, as the VM is not here any
more; `state: prepared` then `state: aborted` goes there and back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.libvirt.embedded_host import EMBED_ETC, allocations, define, mdevs, vgpuadm
from vgpuadm.sim.profiles import build
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt


def test_a_shut_off_vm_moves_once_and_a_half_done_move_goes_back(ansible_lab: Any, tmp_path: Path) -> None:
    lab = ansible_lab(["gpu-p4"])
    src, dst = tmp_path / "src", tmp_path / "dst"
    build("p4", str(src))
    build("p4", str(dst))
    define(src, "mvan-web01", "mvan-db02")
    for vm in ("mvan-web01", "mvan-db02"):
        assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", vm).code == 0
    web, db = (allocations(src, vm)[0].uuid for vm in ("mvan-web01", "mvan-db02"))
    args = {"root": str(src), "connect": None, "vm": "mvan-web01", "target_root": str(dst)}
    before = (tree_state(src), tree_state(dst))
    check = lab.module("gpu-p4", "vgpu_migration", args, check=True)
    assert (check["status"], check["changed"], check["state"]) == ("changed", True, "moved"), check
    assert check["steps"][0] == "this host: step 1/1 record domain mvan-web01's devices as outgoing"
    assert (tree_state(src), tree_state(dst)) == before
    done = lab.module("gpu-p4", "vgpu_migration", args)
    assert (done["changed"], done["state"], [d["uuid"] for d in done["devices"]]) == (True, "moved", [web]), done
    assert (mdevs(src), mdevs(dst)) == ([db], [web])
    assert not (src / EMBED_ETC / "mvan-web01.xml").exists()
    again = lab.module("gpu-p4", "vgpu_migration", args)
    assert (again["status"], again["changed"], again["steps"]) == ("ok", False, []), again
    half = lab.module("gpu-p4", "vgpu_migration", {**args, "vm": "mvan-db02", "state": "prepared"})
    assert (half["changed"], half["state"]) == (True, "outgoing"), half
    assert [a.moving for a in allocations(dst, "mvan-db02")] == ["incoming"]
    back = lab.module("gpu-p4", "vgpu_migration", {**args, "vm": "mvan-db02", "state": "aborted"})
    assert (back["changed"], back["state"]) == (True, "none"), back
    assert (mdevs(src), mdevs(dst), [a.moving for a in allocations(src, "mvan-db02")]) == ([db], [web], [None])
    assert not (dst / EMBED_ETC / "mvan-db02.xml").exists()
