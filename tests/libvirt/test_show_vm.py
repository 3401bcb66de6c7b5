"""`vgpuadm show --vm NAME` as an operator types it (one process per command, libvirt's embedded driver under a
simulated P4 root): what the VM owns, where (GPU and model), params, on demand or kept, present or missing."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.libvirt.embedded_host import define, mdevs, vgpuadm
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import build


def test_show_vm_lists_its_devices_where_they_are_and_what_is_missing(tmp_path: Path) -> None:
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "sh-web01", "sh-idle")
    started = _utc_now()
    made = vgpuadm(root, "create", "--type", "P4-1Q", "--vm", "sh-web01", "--total", "2", "--display", "on",
                   "--param", "frame_rate_limiter=0")  # fmt: skip
    assert made.code == 0, made.err
    u0, u1 = (d["id"] for d in json.loads(vgpuadm(root, "show", "--vm", "sh-web01", "--json").out)["devices"])
    assert sorted([u0, u1]) == sorted(mdevs(root))
    r = vgpuadm(root, "show", "--vm", "sh-web01", "--json")
    doc = json.loads(r.out)
    validate("show", doc)
    changed = doc.pop("changed")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", changed) and started <= changed <= _utc_now(), changed

    def device(slot: int, uuid: str, present: bool) -> dict[str, object]:
        return {"slot": slot, "mode": "mdev", "id": uuid, "type_id": "nvidia-63", "name": "GRID P4-1Q",
                "parent": "0000:01:00.0", "physical_gpu": "0000:01:00.0", "model": "Tesla P4",
                "params": "frame_rate_limiter=0", "options": {"display": "on"}, "on_demand": False,
                "present": present}  # fmt: skip

    assert doc == {"domain": "sh-web01", "uuid": uuids["sh-web01"], "running": False,
                   "devices": [device(0, u0, True), device(1, u1, True)]}  # fmt: skip
    text = vgpuadm(root, "show", "--vm", "sh-web01")
    assert text.code == 0 and text.out.startswith(
        f"domain sh-web01 (shut off), uuid {uuids['sh-web01']}: 2 vgpuadm device(s)\nlast changed by vgpuadm: {changed}\n"
    )
    rows = [line for line in text.out.splitlines() if u0 in line or u1 in line]
    assert len(rows) == 2 and all("Tesla P4" in x and "0000:01:00.0" in x and " yes " in x for x in rows), text.out
    assert text.out.endswith("options slot 0: display=on\noptions slot 1: display=on\n")

    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    after = json.loads(vgpuadm(root, "show", "--vm", "sh-web01", "--json").out)
    assert [d["present"] for d in after["devices"]] == [False, False]
    assert "MISSING (vgpuadm restore)" in vgpuadm(root, "show", "--vm", "sh-web01").out

    again = vgpuadm(root, "create", "--type", "P4-1Q", "--vm", "sh-web01", "--total", "2", "--display", "on",
                    "--param", "frame_rate_limiter=0")  # fmt: skip
    assert again.code == 0, again.err
    assert json.loads(vgpuadm(root, "show", "--vm", "sh-web01", "--json").out)["changed"] == changed  # nothing changed

    idle = vgpuadm(root, "show", "--vm", "sh-idle")
    assert (idle.code, idle.out) == (0, f"domain sh-idle (shut off), uuid {uuids['sh-idle']}: 0 vgpuadm device(s)\n"
                                        "it owns nothing vgpuadm made; give it one: vgpuadm create --type T --vm "
                                        "sh-idle\n")  # fmt: skip
    missing = vgpuadm(root, "show", "--vm", "sh-nosuch", "--json")
    assert missing.code == 3 and json.loads(missing.out)["error"] == "No domain named 'sh-nosuch'"


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_change_rolled_back_keeps_the_time_of_the_last_one(tmp_path: Path) -> None:
    """The metadata's `changed` stamp moves only when a change lands: a destroy whose mdev removal fails is undone,
    and the undo puts back the stamp of the create before it."""
    root = tmp_path / "p4"
    build("p4", str(root))
    define(root, "sh-web02")
    assert vgpuadm(root, "create", "--type", "P4-1Q", "--vm", "sh-web02").code == 0
    before = json.loads(vgpuadm(root, "show", "--vm", "sh-web02", "--json").out)
    time.sleep(1.1)  # the stamp has a resolution of one second
    assert vgpuadm(root, "sim", "fail", str(root), "/sys/bus/mdev/devices/*/remove", "EBUSY").code == 0
    failed = vgpuadm(root, "destroy", "--vm", "sh-web02")
    assert failed.code != 0 and "rolled back" in failed.err, failed.err
    after = json.loads(vgpuadm(root, "show", "--vm", "sh-web02", "--json").out)
    assert after == before and before["changed"] is not None


def test_show_vm_says_what_the_driver_reports_each_running_device_uses_now(tmp_path: Path) -> None:
    """The exporter's join (each mode finds its device's record) feeds `show`: a `now` line (JSON `now`) for each
    device a guest runs on, as the simulated driver was told; nothing for a device nobody runs on; and on a GPU with
    MIG on, no utilization (NVML has none there) but the frame buffer."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "now-web01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "now-web01", "--total", "2").code == 0
    _u0, u1 = (d["id"] for d in json.loads(vgpuadm(root, "show", "--vm", "now-web01", "--json").out)["devices"])
    r = vgpuadm(root, "sim", "usage", str(root), u1, "--vm-uuid", uuids["now-web01"], "--gpu", "31", "--fb-used",
                "700", "--license", "Unlicensed (Restricted)")  # fmt: skip
    assert r.code == 0, r.err
    r = vgpuadm(root, "show", "--vm", "now-web01")
    assert (r.code, r.err) == (0, "")
    assert [line for line in r.out.splitlines() if line.startswith("now ")] == ["now slot 1: 31 % GPU, 0.7 of 1 GiB"]
    doc = json.loads(vgpuadm(root, "show", "--vm", "now-web01", "--json").out)
    validate("show", doc)
    assert [d.get("now") for d in doc["devices"]] == [
        None,
        {"gpu_percent": 31, "memory_percent": 0, "fb_used_mib": 700, "fb_total_mib": 1024, "licensed": False},
    ]

    mig = tmp_path / "h200"
    build("h200-vendor-vfio", str(mig))
    uuid = define(mig, "now-infer01")["now-infer01"]
    assert vgpuadm(mig, "create", "--type", "nvidia-1414", "--vm", "now-infer01").code == 0
    assert vgpuadm(mig, "sim", "usage", str(mig), "0000:18:00.4", "--vm-uuid", uuid, "--gpu", "50", "--fb-used",
                   "9000").code == 0  # fmt: skip
    r = vgpuadm(mig, "show", "--vm", "now-infer01")
    assert [line for line in r.out.splitlines() if line.startswith("now ")] == ["now slot 0: GPU n/a, 8.8 of 18 GiB"]


