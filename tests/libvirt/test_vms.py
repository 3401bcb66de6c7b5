"""`vgpuadm vms`: this host's domains with their state and recorded devices, exact JSON (valid against its schema)
and table, on a simulated host with domains in libvirt's embedded driver (real libvirt, the real CLI)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import define, vgpuadm

from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.schemas import validate

pytestmark = pytest.mark.libvirt


def test_vms_lists_every_domain_with_what_it_owns(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    uuids = define(root, "web01", "db01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "web01", "--count", "2").code == 0
    mdev = [device_uuid(HostRoot(str(root)).machine_id(), uuids["web01"], slot) for slot in (0, 1)]
    res = vgpuadm(root, "vms", "--json")
    assert (res.code, res.err) == (0, "")
    doc = json.loads(res.out)
    validate("vms", doc)
    assert doc == [
        {"name": "db01", "uuid": uuids["db01"], "state": "shut off", "devices": []},
        {"name": "web01", "uuid": uuids["web01"], "state": "shut off", "devices": [
            {"mode": "mdev", "type_id": "nvidia-63", "parent": "0000:01:00.0", "uuid": u, "address": None}
            for u in mdev]},
    ]  # fmt: skip
    res = vgpuadm(root, "vms", env={"COLUMNS": "100"})
    assert (res.code, res.err) == (0, "")
    assert [line.rstrip() for line in res.out.splitlines()] == [
        "VMs",
        "┏━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┓",
        "┃ name  ┃ state    ┃ type      ┃ device                               ┃ parent       ┃",
        "┡━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━┩",
        "│ db01  │ shut off │ -         │ -                                    │ -            │",
        f"│ web01 │ shut off │ nvidia-63 │ {mdev[0]} │ 0000:01:00.0 │",
        f"│       │          │ nvidia-63 │ {mdev[1]} │ 0000:01:00.0 │",
        "└───────┴──────────┴───────────┴──────────────────────────────────────┴──────────────┘",
    ]
