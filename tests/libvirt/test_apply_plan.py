"""`vgpuadm apply -f`: a plan file made true on a simulated P4 host with domains in libvirt's embedded driver.
Checks exact sysfs state, exact recorded allocations and deterministic UUIDs; idempotence; a plan that does not
fit fails before changing anything; --check, --prune."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import _env, allocations, attr, define, domain_xml, hostdev_keys, mdevs, vgpuadm

from vgpuadm.cli import fast
from vgpuadm.host.root import HostRoot
from vgpuadm.model import device_uuid
from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.libvirt

PLAN = """\
vms:
  web01:
    type: GRID P4-1Q
    count: 2
    params: {frame_rate_limiter: 0}
  db02:
    type: nvidia-63
"""


@pytest.fixture
def host(sim_host: Callable[[str], Path], tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    root = sim_host("p4")
    uuids = define(root, "web01", "db02", "other")
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    return root, uuids, plan


def test_apply_creates_attaches_records_then_is_idempotent(host: tuple[Path, dict[str, str], Path]) -> None:
    root, uuids, plan = host
    hid = HostRoot(str(root)).machine_id()
    web = [device_uuid(hid, uuids["web01"], s) for s in (0, 1)]
    db = device_uuid(hid, uuids["db02"], 0)

    first = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert first.code == 0, first.err
    assert first.out.splitlines()[-3:] == [
        "+ db02: nvidia-63 ×1",
        "+ web01: nvidia-63 ×2",
        "applied 7 step(s): apply plan.yaml: +3 −0 ~0",
    ]
    assert "[1/7] create mdev" in first.out  # progress, one line per step when not on a terminal
    assert mdevs(root) == sorted([*web, db])
    for u in web:
        assert attr(root, f"/sys/bus/mdev/devices/{u}/nvidia/vgpu_params") == "frame_rate_limiter=0\n"
    assert [(a.mode, a.type_id, a.parent, a.uuid, a.params, a.slot) for a in allocations(root, "web01")] == [
        ("mdev", "nvidia-63", "0000:01:00.0", web[0], "frame_rate_limiter=0", 0),
        ("mdev", "nvidia-63", "0000:01:00.0", web[1], "frame_rate_limiter=0", 1),
    ]
    assert hostdev_keys(root, "web01") == web and hostdev_keys(root, "db02") == [db]
    assert allocations(root, "other") == []

    exported = vgpuadm(root, "mdevctl", "export")  # from the domains' metadata
    assert exported.out.splitlines() == sorted(
        f"wrote {root}/etc/mdevctl.d/0000:01:00.0/{u} (nvidia-63, start=auto)" for u in [*web, db]
    )

    state = tree_state(root)
    xml_before = {n: domain_xml(root, n) for n in uuids}
    again = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert again.code == 0, again.err
    assert again.out == "nothing to do: the host matches the plan\n"
    assert tree_state(root) == state
    assert {n: domain_xml(root, n) for n in uuids} == xml_before


def test_plan_that_needs_more_instances_than_exist_changes_nothing(host: tuple[Path, dict[str, str], Path]) -> None:
    root, _uuids, plan = host
    # Two P4s hold 8 × nvidia-63 each: 3 for web01/db02 plus 14 for "other" is one too many. VMs are placed in
    # name order (db02, other, web01), so web01 is the one that no longer fits.
    plan.write_text(PLAN + "  other:\n    type: nvidia-63\n    count: 14\n")
    state = tree_state(root)
    xml_before = domain_xml(root, "other")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 4, res.err
    assert res.err.startswith("error: plan.yaml:4: vms.web01.count: No room for 2 × nvidia-63 (only 1 fit)")
    assert "hint: " in res.err and res.out == ""
    assert tree_state(root) == state
    assert domain_xml(root, "other") == xml_before
    assert not (root / "var/lib/vgpuadm/journal.json").exists()


def test_a_plans_count_is_the_total_its_errors_name(host: tuple[Path, dict[str, str], Path]) -> None:
    """`count` is what the VM owns afterwards: with 2 devices made, `count: 20` was reported as "18 instances are
    more than this host could ever hold", and a count that does not fit as "No room for 14 × …" (#30.11). The
    errors name the count the plan asks for, and never offer to free the VM's own devices for it."""
    root, uuids, plan = host
    assert vgpuadm(root, "apply", "-f", str(plan)).code == 0
    hid = HostRoot(str(root)).machine_id()
    db = device_uuid(hid, uuids["db02"], 0)
    state = tree_state(root)
    plan.write_text(PLAN.replace("count: 2", "count: 20"))
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: plan.yaml:4: vms.web01.count: 20 instances are more than this host could ever hold (16 vGPU devices "
        "in all)\nhint: ask for what the host can hold: `vgpuadm types --available` lists the free instances\n"
    )
    plan.write_text(PLAN.replace("count: 2", "count: 16"))
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: plan.yaml:4: vms.web01.count: No room for 16 × nvidia-63 (2 exist, 14 more needed; only 13 fit): "
        "0000:01:00.0: no free instances of nvidia-63 left after this request; 0000:02:00.0: no free instances of "
        "nvidia-63 left after this request\n"
        f"hint: free what is in the way: db02 owns {db} (`vgpuadm destroy --vm db02 --uuid {db}`); or pick another "
        "type or GPU; `vgpuadm types --available` lists what fits now\n"
    )
    # where it fits, the diff says what it adds and the total the plan asks for
    plan.write_text(PLAN.replace("count: 2", "count: 3"))
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert (res.code, res.out.splitlines()[0]) == (0, "+ web01: nvidia-63 ×1 (3 in all)")
    assert tree_state(root) == state


