"""`vgpuadm reconcile`: a crash between steps of `apply -f` (the executor's test hook kills the process right after
step N) is rolled back from the journal, leaving no leaked device and no lost allocation; devices no domain owns
are listed and, with --fix, removed. Real CLI processes, simulated kernel, libvirt's embedded driver."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "libvirt"))
from embedded_host import allocations, define, hostdev_keys, mdevs, vgpuadm

from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt
CRASH = "VGPUADM_TEST_CRASH_AFTER_STEP"


def _no_leaks_no_losses(root: Path, domains: tuple[str, ...]) -> None:
    owned = sorted(k for d in domains for k in hostdev_keys(root, d))
    assert mdevs(root) == owned  # every mdev is owned, every owned mdev exists
    for d in domains:
        assert [a.uuid for a in allocations(root, d)] == hostdev_keys(root, d)  # metadata and hostdevs agree
    res = vgpuadm(root, "reconcile")
    assert res.code == 0, res.err
    assert res.out == "journal: no interrupted change\nno leaked devices\n" and res.err == ""


@pytest.mark.parametrize("crash_after", [2, 4])
def test_crash_mid_apply_is_rolled_back_without_losing_what_was_owned(
    sim_host: Callable[[str], Path], tmp_path: Path, crash_after: int
) -> None:
    root = sim_host("p4")
    define(root, "web01", "db02")
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n  web01:\n    type: nvidia-63\n")
    assert vgpuadm(root, "apply", "-f", str(plan)).code == 0
    owned_before = hostdev_keys(root, "web01")
    # Raw XML is not compared: libvirt keeps the pcie-root-port controllers it added for a hot-plug after a detach.
    state, owned_xml = tree_state(root), {d: (allocations(root, d), hostdev_keys(root, d)) for d in ("web01", "db02")}

    # 5 steps: create ×2 for web01's new slots, create for db02, then one definition per domain (db02, web01);
    # after step 4 db02 is defined and web01 not yet
    plan.write_text("vms:\n  web01:\n    type: nvidia-63\n    count: 3\n  db02:\n    type: nvidia-63\n")
    crashed = vgpuadm(root, "apply", "-f", str(plan), env={CRASH: str(crash_after)})
    assert crashed.code == 99, crashed.err
    assert (root / "var/lib/vgpuadm/journal.json").exists()
    blocked = vgpuadm(root, "apply", "-f", str(plan))
    assert blocked.code == 5 and "an interrupted change is pending" in blocked.err

    res = vgpuadm(root, "reconcile")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert (
        len([ln for ln in lines if ln.startswith("journal: rolled back: ")]) == crash_after
    )  # the steps done before the crash
    assert lines[-1] == "no leaked devices"
    assert not (root / "var/lib/vgpuadm/journal.json").exists()
    assert tree_state(root) == state
    assert {d: (allocations(root, d), hostdev_keys(root, d)) for d in ("web01", "db02")} == owned_xml
    assert hostdev_keys(root, "web01") == owned_before
    _no_leaks_no_losses(root, ("web01", "db02"))

    again = vgpuadm(root, "apply", "-f", str(plan))
    assert again.code == 0, again.err
    assert len(hostdev_keys(root, "web01")) == 3 and len(hostdev_keys(root, "db02")) == 1
    _no_leaks_no_losses(root, ("web01", "db02"))


def test_leaks_are_listed_and_fixed(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    define(root, "web01")
    state = tree_state(root)
    made = vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--uuid", "11111111-2222-3333-4444-555555555555")
    assert made.code == 0, made.err
    listed = vgpuadm(root, "reconcile")
    assert listed.code == 0, listed.err
    assert listed.out.splitlines() == [
        "journal: no interrupted change",
        "leak: mdev 11111111-2222-3333-4444-555555555555 (nvidia-63 on 0000:01:00.0) is owned by no domain",
        "1 leaked device(s); `vgpuadm reconcile --fix` removes them",
    ]
    assert mdevs(root) == ["11111111-2222-3333-4444-555555555555"]
    fixed = vgpuadm(root, "reconcile", "--fix")
    assert fixed.code == 0, fixed.err
    assert "removed: mdev 11111111-2222-3333-4444-555555555555 (nvidia-63 on 0000:01:00.0)" in fixed.out
    assert mdevs(root) == []
    assert tree_state(root) == state


def test_a_crash_on_a_virtual_mdev_parent_is_rolled_back(sim_host: Callable[[str], Path]) -> None:
    """The kernel's sample drivers are mdev parents named `mtty`, not PCI functions: the journal of a crashed
    `create` on one must still be accepted by `reconcile` (found by the kernel lane's verb differential)."""
    root = sim_host("kernel-samples")
    define(root, "web01")
    state = tree_state(root)
    crashed = vgpuadm(root, "create", "--type", "mtty-2", "--vm", "web01", env={CRASH: "1"})
    assert crashed.code == 99, crashed.err
    (uuid,) = mdevs(root)

    res = vgpuadm(root, "reconcile")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"journal: rolled back: create mdev {uuid} of type mtty-2 on mtty",
        "no leaked devices",
    ]
    assert not (root / "var/lib/vgpuadm/journal.json").exists()
    assert tree_state(root) == state


