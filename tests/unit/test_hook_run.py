"""The qemu hook's entry (`vgpuadm hook run DOMAIN OP SUBOP -`, domain XML on stdin as libvirt sends it) against
simulated roots: prepare/begin makes exactly the recorded on-demand devices, release/end removes them and leaves the
kernel tree byte-identical, a start that does not fit fails with one line on stderr and a non-zero exit, and no
libvirt is involved (the domain XML is built here from the planner's own hostdev and metadata output, as
`create --on-demand` writes them; tests/libvirt/test_hook_daemon.py does the same through a real libvirtd)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.domains import VNC, domain, libvirt_file
from vgpuadm import api, modes
from vgpuadm.host import mig as host_mig
from vgpuadm.host.root import HostRoot
from vgpuadm.model import Allocation, device_uuid
from vgpuadm.plan import devices as device_plans
from vgpuadm.plan import guest
from vgpuadm.plan.domains import Domains
from vgpuadm.sim.treestate import diff, tree_state
from vgpuadm.virt import xml

UUIDS = ["6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a0" + str(i) for i in range(10)]


def bare(name: str, uuid: str) -> str:
    return domain(name, uuid, devices=VNC)


def defined(host_key: str, name: str, uuid: str, after: Sequence[Allocation]) -> str:
    """The persistent XML the create --on-demand plan leaves: its hostdevs and its metadata record."""
    meta = xml.metadata_xml(after, host_key)
    hostdevs = "".join(modes.hostdev_xml(a) for a in after)
    return domain(name, uuid, metadata=meta, devices=VNC + hostdevs)


def on_demand(root: Path, name: str, uuid: str, type_name: str, count: int = 1, **options: object) -> str:
    """As `create --on-demand` records the request (a MIG-backed type placed as the driver will list it)."""
    snap = api.discover(str(root))
    if device_plans.mig_may_need(snap, [type_name]):
        snap = device_plans.mig_project(snap, host_mig.read_host(HostRoot(str(root))), [type_name])
    _plan, added, after = guest.plan_create(snap, bare(name, uuid), type_name, count, on_demand=True, **options)
    assert added and all(a.on_demand for a in added)
    return defined(snap.host_key, name, uuid, after)


def hook(cli, monkeypatch: pytest.MonkeyPatch, root: Path, name: str, op: str, sub: str, domain_xml: str | bytes):
    data = domain_xml.encode() if isinstance(domain_xml, str) else domain_xml
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    return cli("--root", str(root), "hook", "run", name, op, sub, "-")


def test_create_on_demand_records_the_request_and_makes_nothing(sim_host):
    root = sim_host("p4")
    before = tree_state(root)
    snap = api.discover(str(root))
    u = device_uuid(HostRoot(str(root)).machine_id(), UUIDS[0], 0)
    plan, added, _after = guest.plan_create(snap, bare("web01", UUIDS[0]), "P4-1Q", on_demand=True, policy="spread",
                                            gpu="02:00.0", params=["frame_rate_limiter=0"])  # fmt: skip
    assert plan.describe() == [
        f"step 1/1 attach mdev {u} (nvidia-63) to domain web01, and record 1 vgpuadm device(s) in its metadata",
    ]
    assert plan.steps[0].attach == xml.mdev_hostdev(u)
    assert xml.for_libvirt_metadata(plan.steps[0].element) == (
        f'<vgpuadm version="1" host="sim:{root}">\n'
        f'  <device slot="0" mode="mdev" type="nvidia-63" uuid="{u}" params="frame_rate_limiter=0">\n'
        '    <option name="display" value="off"/>\n'
        '    <option name="gpu" value="0000:02:00.0"/>\n'
        '    <option name="on_demand" value="yes"/>\n'
        '    <option name="policy" value="spread"/>\n'
        "  </device>\n"
        "</vgpuadm>\n"
    )
    assert added[0].parent is None and tree_state(root) == before


def test_prepare_makes_the_mdevs_and_release_removes_them(sim_host, cli, monkeypatch):
    root = sim_host("p4")
    before = tree_state(root)
    dom = on_demand(root, "web01", UUIDS[0], "nvidia-63", 2, params=["frame_rate_limiter=0"])
    machine = HostRoot(str(root)).machine_id()
    u0, u1 = (device_uuid(machine, UUIDS[0], slot) for slot in (0, 1))
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", dom)
    assert (r.code, r.out) == (0, "")
    assert r.err.splitlines() == [
        f"vgpuadm: domain web01: step 1/4 create mdev {u0} of type nvidia-63 on 0000:01:00.0",
        f'vgpuadm: domain web01: step 2/4 set vgpu_params of mdev {u0} to "frame_rate_limiter=0"',
        f"vgpuadm: domain web01: step 3/4 create mdev {u1} of type nvidia-63 on 0000:01:00.0",
        f'vgpuadm: domain web01: step 4/4 set vgpu_params of mdev {u1} to "frame_rate_limiter=0"',
    ]
    gpu = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    changed = diff(before, tree_state(root))
    assert {k for k in changed if k.count("/") == 5 and k.startswith(gpu + "/")} == {f"{gpu}/{u0}", f"{gpu}/{u1}"}
    assert tree_state(root)[f"{gpu}/{u0}/nvidia/vgpu_params"] == ("file", b"frame_rate_limiter=0\n")
    assert tree_state(root)[f"{gpu}/mdev_supported_types/nvidia-63/available_instances"] == ("file", b"6\n")
    # a second prepare (libvirtd restarted, the devices are there) makes nothing
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", dom)
    assert (r.code, r.err) == (0, "")
    r = hook(cli, monkeypatch, root, "web01", "release", "end", dom)
    assert r.code == 0 and r.err.splitlines()[-1] == f"vgpuadm: domain web01: step 4/4 remove mdev {u1} from " \
                                                      "0000:01:00.0"  # fmt: skip
    assert diff(before, tree_state(root)) == {}


def test_a_start_that_does_not_fit_fails_with_one_line_and_changes_nothing(sim_host, cli, monkeypatch):
    """Three VMs may each ask for a whole P4 (P4-8Q) on a two-P4 host: any two run, the third is refused."""
    root = sim_host("p4")
    doms = {f"vm{i}": on_demand(root, f"vm{i}", UUIDS[i], "P4-8Q") for i in range(3)}
    clean = tree_state(root)
    for name in ("vm0", "vm1"):
        assert hook(cli, monkeypatch, root, name, "prepare", "begin", doms[name]).code == 0
    two = tree_state(root)
    r = hook(cli, monkeypatch, root, "vm2", "prepare", "begin", doms["vm2"])
    assert r.code == 4 and r.out == ""
    assert len(r.err.splitlines()) == 1 and r.err.startswith("vgpuadm: domain vm2: No room for 1 × nvidia-66")
    assert tree_state(root) == two
    assert hook(cli, monkeypatch, root, "vm0", "release", "end", doms["vm0"]).code == 0
    assert hook(cli, monkeypatch, root, "vm2", "prepare", "begin", doms["vm2"]).code == 0
    for name in ("vm1", "vm2"):
        assert hook(cli, monkeypatch, root, name, "release", "end", doms[name]).code == 0
    assert diff(clean, tree_state(root)) == {}


@pytest.mark.process
def test_layout_c_types_the_recorded_vf_at_start_and_clears_it_at_stop(sim_host, cli, monkeypatch):
    root = sim_host("h200-vendor-vfio")
    before = tree_state(root)
    dom = on_demand(root, "train01", UUIDS[0], "nvidia-1426")
    [ref] = xml.parse_hostdevs(dom)
    assert ref.kind == "pci" and ref.key == "0000:18:00.4"
    r = hook(cli, monkeypatch, root, "train01", "prepare", "begin", dom)
    assert (r.code, r.err) == (0, "vgpuadm: domain train01: step 1/1 set vGPU type 1426 (nvidia-1426) on VF "
                                  "0000:18:00.4\n")  # fmt: skip
    vf = "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.4/nvidia/current_vgpu_type"
    assert tree_state(root)[vf] == ("file", b"1426\n")
    assert hook(cli, monkeypatch, root, "train01", "release", "end", dom).code == 0
    assert diff(before, tree_state(root)) == {}


def test_a_second_layout_c_request_gets_another_vf(sim_host):
    root = sim_host("h200-vendor-vfio")
    snap = api.discover(str(root))
    plans = guest.plan_create_many(snap, [(bare("a", UUIDS[0]), 1), (bare("b", UUIDS[1]), 1)], "nvidia-1426",
                                   on_demand=True)  # fmt: skip
    assert [p.added[0].address for p in plans] == ["0000:18:00.4", "0000:18:00.5"]


def test_passthrough_binds_the_group_at_start_and_gives_it_back_at_stop(sim_host, cli, monkeypatch):
    root = sim_host("passthrough")
    before = tree_state(root)
    snap = api.discover(str(root))
    plan, _added, after = guest.plan_passthrough(snap, bare("db02", UUIDS[0]), "0000:65:00.0", {}, on_demand=True)
    assert [s.kind for s in plan.steps] == ["define-domain"]
    [define] = plan.steps
    assert define.attach.count("<hostdev ") == 2 and define.attach.count('managed="no"') == 2
    assert tree_state(root) == before
    dom = defined(snap.host_key, "db02", UUIDS[0], after)
    assert hook(cli, monkeypatch, root, "db02", "prepare", "begin", dom).code == 0
    drivers = {a: f.driver for a, f in api.discover(str(root)).functions.items() if a.startswith("0000:65:00.")}
    assert drivers == {"0000:65:00.0": "vfio-pci", "0000:65:00.1": "vfio-pci"}
    assert hook(cli, monkeypatch, root, "db02", "release", "end", dom).code == 0
    assert diff(before, tree_state(root)) == {}


@pytest.mark.parametrize(("op", "sub"), [("start", "begin"), ("started", "begin"), ("stopped", "end"),
                                          ("migrate", "begin"), ("restore", "begin"), ("reconnect", "begin")])  # fmt: skip
def test_other_operations_do_nothing_and_read_nothing(sim_host, cli, monkeypatch, op, sub):
    root = sim_host("p4")
    before = tree_state(root)
    r = hook(cli, monkeypatch, root, "web01", op, sub, b"not xml at all")
    assert (r.code, r.out, r.err) == (0, "", "")
    assert tree_state(root) == before and not (root / "run" / "vgpuadm" / "lock").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no domain XML on standard input"),
        (b"<domain><name>web01", "domain XML is not well-formed"),
        (b"\xff\xfe", "the domain XML on standard input is not UTF-8"),
        (b"<domain><name>other</name></domain>", "the domain XML on standard input is for 'other', not 'web01'"),
        (b" " * (4 * 1024 * 1024 + 1), "the domain XML on standard input is over 4194304 bytes"),
    ],
)
def test_bad_stdin_is_one_line_and_exit_2(sim_host, cli, monkeypatch, data, message):
    root = sim_host("p4")
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", data)
    assert r.code == 2 and len(r.err.splitlines()) == 1
    assert r.err.startswith(f"vgpuadm: domain web01: {message}")


def test_malformed_request_options_are_refused_before_anything_is_written(sim_host, cli, monkeypatch):
    root = sim_host("p4")
    before = tree_state(root)
    dom = on_demand(root, "web01", UUIDS[0], "nvidia-63").replace('name="policy" value="pack"',
                                                                 'name="policy" value="../../x"')  # fmt: skip
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", dom)
    assert r.code == 5 and r.err.startswith("vgpuadm: domain web01: domain web01: vgpuadm metadata device #0 has a "
                                            "malformed option policy '../../x'")  # fmt: skip
    assert tree_state(root) == before


def test_a_domain_recorded_by_another_host_is_left_alone(sim_host, cli, monkeypatch):
    root = sim_host("p4")
    other = sim_host("t4")
    before = tree_state(root)
    dom = on_demand(root, "web01", UUIDS[0], "nvidia-63")
    dom = dom.replace(f'host="sim:{root}"', f'host="sim:{other}"')
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", dom)
    assert (r.code, r.err) == (0, "") and tree_state(root) == before


def test_a_domain_without_on_demand_requests_is_not_even_locked(sim_host, cli, monkeypatch):
    """Most domains of a host have none: their start takes no lock, reads no sysfs, and is not blocked by a pending
    journal (an interrupted vgpuadm change must not stop unrelated VMs from starting)."""
    root = sim_host("p4")
    (root / "var/lib/vgpuadm").mkdir(parents=True, mode=0o700)
    (root / "var/lib/vgpuadm/journal.json").write_text("{}")
    for op, sub in (("prepare", "begin"), ("release", "end")):
        r = hook(cli, monkeypatch, root, "web01", op, sub, bare("web01", UUIDS[0]))
        assert (r.code, r.out, r.err) == (0, "", "")
    assert not (root / "run" / "vgpuadm" / "lock").exists()
    dom = on_demand(root, "web01", UUIDS[0], "nvidia-63")
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", dom)
    assert r.code != 0 and len(r.err.splitlines()) == 1 and "interrupted" in r.err


def test_a_domain_without_on_demand_requests_has_its_xml_parsed_once(sim_host, cli, monkeypatch):
    """The hook's common case (no on-demand device): libvirt's stdin XML is parsed once, and that one document
    answers the name check and the on-demand question (it was parsed three times)."""
    root = sim_host("p4")
    parsed: list[int] = []
    real = xml.parse_domain
    monkeypatch.setattr(xml, "parse_domain", lambda text: (parsed.append(len(text)), real(text))[1])
    r = hook(cli, monkeypatch, root, "web01", "prepare", "begin", bare("web01", UUIDS[0]))
    assert (r.code, r.out, r.err) == (0, "", "")
    assert len(parsed) == 1


def test_layout_b_places_each_mdev_on_its_own_vf_at_start(sim_host, cli, monkeypatch):
    root = sim_host("a100-mdev-vf")
    before = tree_state(root)
    dom = on_demand(root, "train01", UUIDS[0], "nvidia-472", 2)
    machine = HostRoot(str(root)).machine_id()
    u0, u1 = (device_uuid(machine, UUIDS[0], slot) for slot in (0, 1))
    r = hook(cli, monkeypatch, root, "train01", "prepare", "begin", dom)
    assert r.code == 0 and r.err.splitlines() == [
        f"vgpuadm: domain train01: step 1/2 create mdev {u0} of type nvidia-472 on 0000:41:00.4",
        f"vgpuadm: domain train01: step 2/2 create mdev {u1} of type nvidia-472 on 0000:41:00.5",
    ]
    assert hook(cli, monkeypatch, root, "train01", "release", "end", dom).code == 0
    assert diff(before, tree_state(root)) == {}


def test_an_on_demand_mdev_another_domain_owns_is_never_made_used_or_freed_for_this_one(sim_host, cli, monkeypatch):
    """web02's metadata names web01's on-demand mdev: web02's start is refused (one line, exit 5, nothing written)
    and its stop leaves the mdev to web01, which runs with it (libvirt's status file says so)."""
    root = sim_host("p4")
    web01 = on_demand(root, "web01", UUIDS[0], "nvidia-63")
    [u] = [a.uuid for a in xml.parse_allocations(web01)]
    assert hook(cli, monkeypatch, root, "web01", "prepare", "begin", web01).code == 0
    libvirt_file(root, web01, running=True)
    web02 = web01.replace("<name>web01</name>", "<name>web02</name>").replace(UUIDS[0], UUIDS[1])
    libvirt_file(root, web02, running=False)
    running = tree_state(root)
    r = hook(cli, monkeypatch, root, "web02", "prepare", "begin", web02)
    assert (r.code, r.out) == (5, "")
    assert r.err == (f"vgpuadm: domain web02: its vgpuadm metadata names {u} as on-demand, and domain web01 owns it "
                     "(a device is made, freed and rebound only for the domain that owns it; remove the request "
                     f"(vgpuadm destroy --vm web02 --uuid {u}))\n")  # fmt: skip
    r = hook(cli, monkeypatch, root, "web02", "release", "end", web02)
    assert (r.code, r.err) == (0, f"vgpuadm: domain web02: left {u} alone: domain web01 owns it\n")
    assert tree_state(root) == running
    # once web01 has stopped (its status file gone) and freed it, the mdev is nobody's: web02 may make it
    (root / "run/libvirt/qemu/web01.xml").unlink()
    assert hook(cli, monkeypatch, root, "web01", "release", "end", web01).code == 0
    assert hook(cli, monkeypatch, root, "web02", "prepare", "begin", web02).code == 0


def test_a_gpu_another_domain_owns_is_never_rebound_for_an_on_demand_passthrough(sim_host, cli, monkeypatch):
    """db02 asks for 0000:65:00.0 on demand. A stopped db03 asking for the same GPU on demand does not own it (only
    one runs at a time); db01 passing it through for good, or running with it, does: db02's start is refused and
    its stop does not give the GPU back to the host driver under db01."""
    root = sim_host("passthrough")
    snap = api.discover(str(root))
    _plan, _added, after = guest.plan_passthrough(snap, bare("db02", UUIDS[1]), "0000:65:00.0", {}, on_demand=True)
    db02 = defined(snap.host_key, "db02", UUIDS[1], after)
    libvirt_file(root, db02.replace("<name>db02</name>", "<name>db03</name>").replace(UUIDS[1], UUIDS[2]),
                 running=False)  # fmt: skip
    gpu = "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x65' " \
          "slot='0x00' function='0x0'/></source></hostdev>"  # fmt: skip
    db01 = domain("db01", UUIDS[0], devices=gpu)
    libvirt_file(root, db01, running=False)
    before = tree_state(root)
    r = hook(cli, monkeypatch, root, "db02", "prepare", "begin", db02)
    assert r.code == 5 and r.err.startswith("vgpuadm: domain db02: its vgpuadm metadata names 0000:65:00.0 as "
                                            "on-demand, and domain db01 owns it (")  # fmt: skip
    assert tree_state(root) == before
    (root / "etc/libvirt/qemu/db01.xml").unlink()
    assert hook(cli, monkeypatch, root, "db02", "prepare", "begin", db02).code == 0
    bound = tree_state(root)
    libvirt_file(root, db01, running=True)  # db01 now runs with the group db02's start bound
    r = hook(cli, monkeypatch, root, "db02", "release", "end", db02)
    assert (r.code, r.err) == (0, "vgpuadm: domain db02: left 0000:65:00.0 alone: domain db01 owns it\n")
    assert tree_state(root) == bound


def _gpu_instances(cli, root: Path) -> list[tuple[str, int, tuple[str, ...]]]:
    r = cli("--root", str(root), "mig", "instances", "--json")
    assert r.code == 0, r.err
    return sorted((i["name"], i["start"], tuple(i["vgpus"])) for i in json.loads(r.out))


@pytest.mark.process
def test_an_on_demand_mig_backed_vgpu_gets_its_gpu_instance_at_start_and_gives_it_back_at_stop(
    sim_host, cli, monkeypatch
):
    """Layout C (H200, MIG mode off): the start turns MIG mode on and makes the GPU instance, as `create` does
    (plan/devices.py), before typing the VF (it failed with EIO: a MIG-backed type needs a free instance); the record
    of the instance made (0600) lets the stop destroy exactly that one."""
    root = sim_host("h200-mig")
    dom = on_demand(root, "m1", UUIDS[0], "H200X-1-18C")
    [vf] = [a.address for a in xml.parse_allocations(dom)]
    r = hook(cli, monkeypatch, root, "m1", "prepare", "begin", dom)
    assert (r.code, r.out) == (0, "")
    assert r.err.splitlines() == [
        "vgpuadm: domain m1: step 1/4 enable MIG mode on GPU 0000:18:00.0 (nvidia-smi -i 0)",
        "vgpuadm: domain m1: step 2/4 create MIG GPU instance 1g.18gb (profile 19) at slot 6 on 0000:18:00.0",
        f"vgpuadm: domain m1: step 3/4 set vGPU type 1414 (nvidia-1414) on VF {vf}",
        "vgpuadm: domain m1: step 4/4 write /var/lib/vgpuadm/on-demand-mig.json",
    ]
    assert _gpu_instances(cli, root) == [("1g.18gb", 6, (vf,))]
    record = root / "var/lib/vgpuadm/on-demand-mig.json"
    assert json.loads(record.read_text()) == {vf: "19:6"} and record.stat().st_mode & 0o777 == 0o600
    r = hook(cli, monkeypatch, root, "m1", "release", "end", dom)
    assert r.code == 0 and r.err.splitlines() == [
        f"vgpuadm: domain m1: step 1/3 clear vGPU type 1414 (nvidia-1414) from VF {vf}",
        "vgpuadm: domain m1: step 2/3 destroy MIG GPU instance 1 (1g.18gb at slot 6) on 0000:18:00.0",
        "vgpuadm: domain m1: step 3/3 remove /var/lib/vgpuadm/on-demand-mig.json",
    ]
    assert _gpu_instances(cli, root) == [] and not record.exists()


@pytest.mark.process
def test_an_on_demand_mdev_on_a_mig_vf_uses_a_hand_made_instance_and_leaves_it(sim_host, cli, monkeypatch):
    """Layout B (A100D, MIG on): with a GPU instance made by hand the start makes none and the stop destroys none;
    without one, the start makes it (mdevs on VFs need it as layout C does) and the stop destroys it."""
    root = sim_host("a100d-mig")
    assert cli("--root", str(root), "mig", "enable", "--gpu", "0000:41:00.0").code == 0
    assert subprocess.run([str(root / "usr/bin/nvidia-smi"), "-r", "-i", "0"], capture_output=True).returncode == 0
    dom = on_demand(root, "m1", UUIDS[0], "A100D-1-10C")
    [u] = [a.uuid for a in xml.parse_allocations(dom)]
    r = hook(cli, monkeypatch, root, "m1", "prepare", "begin", dom)
    assert r.code == 0 and r.err.splitlines()[:2] == [
        "vgpuadm: domain m1: step 1/3 create MIG GPU instance 1g.10gb (profile 19) at slot 6 on 0000:41:00.0",
        f"vgpuadm: domain m1: step 2/3 create mdev {u} of type nvidia-607 on 0000:41:00.4",
    ]
    r = hook(cli, monkeypatch, root, "m1", "release", "end", dom)
    assert r.code == 0 and r.err.splitlines()[1:] == [
        "vgpuadm: domain m1: step 2/3 destroy MIG GPU instance 1 (1g.10gb at slot 6) on 0000:41:00.0",
        "vgpuadm: domain m1: step 3/3 remove /var/lib/vgpuadm/on-demand-mig.json",
    ]
    assert _gpu_instances(cli, root) == []
    made = cli("--root", str(root), "mig", "create", "--gpu", "0000:41:00.0", "--profile", "1g.10gb")
    assert made.code == 0, made.err
    r = hook(cli, monkeypatch, root, "m1", "prepare", "begin", dom)
    assert (r.code, r.err) == (0, f"vgpuadm: domain m1: step 1/1 create mdev {u} of type nvidia-607 on 0000:41:00.4\n")
    r = hook(cli, monkeypatch, root, "m1", "release", "end", dom)
    assert (r.code, r.err) == (0, f"vgpuadm: domain m1: step 1/1 remove mdev {u} from 0000:41:00.4\n")
    assert _gpu_instances(cli, root) == [("1g.10gb", 6, ())]


def test_a_domain_growing_its_layout_c_request_gets_another_vf_than_the_one_it_records(sim_host):
    """`create --on-demand --total 2` on a domain whose request already names a VF (untyped until the domain starts,
    so the host shows it free): the second device is another VF, never the one the domain records."""
    root = sim_host("h200-vendor-vfio")
    snap = api.discover(str(root))
    dom = on_demand(root, "a", UUIDS[0], "nvidia-1426")
    users = Domains.of(snap.host_key, [("a", UUIDS[0], dom, False, "")]).users()
    _plan, added, after = guest.plan_create(snap, dom, "nvidia-1426", 2, on_demand=True, taken=users)
    assert [a.address for a in after] == ["0000:18:00.4", "0000:18:00.5"]
    assert [a.address for a in added] == ["0000:18:00.5"]
