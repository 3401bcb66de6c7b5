"""Races on the real kernel: 16 `vgpuadm create` processes started at once on one pool (mtty-2: 12 instances) for 16
domains. Exactly 12 succeed, the other 4 fail with the capacity error (exit 4) and change nothing; no mdev is made
twice or left without an owner, every domain's hostdevs match its metadata, and no journal is left.

The 16 are real, separate processes, concurrent (each its own pid, its own try at the host lock, its own libvirt
connection and sysfs writes), forked from this one after vgpuadm is imported and one `create --dry-run` ran in it
(tests/kernel/guest_fork.py): they share the interpreter start and what the first run of a command builds once
(typer's command tree and option adapters), not the work of the race."""

from __future__ import annotations

import json
import os

from guest_fork import forked
from guest_virsh import URI, dumpxml
from lxml import etree

from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.xml import NS, PREFIX

N = 16
POOL = 12  # mtty's 24 ports: mtty-2 takes 2


def test_sixteen_concurrent_creates_on_twelve_instances(cli, sysfs: Sysfs, domain, mark) -> None:
    names = domain.all([f"kl-race-{i:02d}" for i in range(N)])
    mark("16 domains defined")
    # --wait: the host lock serialises the 16; under TCG the queue is longer than the default 30 s wait.
    base = ["--connect", URI, "--wait", "900", "create", "--type", "mtty-2"]
    warm = cli(*base, "--vm", names[0], "--dry-run")
    assert warm.code == 0, warm.err
    outcomes = dict(zip(names, forked([[*base, "--vm", name] for name in names]), strict=True))
    mark(f"16 creates done: {sum(o[0] == 0 for o in outcomes.values())} made a device")
    won = sorted(n for n, (code, _, _) in outcomes.items() if code == 0)
    lost = {n: o for n, o in outcomes.items() if o[0] != 0}
    assert len(won) == POOL, outcomes
    for code, _out, err in lost.values():
        # stderr may first say whom it waited for ("waiting for pid N (vgpuadm create …)"); the error is one line
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert (code, errors) == (4, ["error: No room for 1 × mtty-2: mtty: no free instances of mtty-2 "
                                      "(available_instances 0)"]), err  # fmt: skip

    owned: list[str] = []
    for name in names:
        doc = etree.fromstring(dumpxml(name, inactive=True).encode())
        uuids = [a.get("uuid") for a in doc.findall("devices/hostdev/source/address")]
        meta = doc.find(f"metadata/{{{NS}}}{PREFIX}")
        recorded = [d.get("uuid") for d in meta.iter(f"{{{NS}}}device")] if meta is not None else []
        assert uuids == recorded, name
        assert len(uuids) == (1 if name in won else 0), name
        owned += uuids
    assert sorted(owned) == sorted(sysfs.listdir("/sys/bus/mdev/devices"))  # nothing leaked, nothing made twice
    assert len(set(owned)) == POOL
    assert sysfs.read("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/available_instances") == "0"
    assert not os.path.exists("/var/lib/vgpuadm/journal.json")
    result = cli("--connect", URI, "reconcile", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["leaks"] == []
