"""`reconcile --fix` through a libvirt that is not this host's QEMU/KVM one (the test driver) is refused: such a
connection shows none of this host's domains, so every device would look leaked and be removed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vgpuadm.sim.treestate import tree_state


def test_reconcile_fix_through_the_test_driver_is_refused_and_removes_nothing(  # type: ignore[no-untyped-def]
    sim_host: Callable[[str], Path], cli
) -> None:
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--count", "2").code == 0
    before = tree_state(root)
    res = cli("--root", str(root), "--connect", "test:///default", "reconcile", "--fix")
    assert res.code != 0 and res.out == ""
    error, hint = res.err.splitlines()
    assert error == "error: --connect test:///default is not this host's QEMU/KVM libvirt, so it cannot say which " \
                    "devices are leaks"  # fmt: skip
    assert hint.startswith("hint: ")
    assert tree_state(root) == before
    assert len(list((root / "sys/bus/mdev/devices").iterdir())) == 2
