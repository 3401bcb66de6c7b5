"""`vgpuadm migrate run` on a running VM: the live move between two simulated hosts (each its own process with
libvirt's embedded driver under its root, the target reached as `--target-root DIR`), the real CLI and planners on
both hosts, the simulated kernel, real libvirt definitions.

Two things are faked in the source's process, because nothing on this machine can have them: this kernel has no
VFIO/mdev, so no QEMU guest can run holding a vGPU, and libvirt's embedded driver cannot migrate (one embedded root
per process: the source's process cannot open the target's). So (1) the source's domain scan says the VM runs
(Session._scan, the one place vgpuadm reads a domain's state for its decisions), and (2) libvirt's migration call
itself (virDomain.migrate3, under the real VirtConn.migrate_live: its flags and parameters are recorded as libvirt
got them) does what libvirt does when it succeeds — the target keeps the persistent XML it was given, the source
undefines the domain — or fails as libvirt fails. The real migration through two real daemons is
tests/libvirt/test_live_migration.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import libvirt

from tests.libvirt.embedded_host import REPO, _env, allocations, define, domain_xml, hostdev_keys, mdevs, vgpuadm
from tests.libvirt.test_migrate_run import _hosts, _state
from vgpuadm.executor import CRASH_HOOK
from vgpuadm.schemas import validate
from vgpuadm.virt import xml
from vgpuadm.virt.conn import embed_uri

_SOURCE = """
import json, os, subprocess, sys
import libvirt
from vgpuadm.cli.app import main
from vgpuadm.ops.session import Session
from vgpuadm.virt.conn import VirtConn

vm, record, target_uri = sys.argv[1:4]
scan = Session._scan

def _scan(self):
    for name, uuid, text, running, meta in scan(self):
        yield name, uuid, text, running or name == vm, meta

Session._scan = _scan
real_conn = VirtConn.conn
VirtConn.conn = property(lambda self: "target" if self.uri == target_uri else real_conn.fget(self))
real_domain = VirtConn.domain

class Moving:
    def __init__(self, dom):
        self.dom = dom
    def __getattr__(self, name):
        return getattr(self.dom, name)
    def migrate3(self, dconn, params, flags):
        with open(record, "w") as f:
            json.dump({"dconn": dconn, "params": params, "flags": flags}, f)
        if os.environ.get("MIGRATE3_FAILS"):
            raise libvirt.libvirtError(os.environ["MIGRATE3_FAILS"])
        define = "import sys; from vgpuadm.virt.conn import VirtConn; VirtConn(sys.argv[1]).define(sys.stdin.read())"
        subprocess.run([sys.executable, "-c", define, target_uri], input=params[libvirt.VIR_MIGRATE_PARAM_PERSIST_XML],
                       text=True, check=True)
        self.dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)

VirtConn.domain = lambda self, name: Moving(real_domain(self, name)) if name == vm else real_domain(self, name)
sys.argv = ["vgpuadm", *sys.argv[4:]]
main()
"""

LIVE_FLAGS = libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE


def _live(src: Path, dst: Path, vm: str, *args: str, env: dict[str, str] | None = None):
    """`vgpuadm --root SRC migrate run --vm VM --target-root DST ARGS` with the VM running (see the docstring);
    returns the result and what libvirt's migrate3 was given (None: not called)."""
    import subprocess

    record = src.parent / f"migrate3-{vm}.json"
    record.unlink(missing_ok=True)
    argv = [sys.executable, "-c", _SOURCE, vm, str(record), embed_uri(str(dst)), "--root", str(src), "migrate",
            "run", "--vm", vm, "--target-root", str(dst), *args]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(env), timeout=300, check=False, cwd=REPO)
    called = json.loads(record.read_text()) if record.exists() else None
    return proc, called


def _no_stamp(text: str) -> str:
    return re.sub(r' changed="[^"]*"', "", text)


