"""The `--json` documents of the guest commands (create, destroy, passthrough, release) and of the declarative ones
(apply, restore, reconcile), taken from the real CLI on simulated hosts with domains in libvirt's embedded driver,
validate against their JSON Schemas (vgpuadm/schemas) and say exactly what happened."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from embedded_host import define, mdevs, vgpuadm

from vgpuadm import api
from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.schemas import validate

pytestmark = pytest.mark.libvirt

GPU = "0000:01:00.0"


def run_json(root: Path, schema: str, *args: str, code: int = 0) -> dict[str, Any]:
    res = vgpuadm(root, *args, "--json")
    assert res.code == code, res.err
    doc: dict[str, Any] = json.loads(res.out)
    validate(schema, doc)
    return doc


def test_create_and_destroy(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    uuids = define(root, "web01")
    u = device_uuid(HostRoot(str(root)).machine_id(), uuids["web01"], 0)

    dry = run_json(root, "guest", "create", "--type", "P4-1Q", "--vm", "web01", "--dry-run")
    assert (dry["changed"], dry["dry_run"], len(dry["steps"]), mdevs(root)) == (False, True, 2, [])

    made = run_json(root, "guest", "create", "--type", "P4-1Q", "--vm", "web01", "--display", "on")
    assert (made["domain"], made["changed"], made["removed"]) == ("web01", True, [])
    assert made["added"] == made["devices"] == [{
        "slot": 0, "mode": "mdev", "type_id": "nvidia-63", "parent": GPU, "uuid": u, "address": None,
        "params": None, "options": {"display": "on"},
    }]  # fmt: skip
    assert made["steps"][0] == f"step 1/2 create mdev {u} of type nvidia-63 on {GPU}"
    assert made["hostdevs"] == [
        f'<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="on">\n  <source>\n'
        f'    <address uuid="{u}"/>\n  </source>\n</hostdev>\n'
    ]

    again = run_json(root, "guest", "create", "--type", "P4-1Q", "--vm", "web01")
    assert (again["changed"], again["steps"], again["added"]) == (False, [], [])

    gone = run_json(root, "guest", "destroy", "--vm", "web01", "--all")
    assert (gone["changed"], gone["devices"], [a["uuid"] for a in gone["removed"]]) == (True, [], [u])
    assert mdevs(root) == []


def test_passthrough_and_release(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("passthrough")
    define(root, "db01")
    given = run_json(root, "guest", "passthrough", "--gpu", "0000:65:00.0", "--vm", "db01")
    assert [(a["mode"], a["type_id"], a["parent"], a["address"]) for a in given["added"]] == [
        ("pci", None, "0000:65:00.0", "0000:65:00.0"),
        ("pci", None, "0000:65:00.0", "0000:65:00.1"),
    ]
    assert given["added"][0]["options"]["multifunction"] == "on"

    back = run_json(root, "guest", "release", "--gpu", "0000:65:00.0")
    assert (back["domain"], back["changed"], back["devices"]) == ("db01", True, [])
    assert [a["address"] for a in back["removed"]] == ["0000:65:00.0", "0000:65:00.1"]


def test_apply_reconcile_restore(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("p4")
    define(root, "web01")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  web01:\n    type: nvidia-63\n    count: 2\n")

    check = run_json(root, "apply", "apply", "-f", str(plan), "--check")
    assert (check["changed"], check["check"], check["diff"]) == (False, True, ["+ web01: nvidia-63 ×2"])
    assert len(check["steps"]) == 3 and mdevs(root) == []
    done = run_json(root, "apply", "apply", "-f", str(plan))
    assert (done["changed"], done["steps"], len(mdevs(root))) == (True, check["steps"], 2)
    same = run_json(root, "apply", "apply", "-f", str(plan))
    assert (same["changed"], same["diff"], same["steps"]) == (False, [], [])

    leak = "0a0a0a0a-0000-4000-8000-0000000000aa"
    api.open_sysfs(str(root)).write(f"/sys/class/mdev_bus/{GPU}/mdev_supported_types/nvidia-63/create", leak)
    found = run_json(root, "reconcile", "reconcile")
    assert found == {"dry_run": False, "recovered": [], "leaks": [{"kind": "mdev", "id": leak, "detail": f"nvidia-63 on {GPU}"}],
                     "fixed": [], "lost": []}  # fmt: skip
    fixed = run_json(root, "reconcile", "reconcile", "--fix")
    assert fixed["fixed"] == [f"step 1/1 remove mdev {leak} from {GPU}"] and leak not in mdevs(root)

    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    restored = run_json(root, "restore", "restore")
    assert (restored["devices"], restored["problems"], len(mdevs(root))) == (2, [], 2)
    assert [line.split(": ", 1)[0] for line in restored["done"]] == ["vgpu", "vgpu"]
    assert run_json(root, "restore", "restore") == {"devices": 2, "dry_run": False, "planned": [], "done": [],
                                                    "skipped": [], "problems": [], "held": []}  # fmt: skip