def test_check_shows_the_diff_and_changes_nothing(host: tuple[Path, dict[str, str], Path]) -> None:
    root, _uuids, plan = host
    state = tree_state(root)
    res = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        "+ db02: nvidia-63 ×1",
        "+ web01: nvidia-63 ×2",
        "would run 7 step(s); nothing was changed (--check)",
    ]
    assert tree_state(root) == state


def test_shrinking_and_prune(host: tuple[Path, dict[str, str], Path]) -> None:
    root, uuids, plan = host
    assert vgpuadm(root, "apply", "-f", str(plan)).code == 0
    hid = HostRoot(str(root)).machine_id()
    web = [device_uuid(hid, uuids["web01"], s) for s in (0, 1)]
    db = device_uuid(hid, uuids["db02"], 0)
    plan.write_text("vms:\n  web01:\n    type: nvidia-63\n    params: frame_rate_limiter=0\n")

    kept = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert kept.code == 0, kept.err
    assert f"- web01: nvidia-63 {web[1]} on 0000:01:00.0" in kept.out
    assert "left alone: db02 (not in the plan; --prune removes its devices)" in kept.out
    assert mdevs(root) == sorted([web[0], db])
    assert [a.uuid for a in allocations(root, "web01")] == [web[0]]

    pruned = vgpuadm(root, "apply", "-f", str(plan), "--prune", "--diff")
    assert pruned.code == 0, pruned.err
    assert f"- db02: nvidia-63 {db} on 0000:01:00.0" in pruned.out
    assert mdevs(root) == [web[0]]
    assert allocations(root, "db02") == [] and hostdev_keys(root, "db02") == []
    assert "vgpuadm" not in domain_xml(root, "db02")

    # Switching type on the only GPU in use: the removal frees the GPU for the new type in the same plan.
    plan.write_text("vms:\n  web01:\n    type: nvidia-65\n    gpu: 0000:01:00.0\n")
    switched = vgpuadm(root, "apply", "-f", str(plan), "--diff")
    assert switched.code == 0, switched.err
    assert [ln for ln in switched.out.splitlines() if ln[:2] in ("+ ", "- ")] == [
        f"- web01: nvidia-63 {web[0]} on 0000:01:00.0",
        "+ web01: nvidia-65 ×1",
    ]
    assert mdevs(root) == [web[0]]  # slot 0 again: the same deterministic UUID, now of the new type
    assert (root / f"sys/bus/mdev/devices/{web[0]}/mdev_type").resolve().name == "nvidia-65"