def test_a_running_vm_moves_live_with_its_devices_made_on_the_target(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "lv-web01")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "lv-web01", "--total", "2",
                   "--param", "frame_rate_limiter=0").code == 0  # fmt: skip
    first, second = [a.uuid for a in allocations(src, "lv-web01")]
    before = (_state(src), _state(dst))
    there = f"the simulated host {dst}"
    dry, called = _live(src, dst, "lv-web01", "--dry-run")
    assert (dry.returncode, dry.stderr, called) == (0, "", None), dry.stderr
    assert (_state(src), _state(dst)) == before  # a dry run changes neither host
    assert dry.stdout.splitlines() == [
        f"would move domain lv-web01 to {there}:",
        "  this host: step 1/1 record domain lv-web01's devices as outgoing",
        f"  {there}: step 1/6 define domain lv-web01 (incoming)",
        f"  {there}: step 2/6 create mdev {first} of type nvidia-63 on 0000:01:00.0",
        f'  {there}: step 3/6 set vgpu_params of mdev {first} to "frame_rate_limiter=0"',
        f"  {there}: step 4/6 create mdev {second} of type nvidia-63 on 0000:01:00.0",
        f'  {there}: step 5/6 set vgpu_params of mdev {second} to "frame_rate_limiter=0"',
        f"  {there}: step 6/6 attach mdev {first} (nvidia-63), mdev {second} (nvidia-63) to domain lv-web01, and "
        "record 2 vgpuadm device(s) in its metadata",
        f"  this host: move running domain lv-web01 live to {there} (libvirt: live, post-copy off, persistent "
        "there, undefined here)",
        f"  this host: step 1/4 clear vgpu_params of mdev {first}",
        f"  this host: step 2/4 remove mdev {first} from 0000:01:00.0",
        f"  this host: step 3/4 clear vgpu_params of mdev {second}",
        f"  this host: step 4/4 remove mdev {second} from 0000:01:00.0",
        f"  {there}: record domain lv-web01's devices as settled (the move is over)",
    ]
    source_xml = domain_xml(src, "lv-web01")
    r, called = _live(src, dst, "lv-web01")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout.splitlines() == [
        f"moved domain lv-web01 to {there}:",
        *dry.stdout.splitlines()[1:13],
        f"  {there}: step 1/1 record domain lv-web01's devices as settled (the move is over)",
    ]
    # libvirt was asked for a live, persistent move that undefines the source, never post-copy, over the
    # connection to the target's libvirt; both definitions name the target's devices and its metadata
    assert called["dconn"] == "target"
    assert called["flags"] == LIVE_FLAGS
    assert not called["flags"] & libvirt.VIR_MIGRATE_POSTCOPY
    params = called["params"]
    assert sorted(params) == sorted([libvirt.VIR_MIGRATE_PARAM_DEST_XML, libvirt.VIR_MIGRATE_PARAM_PERSIST_XML])
    target_host = xml.metadata_host(domain_xml(dst, "lv-web01"))
    assert target_host != xml.metadata_host(source_xml)
    for sent in (params[libvirt.VIR_MIGRATE_PARAM_DEST_XML], params[libvirt.VIR_MIGRATE_PARAM_PERSIST_XML]):
        assert xml.metadata_host(sent) == target_host
        assert [(a.uuid, a.params, a.moving) for a in xml.parse_allocations(sent)] == [
            (first, "frame_rate_limiter=0", "incoming"),
            (second, "frame_rate_limiter=0", "incoming"),
        ]
        assert [(r.key, r.guest_address) for r in xml.parse_hostdevs(sent)] == [
            (r.key, r.guest_address) for r in xml.parse_hostdevs(source_xml)
        ]
    # both hosts agree: the domain and its devices are the target's, the move is over; nothing is left here
    assert (_state(src)[1], mdevs(src)) == ({}, [])
    assert mdevs(dst) == sorted([first, second])
    assert hostdev_keys(dst, "lv-web01") == [first, second]
    assert [(a.uuid, a.type_id, a.params, a.extra) for a in allocations(dst, "lv-web01")] == [
        (first, "nvidia-63", "frame_rate_limiter=0", {"display": "off"}),
        (second, "nvidia-63", "frame_rate_limiter=0", {"display": "off"}),
    ]
    assert xml.metadata_host(domain_xml(dst, "lv-web01")) == target_host
    devices = json.loads(vgpuadm(src, "devices", "--json").out)
    assert not [d for d in devices if d.get("vm") or d.get("domain")]


