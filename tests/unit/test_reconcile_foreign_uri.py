"""`reconcile --fix` through a libvirt that is not this host's QEMU/KVM one (the test driver) is refused: such a
connection shows none of this host's domains, so every device would look leaked and be removed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm.errors import UnsafeError
from vgpuadm.ops.declarative import check_owner_uri
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


@pytest.mark.parametrize("uri", ["qemu:///session", "qemu+ssh://other.example/system",
                                 "qemu:///embed?root=/var/tmp/elsewhere"])  # fmt: skip
def test_reconcile_fix_on_a_simulated_root_needs_its_embedded_libvirt(  # type: ignore[no-untyped-def]
    sim_host: Callable[[str], Path], cli, uri: str
) -> None:
    """A session, a remote host or another root's embedded libvirt holds none of the simulated root's domains: each
    of their devices would look leaked. (The system daemon: tests/libvirt/test_reconcile_owner_uri.py.)"""
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--count", "2").code == 0
    before = tree_state(root)
    res = cli("--root", str(root), "--connect", uri, "reconcile", "--fix")
    assert (res.code, res.out) == (6, "")
    assert res.err.splitlines() == [
        f"error: --connect {uri} does not hold this simulated host's domains (its embedded libvirt does), so it "
        "cannot say which devices are leaks",
        "hint: run `vgpuadm reconcile --fix` without --connect",
    ]
    assert tree_state(root) == before


@pytest.mark.parametrize("uri", ["qemu:///session", "qemu+ssh://other.example/system", "qemu://other/system",
                                 "qemu+tcp:///system", "qemu:///system?mode=legacy", "qemu:///embed?root=/x"])  # fmt: skip
def test_reconcile_fix_on_a_real_host_needs_its_local_system_libvirt(uri: str) -> None:
    with pytest.raises(UnsafeError) as exc:
        check_owner_uri(uri, "/", simulated=False)
    assert exc.value.message == f"--connect {uri} is not this host's own system libvirt, so it cannot say which " \
                                "devices are leaks"  # fmt: skip
    assert exc.value.hint == "run `vgpuadm reconcile --fix` without --connect, or with --connect qemu:///system"


@pytest.mark.parametrize("uri", ["qemu:///system", "qemu+unix:///system", "qemu+unix:///system?socket=/run/l.sock"])
def test_reconcile_fix_on_a_real_host_accepts_its_system_libvirt(uri: str) -> None:
    check_owner_uri(uri, "/", simulated=False)