def test_restore_after_a_crash_mid_apply_brings_back_only_what_the_rollback_kept(
    sim_host: Callable[[str], Path], tmp_path: Path
) -> None:
    """A kill after web0's definition step, then the boot-time `restore`: the rollback takes web0's devices out of
    its definition, so restore (reading the domains only after it) makes nothing; no device leaks and the next
    apply converges in one run. Before, restore read the domains first and re-made web0's rolled-back devices:
    nobody's (leaks), and apply then mis-counted what each VM had."""
    root = sim_host("p4")
    names = ("web0", "web1", "web2")
    define(root, *names)
    state = tree_state(root)
    plan = tmp_path / "plan.yaml"
    plan.write_text("vms:\n" + "".join(f"  {n}:\n    type: nvidia-63\n" for n in names))
    # 6 steps: create ×3, then one attach per domain; after step 4 web0 holds its device
    crashed = vgpuadm(root, "apply", "-f", str(plan), env={CRASH: "4"})
    assert crashed.code == 99, crashed.err
    assert len(hostdev_keys(root, "web0")) == 1 and len(mdevs(root)) == 3

    res = vgpuadm(root, "restore", "--timeout", "1")
    assert res.code == 0, res.err
    assert [ln for ln in res.out.splitlines() if not ln.startswith("recovered: rolled back: ")] == [
        "nothing to restore: all 0 recorded device(s) are in place"
    ]
    assert mdevs(root) == [] and tree_state(root) == state
    _no_leaks_no_losses(root, names)

    again = vgpuadm(root, "apply", "-f", str(plan))
    assert again.code == 0, again.err
    assert again.out.splitlines()[-1] == "applied 6 step(s): apply plan.yaml: +3 −0 ~0"
    assert vgpuadm(root, "apply", "-f", str(plan)).out == "nothing to do: the host matches the plan\n"
    _no_leaks_no_losses(root, names)


def test_create_onto_a_leaked_mdev_with_the_slots_uuid_is_one_error_naming_the_fix(
    sim_host: Callable[[str], Path],
) -> None:
    """A leak that holds the UUID a domain's next slot derives (what a crashed apply plus restore left behind):
    `create` said "'<uuid>' is not a PCI address" (it took the existing mdev for a layout C VF)."""
    root = sim_host("p4")
    duuid = define(root, "web01")["web01"]
    leak = device_uuid(HostRoot(str(root)).machine_id(), duuid, 0)
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--uuid", leak).code == 0
    state = tree_state(root)
    res = vgpuadm(root, "create", "--vm", "web01", "--type", "nvidia-63")
    assert (res.code, res.out) == (5, "")
    assert res.err.splitlines() == [
        f"error: mdev {leak}, the UUID of domain web01's next device, exists and no vgpuadm metadata records it",
        "hint: `vgpuadm reconcile --fix` removes it; then run this again",
    ]
    assert tree_state(root) == state
    assert vgpuadm(root, "reconcile", "--fix").code == 0
    assert vgpuadm(root, "create", "--vm", "web01", "--type", "nvidia-63").code == 0
    assert hostdev_keys(root, "web01") == [leak] == mdevs(root)