def test_a_vf_taken_on_the_target_is_rewritten_to_the_one_it_made(tmp_path: Path) -> None:
    """Layout C: the source's VF is taken on the target, which gives the domain its next VF; the hostdev libvirt
    is given names that VF, at the guest address the source's had."""
    src, dst = _hosts(tmp_path, "h200-vendor-vfio", "lv-h")
    define(dst, "lv-other")
    assert vgpuadm(src, "create", "--type", "nvidia-1420", "--vm", "lv-h").code == 0
    assert vgpuadm(dst, "create", "--type", "nvidia-1420", "--vm", "lv-other").code == 0
    (vf,) = hostdev_keys(src, "lv-h")
    assert hostdev_keys(dst, "lv-other") == [vf]  # the same VF, taken there
    source_xml = domain_xml(src, "lv-h")
    r, called = _live(src, dst, "lv-h", "--json")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    doc = json.loads(r.stdout)
    validate("migrate-step", doc)
    assert (doc["state"], doc["changed"], doc["dry_run"]) == ("moved", True, False)
    (moved,) = allocations(dst, "lv-h")
    assert [(d["address"], d["options"]) for d in doc["devices"]] == [(moved.address, {})]
    assert moved.address != vf
    for sent in called["params"].values():
        (ref,) = xml.parse_hostdevs(sent)
        assert (ref.key, ref.guest_address) == (moved.address, xml.parse_hostdevs(source_xml)[0].guest_address)
    assert hostdev_keys(dst, "lv-h") == [moved.address]
    assert (moved.mode, moved.type_id, moved.extra.get("migration")) == ("vf", "nvidia-1420", None)
    assert _state(src)[1] == {}


def test_a_migration_libvirt_refuses_leaves_both_hosts_as_they_were(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "lv-fail")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "lv-fail").code == 0
    before = (_state(src), _state(dst))
    reason = "operation failed: migration out job: unexpectedly failed"
    r, called = _live(src, dst, "lv-fail", env={"MIGRATE3_FAILS": reason})
    assert called is not None and called["flags"] == LIVE_FLAGS
    assert (r.returncode, r.stdout) == (8, "")  # libvirt's error
    uri = embed_uri(str(dst))
    assert r.stderr.splitlines() == [
        f"error: moving 'lv-fail' to {uri}: {reason}",
        "hint: lv-fail runs here as before and the target's part is undone: fix what libvirt says, run this again",
    ]
    assert (_state(src), _state(dst)) == before  # the target's domain and mdev are gone, the mark here too
    assert allocations(src, "lv-fail")[0].extra == {"display": "off"}


def test_offline_keeps_a_running_vm_cold_and_refuses_it(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "lv-off")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "lv-off").code == 0
    before = (_state(src), _state(dst))
    r, called = _live(src, dst, "lv-off", "--offline")
    assert (r.returncode, r.stdout, called) == (5, "", None)
    assert r.stderr.splitlines() == [
        "error: domain lv-off is running: --offline moves a VM with its domain stopped (cold)",
        "hint: shut it down (virsh shutdown lv-off) and run this again, or drop --offline to move it live",
    ]
    assert (_state(src), _state(dst)) == before


def test_a_vm_whose_params_forbid_a_live_move_is_refused_while_it_runs(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "lv-uvm")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "lv-uvm", "--param", "enable_uvm=1").code == 0
    (u0,) = mdevs(src)
    before = (_state(src), _state(dst))
    r, called = _live(src, dst, "lv-uvm")
    assert (r.returncode, r.stdout, called) == (5, "", None)
    assert r.stderr.splitlines() == [
        f"error: domain lv-uvm is running and moves only stopped: mdev {u0} (nvidia-63): its vgpu_params enable "
        "enable_uvm: NVIDIA allows no live migration then",
        "hint: shut it down (virsh shutdown lv-uvm) and run this again (a cold move); see `vgpuadm migrate check` "
        "for each device",
    ]
    assert (_state(src), _state(dst)) == before


