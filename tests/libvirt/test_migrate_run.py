"""`vgpuadm migrate prepare|run|abort`: a shut-off VM moved cold between two simulated hosts, each with libvirt's
embedded driver under its root and its own vgpuadm process (libvirt allows one embedded root per process; the target
is reached as `--target-root DIR`, its vgpuadm run with `--root DIR`, as `ssh HOST vgpuadm` runs it on another
machine). No mocks: the real CLI on both hosts, the simulated kernel (its fault injection for a refused write, the
executor's crash hook for a kill), real libvirt."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.libvirt.embedded_host import (
    EMBED_ETC,
    allocations,
    define,
    define_xml,
    domain_xml,
    hostdev_keys,
    mdevs,
    vgpuadm,
)
from vgpuadm.executor import CRASH_HOOK
from vgpuadm.schemas import validate
from vgpuadm.sim.profiles import build


def _hosts(tmp_path: Path, profile: str, vm: str) -> tuple[Path, Path]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(profile, str(src))
    build(profile, str(dst))
    define(src, vm)
    return src, dst


def _state(root: Path) -> tuple[list[str], dict[str, str], bool]:
    """What a test compares before and after: the host's mdevs, its domains' persistent XML (but the time vgpuadm
    last changed its metadata: a mark put on and taken off again is a change), a pending journal."""
    etc = root / EMBED_ETC
    xmls = (
        {p.name: re.sub(r' changed="[^"]*"', "", p.read_text()) for p in sorted(etc.glob("*.xml"))}
        if etc.is_dir()
        else {}
    )
    return mdevs(root), xmls, (root / "var/lib/vgpuadm/journal.json").exists()


def _run(src: Path, dst: Path, vm: str, *args: str, env: dict[str, str] | None = None):
    return vgpuadm(src, "migrate", "run", "--vm", vm, "--target-root", str(dst), *args, env=env)


def test_a_shut_off_vm_with_mdevs_moves_cold_keeping_its_uuids(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "mv-web01")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-web01", "--total", "2",
                   "--param", "frame_rate_limiter=0").code == 0  # fmt: skip
    u0, u1 = mdevs(src)
    before = (_state(src), _state(dst))
    dry = _run(src, dst, "mv-web01", "--dry-run")
    assert (dry.code, dry.err) == (0, ""), dry.err
    assert (_state(src), _state(dst)) == before  # a dry run changes neither host
    there = f"the simulated host {dst}"
    first, second = [a.uuid for a in allocations(src, "mv-web01")]  # in slot order
    assert dry.out.splitlines() == [
        f"would move domain mv-web01 to {there}:",
        "  this host: step 1/1 record domain mv-web01's devices as outgoing",
        f"  {there}: step 1/6 define domain mv-web01 (incoming)",
        f"  {there}: step 2/6 create mdev {first} of type nvidia-63 on 0000:01:00.0",
        f'  {there}: step 3/6 set vgpu_params of mdev {first} to "frame_rate_limiter=0"',
        f"  {there}: step 4/6 create mdev {second} of type nvidia-63 on 0000:01:00.0",
        f'  {there}: step 5/6 set vgpu_params of mdev {second} to "frame_rate_limiter=0"',
        f"  {there}: step 6/6 attach mdev {first} (nvidia-63), mdev {second} (nvidia-63) to domain mv-web01, and "
        "record 2 vgpuadm device(s) in its metadata",
        "  this host: step 1/5 undefine domain mv-web01 (moved to " + there + ")",
        f"  this host: step 2/5 clear vgpu_params of mdev {first}",
        f"  this host: step 3/5 remove mdev {first} from 0000:01:00.0",
        f"  this host: step 4/5 clear vgpu_params of mdev {second}",
        f"  this host: step 5/5 remove mdev {second} from 0000:01:00.0",
        f"  {there}: record domain mv-web01's devices as settled (the move is over)",
    ]
    r = _run(src, dst, "mv-web01", "--json")
    assert (r.code, r.err) == (0, ""), r.err
    doc = json.loads(r.out)
    validate("migrate-step", doc)
    assert (doc["state"], doc["changed"], doc["dry_run"]) == ("moved", True, False)
    assert doc["steps"][-1] == f"{there}: step 1/1 record domain mv-web01's devices as settled (the move is over)"
    # the source: the domain is gone and so are its vGPUs; the target: the same UUIDs, recorded as its own
    assert (mdevs(src), _state(src)[1]) == ([], {})
    assert mdevs(dst) == sorted([u0, u1])
    assert sorted(hostdev_keys(dst, "mv-web01")) == sorted([u0, u1])
    moved = allocations(dst, "mv-web01")
    assert [(a.uuid, a.type_id, a.params, a.extra) for a in moved] == [
        (first, "nvidia-63", "frame_rate_limiter=0", {"display": "off"}),
        (second, "nvidia-63", "frame_rate_limiter=0", {"display": "off"}),
    ]
    show = json.loads(vgpuadm(dst, "show", "--vm", "mv-web01", "--json").out)
    assert [(d["id"], d["present"]) for d in show["devices"]] == [(first, True), (second, True)]


def test_a_vendor_vfio_vf_moves_to_a_vf_of_the_target(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "h200-vendor-vfio", "mv-h")
    assert vgpuadm(src, "create", "--type", "nvidia-1420", "--vm", "mv-h").code == 0
    (vf,) = hostdev_keys(src, "mv-h")
    r = _run(src, dst, "mv-h")
    assert (r.code, r.err) == (0, ""), r.err
    assert _state(src)[1] == {}
    (moved,) = allocations(dst, "mv-h")
    assert (moved.mode, moved.type_id, moved.address, moved.extra.get("migration")) == ("vf", "nvidia-1420", vf, None)
    assert hostdev_keys(dst, "mv-h") == [vf]
    devices = json.loads(vgpuadm(src, "devices", "--json").out)
    assert not [d for d in devices if d.get("vm") or d.get("domain")]  # nothing of the VM's is left on the source


def test_a_passed_through_gpu_is_refused_with_the_reason_and_nothing_changes(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "passthrough", "mv-pt")
    gpu = json.loads(vgpuadm(src, "gpus", "--json").out)[0]["address"]
    assert vgpuadm(src, "passthrough", "--gpu", gpu, "--vm", "mv-pt").code == 0
    before = (_state(src), _state(dst))
    r = _run(src, dst, "mv-pt")
    assert (r.code, r.out) == (5, "")
    assert r.err.splitlines() == [
        f"error: domain mv-pt: a GPU passed through whole ({gpu}) is not moved by vgpuadm: release it (vgpuadm "
        f"release --gpu {gpu}), move the VM, then pass a GPU through on the target (vgpuadm passthrough)",
        "hint: see `vgpuadm migrate check` for each device",
    ]
    assert (_state(src), _state(dst)) == before


def test_no_room_on_the_target_is_refused_before_anything_changes(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "mv-full")
    define(dst, "mv-other")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-full").code == 0
    assert vgpuadm(dst, "create", "--type", "nvidia-63", "--vm", "mv-other", "--total", "16").code == 0
    (u0,) = mdevs(src)
    before = (_state(src), _state(dst))
    r = _run(src, dst, "mv-full")
    assert (r.code, r.out) == (4, "")
    assert r.err.splitlines() == [
        f"error: domain mv-full cannot move to the simulated host {dst}: mdev {u0} (nvidia-63): no free nvidia-63 "
        "on the target",
        "hint: see `vgpuadm migrate check` for each device",
    ]
    assert (_state(src), _state(dst)) == before


def test_a_write_the_target_refuses_leaves_both_hosts_as_they_were(tmp_path: Path) -> None:
    """The target's kernel refuses the mdev (ENOSPC, injected): its plan rolls back (the domain it defined goes),
    and the source drops its outgoing mark."""
    src, dst = _hosts(tmp_path, "p4", "mv-enospc")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-enospc").code == 0
    before = (_state(src), _state(dst))
    assert vgpuadm(dst, "sim", "fail", str(dst), "*/nvidia-63/create", "ENOSPC").code == 0
    r = _run(src, dst, "mv-enospc")
    assert (r.code, r.out) == (1, "")
    error = r.err.splitlines()[0]
    assert error.startswith(f"error: vgpuadm migrate incoming on the simulated host {dst} failed: step 2/3 create ")
    assert (_state(src), _state(dst)) == before
    assert allocations(src, "mv-enospc")[0].extra == {"display": "off"}  # no mark left


def test_a_move_stopped_after_prepare_shows_on_both_hosts_and_goes_on_or_back(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "mv-half")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-half").code == 0
    (u0,) = mdevs(src)
    before = (_state(src), _state(dst))
    r = vgpuadm(src, "migrate", "prepare", "--vm", "mv-half", "--target-root", str(dst))
    assert (r.code, r.err) == (0, ""), r.err
    assert r.out.splitlines()[0] == f"prepared domain mv-half on the simulated host {dst}:"
    # a crash here (the source's vgpuadm killed between the hosts' parts) leaves this: each host says it
    assert [a.extra["migration"] for a in allocations(src, "mv-half")] == ["outgoing"]
    assert [a.extra["migration"] for a in allocations(dst, "mv-half")] == ["incoming"]
    assert mdevs(dst) == [u0]
    for root, state in ((src, "outgoing"), (dst, "incoming")):
        show = json.loads(vgpuadm(root, "show", "--vm", "mv-half", "--json").out)
        assert (show["moving"], [d["options"]["migration"] for d in show["devices"]]) == (state, [state])
        shown = vgpuadm(root, "show", "--vm", "mv-half").out.splitlines()
        assert shown[2] == f"moving: {state} (vgpuadm migrate: `migrate run` again goes on, `migrate abort` goes back)"
        inventory = json.loads(vgpuadm(root, "inventory", "--json").out)
        validate("inventory-v1", inventory)
        assert [(d["id"], d["domain"], d["moving"]) for d in inventory["devices"] if "moving" in d] == [
            (u0, "mv-half", state)
        ]
        table = vgpuadm(root, "inventory").out
        assert f"mv-half (stopped: reserved; {state}: vgpuadm migrate)" in table, table
        r = vgpuadm(root, "reconcile", "--fix")  # the devices are owned: no leak; the move is said
        assert r.out.splitlines() == ["journal: no interrupted change", "no leaked devices"]
        assert r.err.splitlines() == [
            f"warning: domain mv-half is {state}: its move to or from another host stopped half-way (`vgpuadm migrate "
            "run --vm mv-half` on the source goes on, `vgpuadm migrate abort --vm mv-half` goes back)"
        ]
        doc = json.loads(vgpuadm(root, "reconcile", "--json").out)
        validate("reconcile", doc)
        assert doc["moving"] == [{"domain": "mv-half", "state": state}]
    r = vgpuadm(src, "migrate", "abort", "--vm", "mv-half", "--target-root", str(dst))
    assert (r.code, r.err) == (0, ""), r.err
    assert r.out.splitlines() == [
        "aborted the move of domain mv-half:",
        f"  the simulated host {dst}: step 1/2 undefine domain mv-half (the move is aborted)",
        f"  the simulated host {dst}: step 2/2 remove mdev {u0} from 0000:01:00.0",
        "  this host: step 1/1 record domain mv-half's devices as settled (the move is over)",
    ]
    assert (_state(src), _state(dst)) == before
    # prepared again, then run: it goes on from where it stands
    assert vgpuadm(src, "migrate", "prepare", "--vm", "mv-half", "--target-root", str(dst)).code == 0
    r = _run(src, dst, "mv-half")
    assert (r.code, r.err) == (0, ""), r.err
    assert [line for line in r.out.splitlines() if "incoming" in line or "outgoing" in line] == []
    assert (_state(src)[1], mdevs(src), mdevs(dst)) == ({}, [], [u0])
    assert allocations(dst, "mv-half")[0].extra == {"display": "off"}


def test_a_target_killed_mid_way_is_recovered_and_the_source_stays(tmp_path: Path) -> None:
    """The target's vgpuadm dies right after its second step (the executor's crash hook, in both hosts'
    environment: the source's own plans have one step and never reach it): the source drops its mark; the target's
    `vgpuadm recover` rolls its half-done plan back."""
    src, dst = _hosts(tmp_path, "p4", "mv-crash")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-crash").code == 0
    before = (_state(src), _state(dst))
    r = _run(src, dst, "mv-crash", env={CRASH_HOOK: "2"})
    assert (r.code, r.out) == (1, ""), r.err
    assert r.err.splitlines()[0].startswith(f"error: vgpuadm migrate incoming on the simulated host {dst} failed: ")
    assert _state(src) == before[0]
    assert _state(dst)[2]  # the target's journal is pending
    assert vgpuadm(dst, "recover").code == 0
    assert (_state(src), _state(dst)) == before


def test_hostdevs_vgpuadm_does_not_record_keep_the_vm_here(tmp_path: Path) -> None:
    """A hostdev attached by hand names a device of this host: the definition the target would get must not carry
    it (the source refuses; the target refuses a definition with any hostdev, whoever sends it)."""
    src, dst = _hosts(tmp_path, "p4", "mv-hand")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-hand").code == 0
    nic = ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x07' "
           "slot='0x00' function='0x0'/></source></hostdev>")  # fmt: skip
    text = domain_xml(src, "mv-hand").replace("</devices>", nic + "</devices>")
    define_xml(src, text)
    before = (_state(src), _state(dst))
    r = _run(src, dst, "mv-hand")
    assert (r.code, r.out) == (5, "")
    assert r.err.splitlines() == [
        "error: domain mv-hand has hostdevs vgpuadm does not record (0000:07:00.0): they name this host's devices",
        "hint: detach them (virsh edit mv-hand), or record them with `vgpuadm adopt --vm mv-hand`, and run this again",
    ]
    assert (_state(src), _state(dst)) == before
    definition = tmp_path / "mv-hand.xml"
    definition.write_text(re.sub(r"<metadata>.*</metadata>", "", text, flags=re.S))
    r = vgpuadm(dst, "migrate", "incoming", "--vm", "mv-hand", "--type", "nvidia-63", "--definition", str(definition))
    assert (r.code, r.out, r.err.splitlines()[0]) == (2, "", "error: the domain definition is not domain mv-hand's "
                                                      "without vgpuadm metadata and hostdevs")  # fmt: skip
    assert _state(dst) == before[1]


def test_a_finished_move_is_not_aborted_and_finish_says_it_is_over(tmp_path: Path) -> None:
    src, dst = _hosts(tmp_path, "p4", "mv-done")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-done").code == 0
    assert _run(src, dst, "mv-done").code == 0
    moved = _state(dst)
    r = vgpuadm(src, "migrate", "abort", "--vm", "mv-done", "--target-root", str(dst))
    assert (r.code, r.out) == (5, "")
    assert r.err.splitlines() == [
        "error: domain mv-done is not on this host: its move is done, the target's domain is the VM now",
        "hint: end the move there: `vgpuadm migrate finish --vm mv-done` on the target",
    ]
    r = _run(src, dst, "mv-done")  # run again from here: the domain left, and the hint says where it went
    assert (r.code, r.out) == (3, "")
    assert r.err.splitlines()[0] == "error: No domain named 'mv-done'"
    assert r.err.splitlines()[1].startswith(
        f"hint: if its move to the simulated host {dst} went through, end it there: `vgpuadm migrate finish --vm "
        "mv-done` on the target; else list the domains with `virsh -c "
    )
    r = vgpuadm(dst, "migrate", "finish", "--vm", "mv-done")
    assert (r.code, r.out, r.err) == (0, "nothing to do: domain mv-done records no move here\n", "")
    assert _state(dst) == moved


def test_a_source_killed_as_the_domain_leaves_is_recovered_and_the_move_goes_on(tmp_path: Path) -> None:
    """After `migrate prepare`, `migrate run` has only the source's leaving plan to run (the mark and the target's
    part are there already); killed right after its first step (the domain undefined, its mdev still there), the
    source's `vgpuadm recover` defines the domain again, still outgoing, and `migrate run` again finishes."""
    src, dst = _hosts(tmp_path, "p4", "mv-kill")
    assert vgpuadm(src, "create", "--type", "nvidia-63", "--vm", "mv-kill").code == 0
    (u0,) = mdevs(src)
    assert vgpuadm(src, "migrate", "prepare", "--vm", "mv-kill", "--target-root", str(dst)).code == 0
    prepared = (_state(src), _state(dst))
    r = _run(src, dst, "mv-kill", env={CRASH_HOOK: "1"})
    assert r.code != 0
    assert (_state(src)[1], mdevs(src), _state(src)[2]) == ({}, [u0], True)  # undefined, not freed, journal pending
    assert _state(dst) == prepared[1]
    r = vgpuadm(src, "recover")
    assert r.code == 0, r.err
    assert _state(src) == prepared[0]
    assert [a.moving for a in allocations(src, "mv-kill")] == ["outgoing"]
    r = _run(src, dst, "mv-kill")
    assert (r.code, r.err) == (0, ""), r.err
    assert (_state(src)[1], mdevs(src), mdevs(dst), allocations(dst, "mv-kill")[0].moving) == ({}, [], [u0], None)