def test_inventory_usage_gives_each_device_the_figures_show_gives(tmp_path: Path) -> None:
    """`inventory --usage --json` (what the Cockpit page reads) puts on each device a guest runs on the `now` that
    `show --vm` gives it, from the same join; a device nobody runs on, and the inventory without --usage (whose
    document changes only with the host), have none. Both documents validate, and so does the fleet merge of them."""
    root = tmp_path / "p4"
    build("p4", str(root))
    uuids = define(root, "inv-web01")
    assert vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "inv-web01", "--total", "2").code == 0
    u0, u1 = (d["id"] for d in json.loads(vgpuadm(root, "show", "--vm", "inv-web01", "--json").out)["devices"])
    assert vgpuadm(root, "sim", "usage", str(root), u1, "--vm-uuid", uuids["inv-web01"], "--gpu", "31", "--memory",
                   "12", "--fb-used", "700").code == 0  # fmt: skip
    show = json.loads(vgpuadm(root, "show", "--vm", "inv-web01", "--json").out)
    r = vgpuadm(root, "inventory", "--usage", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    validate("inventory-v1", doc)
    now = {d["id"]: d.get("now") for d in doc["devices"]}
    assert now == {
        u0: None,
        u1: {"gpu_percent": 31, "memory_percent": 12, "fb_used_mib": 700, "fb_total_mib": 1024, "licensed": True},
    }
    assert [d.get("now") for d in show["devices"]] == [now[u0], now[u1]]
    plain = json.loads(vgpuadm(root, "inventory", "--json").out)
    assert [d for d in plain["devices"] if "now" in d] == []
    (tmp_path / "usage.json").write_text(r.out)
    merged = vgpuadm(root, "inventory", "merge", str(tmp_path / "usage.json"), "--format", "json")
    assert merged.code == 0, merged.err
    validate("fleet-v1", json.loads(merged.out))
