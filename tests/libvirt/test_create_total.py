"""`create --total N` means what its help says: how many of the type the VM owns afterwards, in all. Below what it
owns, the newest devices of the type go back (dry run first); devices of other types stay. Real CLI processes, the
root's embedded libvirt, the simulated kernel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, define, hostdev_keys, mdevs, vgpuadm

pytestmark = pytest.mark.libvirt


def test_a_smaller_total_takes_back_the_newest_devices_of_the_type(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    define(root, "total01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--total", "3", "--vm", "total01").code == 0
    oldest, *newest = sorted(allocations(root, "total01"), key=lambda a: a.slot)
    assert vgpuadm(root, "create", "--type", "nvidia-64", "--vm", "total01").code == 0  # another type: it stays
    [other] = [a for a in allocations(root, "total01") if a.type_id == "nvidia-64"]
    before = allocations(root, "total01")

    dry = vgpuadm(root, "create", "--type", "nvidia-63", "--total", "1", "--vm", "total01", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines()[0] == "would take 2 × nvidia-63 from domain total01 (it keeps 1):"
    assert len(mdevs(root)) == 4 and allocations(root, "total01") == before

    res = vgpuadm(root, "create", "--type", "nvidia-63", "--total", "1", "--vm", "total01")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [f"removed mdev nvidia-63 {a.uuid} on {a.parent} (from total01)" for a in newest]
    assert mdevs(root) == sorted([oldest.uuid, other.uuid])
    assert hostdev_keys(root, "total01") == [oldest.uuid, other.uuid]
    assert [a.uuid for a in allocations(root, "total01")] == [oldest.uuid, other.uuid]

    again = vgpuadm(root, "create", "--type", "nvidia-63", "--total", "1", "--vm", "total01")
    assert (again.code, again.out) == (0, "nothing to do: domain total01 already has 1 × nvidia-63\n")