def test_a_source_killed_after_the_guest_left_is_recovered_on_both_hosts(tmp_path: Path) -> None:
    """After `migrate prepare`, `migrate run` has only the live migration and the freeing of this host's devices
    to do; killed right after the first freeing step (the executor's crash hook), the domain is the target's,
    which still records it incoming: there `migrate finish` ends the move; here `recover` rolls the half-done
    freeing back and `reconcile --fix` frees the devices no domain owns."""
    src, dst = _hosts(tmp_path, "p4", "lv-kill")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "lv-kill").code == 0
    (u0,) = mdevs(src)
    prepared = vgpuadm(src, "migrate", "prepare", "--vm", "lv-kill", "--target-root", str(dst))
    assert prepared.code == 0, prepared.err
    r, called = _live(src, dst, "lv-kill", env={CRASH_HOOK: "1"})
    assert r.returncode != 0 and called is not None
    assert (_state(src)[1], mdevs(src), _state(src)[2]) == ({}, [], True)  # the mdev removed, the journal pending
    assert [a.moving for a in allocations(dst, "lv-kill")] == ["incoming"]
    assert vgpuadm(src, "recover").code == 0
    assert mdevs(src) == [u0]  # put back, owned by no domain here
    fixed = vgpuadm(src, "reconcile", "--fix")
    assert fixed.code == 0, fixed.err
    assert (mdevs(src), _state(src)) == ([], ([], {}, False))
    r = vgpuadm(dst, "migrate", "finish", "--vm", "lv-kill")
    assert (r.code, r.err) == (0, ""), r.err
    assert r.out.splitlines() == [
        "finished the move of domain lv-kill:",
        "  this host: step 1/1 record domain lv-kill's devices as settled (the move is over)",
    ]
    assert (mdevs(dst), [a.moving for a in allocations(dst, "lv-kill")]) == ([u0], [None])


def test_a_live_moves_data_address_and_target_libvirt_are_refused_where_they_enter(tmp_path: Path) -> None:
    """--migrate-uri and --target-connect are checked before anything is read or changed on either host."""
    src, dst = _hosts(tmp_path, "p4", "lv-args")
    before = (_state(src), _state(dst))
    refused = [
        (["--migrate-uri", "tcp://-oProxy/x"], "error: --migrate-uri 'tcp://-oProxy/x' is not tcp://HOST[:PORT]"),
        (["--migrate-uri", "rdma://10.0.0.2"], "error: --migrate-uri 'rdma://10.0.0.2' is not tcp://HOST[:PORT]"),
        (
            ["--migrate-uri", "tcp://10.0.0.2:99999"],
            "error: --migrate-uri 'tcp://10.0.0.2:99999' is not tcp://HOST[:PORT]",
        ),
        (["--target-connect", "xen:///system"], "error: --target-connect 'xen:///system' is not a libvirt URI"),
        (["--target-connect", "qemu:///system x"], "error: --target-connect 'qemu:///system x' is not a libvirt URI"),
    ]
    for args, error in refused:
        r = vgpuadm(src, "migrate", "run", "--vm", "lv-args", "--target-root", str(dst), *args)
        assert (r.code, r.out, r.err.splitlines()[0]) == (2, "", error), r.err
    r = vgpuadm(src, "migrate", "run", "--vm", "lv-args", "--to", "qemu+ssh://gpu2/system", "--target-connect",
                "qemu:///system")  # fmt: skip
    assert (r.code, r.err.splitlines()) == (2, [
        "error: --target-connect names a simulated target's libvirt: it goes with --target-root",
        "hint: a real target's libvirt is the --to URI itself",
    ])  # fmt: skip
    assert (_state(src), _state(dst)) == before
