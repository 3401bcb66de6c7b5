"""The pure migration check (plan/migration.py): a running VM must move live unless the operator asks for a stopped
(cold) move; the whole VM moves as its least movable device; each mode answers for its own devices. And a move's
pure parts: what the target is asked for, the definition it gets, the marks, its answer checked where it enters, and
the XML libvirt is given for a live move."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vgpuadm.catalog.migration import TargetGpu, TargetHost, board_pair, live_params
from vgpuadm.errors import ConflictError, HostIOError
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import Allocation
from vgpuadm.ops.migrate import parse_answer
from vgpuadm.plan.migration import OUTGOING, check, destination_xml, marked, moving, portable_xml, request
from vgpuadm.virt.xml import metadata_host, metadata_xml, parse_allocations, parse_domain, parse_hostdevs

UUID = "0a0a0a0a-0000-4000-8000-000000000001"
P4 = "0000:01:00.0"


def _target(free: int) -> TargetHost:
    gpu = TargetGpu(P4, "Tesla P4", "0x10de", "0x1bb3", False)
    return TargetHost("gpu2", {P4: gpu}, {"nvidia-63": ("GRID P4-1Q", ((P4, free),))})


def _mdev(params: str | None = None) -> Allocation:
    return Allocation("web01", "mdev", "nvidia-63", P4, UUID, params=params, slot=0)


def test_a_running_vm_with_a_cold_only_device_cannot_move_unless_offline(sim_host) -> None:
    snap = snapshot(Sysfs(str(sim_host("p4"))))
    running = check(snap, "web01", True, [_mdev("enable_debugging=1")], _target(1))
    assert (running.move, running.ok) == ("cold", False)
    offline = check(snap, "web01", True, [_mdev("enable_debugging=1")], _target(1), offline=True)
    assert (offline.move, offline.ok) == ("cold", True)
    live = check(snap, "web01", True, [_mdev("enable_debugging=0")], _target(1))
    assert (live.move, live.ok, live.devices[0].target_gpu) == ("live", True, P4)
    none = check(snap, "web01", True, [_mdev()], _target(0))
    assert (none.move, none.ok, none.devices[0].reasons) == ("no", False, ("no free nvidia-63 on the target",))
    assert check(snap, "idle", False, [], _target(0)).to_json()["move"] == "live"  # nothing recorded is in the way


def test_the_rules_the_modes_share() -> None:
    assert live_params("frame_rate_limiter=0, enable_uvm=0") is None
    assert live_params("enable_profiling=1 enable_uvm=1") == (
        "its vgpu_params enable enable_uvm, enable_profiling: NVIDIA allows no live migration then"
    )
    assert board_pair("H100 PCIe", "H100 NVL") == "a vGPU does not migrate between a H100 PCIe and a H100 NVL"
    assert board_pair("H200 SXM 141GB", "H200 SXM 141GB") is None
    assert board_pair("Tesla T4", "L4") is None  # no published rule: not refused here


# -- a cold move's pure parts (plan/migration.py) and the target's answer where it enters (ops/migrate.py) ------------

DOMAIN = (
    "<domain type='kvm'><name>web01</name><uuid>6f1c2b7e-0000-4000-8000-000000000001</uuid><devices>"
    f"<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{UUID}'/></source></hostdev>"
    "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x07' slot='0x00' "
    "function='0x0'/></source></hostdev></devices></domain>"
)


def _answer(**edits: object) -> bytes:
    doc = {"schema": "vgpuadm-migrate-step/1", "domain": "web01", "host": "sim:/x", "dry_run": False,
           "changed": True, "state": "incoming", "steps": ["step 1/1 define domain web01 (incoming)"],
           "devices": [{"slot": 0, "mode": "mdev", "type_id": "nvidia-63", "parent": P4, "uuid": UUID,
                        "address": None, "params": None, "options": {"display": "off", "migration": "incoming"}}]}  # fmt: skip
    doc.update(edits)
    return json.dumps(doc).encode()


def test_what_the_target_is_asked_to_make() -> None:
    second = Allocation("web01", "mdev", "nvidia-63", P4, UUID.replace("01", "02"), params="enable_uvm=1", slot=1)
    first = dataclasses.replace(_mdev("enable_uvm=1"), extra={"display": "on", "ramfb": "on"})
    second = dataclasses.replace(second, extra={"display": "on", "ramfb": "on"})
    req = request("web01", [first, second])
    assert req.argv("web01") == ["migrate", "incoming", "--vm", "web01", "--type", "nvidia-63", "--count", "2",
                                 "--json", "--uuid", UUID, "--uuid", second.uuid, "--param", "enable_uvm=1",
                                 "--display", "on", "--ramfb"]  # fmt: skip
    refusals = [
        ([], "domain web01 records no vgpuadm device: nothing of vgpuadm's to move"),
        ([first, _mdev()], "domain web01's devices differ in type, vgpu_params or display: vgpuadm moves a domain "
                           "whose devices are alike"),
        ([Allocation("web01", "pci", None, "0000:65:00.0", address="0000:65:00.0", slot=0)],
         "domain web01: a GPU passed through whole (0000:65:00.0) is not moved by vgpuadm: release it (vgpuadm "
         "release --gpu 0000:65:00.0), move the VM, then pass a GPU through on the target (vgpuadm passthrough)"),
        ([Allocation("web01", "virtio-gl", "virtio-gl", None, slot=0)],
         "domain web01: vgpuadm does not move virtio-gl devices to another host yet"),
    ]  # fmt: skip
    for allocations, message in refusals:
        with pytest.raises(ConflictError) as exc:
            request("web01", allocations)
        assert exc.value.message == message


def test_the_definition_the_target_gets_and_the_marks() -> None:
    marked_out = marked([_mdev()], OUTGOING)
    assert (moving(marked_out), marked_out[0].moving, moving([_mdev()])) == (OUTGOING, OUTGOING, None)
    assert marked(marked_out, None) == [_mdev()]
    meta = metadata_xml(marked_out, "sim:/src")
    with_meta = DOMAIN.replace("<devices>", f"<metadata>{meta}</metadata><devices>")
    assert parse_allocations(with_meta)[0].extra == {"migration": "outgoing"}
    portable = portable_xml(with_meta, parse_allocations(with_meta))
    assert "<metadata" not in portable and UUID not in portable  # vgpuadm's device and record go, not the rest
    assert [r.key for r in parse_hostdevs(portable)] == ["0000:07:00.0"]
    with pytest.raises(ConflictError, match="malformed option migration 'sideways'"):
        parse_allocations(with_meta.replace("'outgoing'", "'sideways'").replace('"outgoing"', '"sideways"'))


def test_the_targets_answer_is_checked_where_it_enters() -> None:
    good = parse_answer(_answer(), "the answer gpu2 sent", "web01")
    assert (good.state, [a.uuid for a in good.devices], good.devices[0].moving) == ("incoming", [UUID], "incoming")
    hostile = [
        (b"{not json", "the answer gpu2 sent is not JSON"),
        (_answer(schema="vgpuadm-migrate-step/2"), "the answer gpu2 sent is no vgpuadm-migrate-step/1 document: "),
        (_answer(domain="db02"), "the answer gpu2 sent is about domain 'db02', not web01"),
        (_answer(steps=["x\nerror: forged"]), "the answer gpu2 sent is no vgpuadm-migrate-step/1 document: "),
        (_answer(devices=[{"slot": 0, "mode": "mdev", "type_id": "nvidia-63", "parent": P4, "uuid": "../../x",
                           "address": None, "params": None, "options": {}}]),
         "the answer gpu2 sent is no vgpuadm-migrate-step/1 document: "),
        (_answer(devices=[{"slot": 0, "mode": "mdev", "type_id": "nvidia-63", "parent": P4, "uuid": UUID,
                           "address": None, "params": None, "options": {"migration": "sideways"}}]),
         "the answer gpu2 sent: device #0: option migration='sideways' is not allowed"),
    ]  # fmt: skip
    for data, message in hostile:
        with pytest.raises(HostIOError) as exc:
            parse_answer(data, "the answer gpu2 sent", "web01")
        assert exc.value.message.startswith(message), exc.value.message
        assert "\n" not in exc.value.message


def test_a_live_moves_xml_names_the_targets_device_where_the_guest_had_its_own() -> None:
    """The target's mdev took another UUID (the source's was taken there): the hostdev libvirt is given names it, in
    the source's place (its guest PCI address and alias kept), the hostdev vgpuadm does not record is left as it
    is, and vgpuadm's metadata is the target's, incoming."""
    guest = "<address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>"
    live = DOMAIN.replace("</source></hostdev>", f"</source><alias name='hostdev0'/>{guest}</hostdev>", 1)
    live = live.replace("<devices>", f"<metadata>{metadata_xml(marked([_mdev()], OUTGOING), 'sim:/src')}</metadata>"
                        "<devices>")  # fmt: skip
    theirs = dataclasses.replace(_mdev(), uuid=UUID.replace("01", "99"), parent="0000:02:00.0")
    sent = destination_xml(live, [_mdev()], marked([theirs], "incoming"), "sim:/dst")
    hostdevs = parse_domain(sent).findall("devices/hostdev")
    assert [(r.key, str(r.guest_address) if r.guest_address else None) for r in parse_hostdevs(sent)] == [
        (theirs.uuid, "0000:06:00.0"),
        ("0000:07:00.0", None),
    ]
    assert hostdevs[0].find("alias").get("name") == "hostdev0"
    assert (metadata_host(sent), [(a.uuid, a.parent, a.moving) for a in parse_allocations(sent)]) == (
        "sim:/dst",
        [(theirs.uuid, "0000:02:00.0", "incoming")],
    )
    with pytest.raises(ConflictError) as exc:
        destination_xml(live, [_mdev()], [], "sim:/dst")
    assert exc.value.message == "the target made 0 device(s) for the domain's 1"