def _gpu_instances(root: Path) -> list[tuple[str, int]]:
    out = subprocess.run([f"{root}/usr/bin/nvidia-smi", "mig", "-lgi"], capture_output=True, text=True, check=False)
    return sorted((line.split()[3], int(line.split()[6].split(":")[0])) for line in out.stdout.splitlines()
                  if line.startswith("|") and "MIG" in line)  # fmt: skip


def test_a_mig_backed_vgpu_moves_with_its_gpu_instance(tmp_path: Path) -> None:
    """The target's planner makes the GPU instance, as its `create` would (its MIG mode on: with it off, its
    inventory lists no MIG-backed type, and `migrate check` finds none there); the source gives back the instance
    vgpuadm made for the vGPU, as its `destroy` would."""
    src, dst = _hosts(tmp_path, "h200-mig", "mv-mig")
    assert vgpuadm(src, "create", "--type", "H200X-1-18C", "--vm", "mv-mig").code == 0
    assert _gpu_instances(src) == [("1g.18gb", 6)]
    assert vgpuadm(dst, "mig", "enable", "--gpu", "0000:18:00.0").code == 0  # a GPU with MIG off lists no such type
    r = _run(src, dst, "mv-mig")
    assert (r.code, r.err) == (0, ""), r.err
    assert (
        r.out.splitlines()[-2] == "  this host: step 3/3 destroy MIG GPU instance 1 (1g.18gb at slot 6) on 0000:18:00.0"
    )
    assert (_gpu_instances(src), _gpu_instances(dst)) == ([], [("1g.18gb", 6)])
    (moved,) = allocations(dst, "mv-mig")
    assert (moved.type_id, moved.extra) == ("nvidia-1414", {"mig_instance": "19:6"})


def test_an_mdev_on_an_sriov_vf_moves_to_a_vf_of_the_target(tmp_path: Path) -> None:
    """Layout B (an A100's mdev on one of its VFs): the same mdev mode, placed by the target on a VF of its own."""
    src, dst = _hosts(tmp_path, "a100-mdev-vf", "mv-b")
    assert vgpuadm(src, "create", "--type", "A100-10C", "--vm", "mv-b").code == 0
    (u0,) = mdevs(src)
    parent = allocations(src, "mv-b")[0].parent
    r = _run(src, dst, "mv-b")
    assert (r.code, r.err) == (0, ""), r.err
    (moved,) = allocations(dst, "mv-b")
    assert (mdevs(src), mdevs(dst), moved.uuid, moved.type_id, moved.parent) == ([], [u0], u0, "nvidia-471", parent)