def test_plan_errors_name_file_line_and_key(host: tuple[Path, dict[str, str], Path]) -> None:
    root, _uuids, plan = host
    plan.write_text("vms:\n  web01:\n    type: nvidia-63\n    count: 0\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.err.splitlines()[0]) == (2, "error: plan.yaml:4: vms.web01.count: must be ≥ 1")
    plan.write_text("vms:\n  nosuchvm:\n    type: nvidia-63\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert (res.code, res.err.splitlines()[0]) == (
        3,
        "error: plan.yaml:2: vms.nosuchvm: no libvirt domain named 'nosuchvm'",
    )
    plan.write_text("vms:\n  web01:\n    type: nvidia-999\n")
    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 3 and res.err.startswith('error: plan.yaml:3: vms.web01.type: Unknown type "nvidia-999"')


def test_after_a_reboot_apply_brings_back_the_named_vms_missing_devices(
    host: tuple[Path, dict[str, str], Path],
) -> None:
    """A plan is desired state: after `sim reboot` every device is gone, and `apply` (not only `restore`) brings back
    the recorded devices of the VMs the plan names — same UUIDs, same vgpu_params — where it used to say "nothing to
    do: the host matches the plan" with 0 mdevs. `--check` shows them and changes nothing."""
    root, _uuids, plan = host
    assert vgpuadm(root, "apply", "-f", str(plan)).code == 0
    made = mdevs(root)
    assert len(made) == 3
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert mdevs(root) == []

    check = vgpuadm(root, "apply", "-f", str(plan), "--check")
    assert check.code == 0, check.err
    assert check.out.splitlines() == [
        "! db02: 1 device missing (brought back as restore does)",
        "! web01: 2 devices missing (brought back as restore does)",
        "would bring back 3 missing device(s), then run 0 step(s); nothing was changed (--check)",
    ]
    assert mdevs(root) == []

    res = vgpuadm(root, "apply", "-f", str(plan))
    assert res.code == 0, res.err
    assert res.out.splitlines()[-1] == "brought back 3 missing device(s) in 5 restore step(s)"
    assert mdevs(root) == made
    for a in allocations(root, "web01"):
        assert attr(root, f"/sys/bus/mdev/devices/{a.uuid}/nvidia/vgpu_params") == "frame_rate_limiter=0\n"
    again = vgpuadm(root, "apply", "-f", str(plan))
    assert (again.code, again.out) == (0, "nothing to do: the host matches the plan\n")


def test_apply_answers_as_through_typer(host: tuple[Path, dict[str, str], Path], tmp_path: Path) -> None:
    """`apply -f` takes the typer-free path (cli/fast.py); a global flag typer alone reads (`--no-headers`, which
    changes nothing here) sends the same command through typer: same output, errors and exit codes."""
    root, _uuids, plan = host
    bad = tmp_path / "bad.yaml"
    bad.write_text("vms:\n  web01:\n    type: nvidia-63\n    count: 0\n")
    for args in (["apply", "-f", str(plan), "--check"], ["apply", f"--file={plan}", "--dry-run", "--json"],
                 ["apply", "-f", str(plan), "--check", "--diff", "--prune"], ["apply", "-f", str(bad)],
                 ["apply", "-f", str(tmp_path / "missing.yaml"), "--json"]):  # fmt: skip
        fast_run, typer_run = vgpuadm(root, *args), vgpuadm(root, "--no-headers", *args)
        assert fast_run == typer_run, args
    assert fast_run.code == 2 and json.loads(fast_run.out)["exit_code"] == 2
    done = vgpuadm(root, "apply", "-f", str(plan))
    assert done.code == 0 and done.out.splitlines()[-1] == "applied 7 step(s): apply plan.yaml: +3 −0 ~0"
    again = vgpuadm(root, "--no-headers", "apply", "-f", str(plan))
    assert (again.code, again.out) == (0, "nothing to do: the host matches the plan\n")


def test_apply_does_not_import_typer(host: tuple[Path, dict[str, str], Path]) -> None:
    root, _uuids, plan = host
    code = "import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); print(code, 'typer' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code, "--root", str(root), "apply", "-f", str(plan), "--check"],
                       capture_output=True, text=True, env=_env(None), check=True, cwd="/")  # fmt: skip
    assert r.stdout.splitlines()[-1] == "0 False"


def test_apply_of_a_valid_plan_skips_jsonschema_filelock_and_importlib_metadata(
    host: tuple[Path, dict[str, str], Path],
) -> None:
    """jsonschema (~50 ms of imports) only names a plan's fault: a plan that conforms is checked without it; the
    host lock is vgpuadm.host.root's (filelock's import was ~30 ms); importlib.metadata (~20 ms) is imported only
    when a distribution may declare a mode (model.mode_entry_points)."""
    root, _uuids, plan = host
    code = ("import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); "
            "print(code, *(m in sys.modules for m in ('jsonschema', 'filelock', 'importlib.metadata')))")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, "--root", str(root), "apply", "-f", str(plan), "--check"],
                       capture_output=True, text=True, env=_env(None), check=True, cwd="/")  # fmt: skip
    assert r.stdout.splitlines()[-1] == "0 False False False"


@pytest.mark.parametrize(
    "argv",
    [
        ["apply", "-f"],
        ["apply", "--check"],
        ["apply", "--help"],
        ["apply", "-f", "p", "-f", "q"],
        ["apply", "-f", "p", "--check", "--dry-run"],
        ["apply", "-f", "--json"],
        ["apply", "-fp"],
        ["apply", "-f", "p", "--wat"],
        ["apply", "-f", "p", "--", "x"],
        ["--wait", "5", "apply", "-f", "p"],
        ["--no-wait", "apply", "-f", "p"],
        ["--root=", "apply", "-f", "p"],
        ["-c=qemu:///system", "apply", "-f", "p"],
        ["--connect", "--root", "apply", "-f", "p"],
    ],
)
def test_other_apply_argument_lists_go_to_typer(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vgpuadm.cli.declarative.apply", lambda *_a: pytest.fail("ran without typer"))
    assert fast.try_run(argv, fast.Console()) is None
