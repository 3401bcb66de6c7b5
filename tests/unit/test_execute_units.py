"""`execute_units` (vgpuadm/executor): independent units (restore's devices) under one host lock and one journal per
call, each unit still failing and rolling back alone. Uses the test-only step kinds of test_executor.py, which
record into a list instead of touching a host; the restore-level tests run on a simulated host."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import vgpuadm.executor as executor_mod
import vgpuadm.ops.session as session_mod
from tests.conftest import Result
from tests.domains import domain, save
from tests.unit.test_executor import Note, RuntimeNote, _ctx
from vgpuadm import api
from vgpuadm.errors import HostIOError
from vgpuadm.executor import CRASH_ARMED, JOURNAL, execute_units, read_journal, recover
from vgpuadm.host.sysfs import SIM_MARKER
from vgpuadm.model import Allocation
from vgpuadm.steps import Plan
from vgpuadm.virt.xml import metadata_xml


def _units(*specs: tuple[str, str]) -> list[Plan]:
    return [Plan.of([Note(name, fail)], f"unit {name}") for name, fail in specs]


def test_one_journal_for_all_units(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    units = [Plan.of([RuntimeNote("a"), RuntimeNote("a2")], "a"), Plan(), Plan.of([RuntimeNote("b")], "b")]
    assert execute_units(units, ctx, "restore: vgpu") == [None, None, None]
    assert ctx.extras["log"] == ["+a", "+a2", "+b"]
    seen = ctx.extras["journals"]  # the journal as each step saw it: the same plan, the step index moving on
    assert [j["plan"]["summary"] for j in seen] == ["restore: vgpu"] * 3
    assert [len(j["plan"]["steps"]) for j in seen] == [3, 3, 3]
    assert [j["current"] for j in seen] == [0, 1, 2]
    assert not (tmp_path / JOURNAL).exists()


def test_a_failing_unit_is_rolled_back_alone_and_the_others_run(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    units = [Plan.of([Note("a")], ""), Plan.of([Note("b"), Note("c", "error")], ""), Plan.of([Note("d")], "")]
    results = execute_units(units, ctx, "restore: vgpu")
    assert results[0] is None and results[2] is None
    error = results[1]
    assert isinstance(error, HostIOError)
    assert error.message == (
        "step 2/2 note c failed: writing '1' to /sys/x failed: Device or resource busy (EBUSY)"
    )  # the step within its unit, as `execute` names it
    assert error.hint is not None and error.hint.endswith("nothing was changed (the earlier steps were rolled back)")
    assert ctx.extras["log"] == ["+a", "+b", "-b", "+d"]
    # after the failure, the units left run under a new journal holding only their steps
    assert [len(j["plan"]["steps"]) for j in ctx.extras["journals"]] == [4, 4, 4, 1]
    assert not (tmp_path / JOURNAL).exists()


def test_an_incomplete_rollback_keeps_the_journal_and_stops(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    units = [Plan.of([Note("a")], ""), Plan.of([Note("b"), Note("c", "error")], ""), Plan.of([Note("d")], "")]
    ctx.extras["undo_fails"] = True
    results = execute_units(units, ctx, "restore: vgpu")
    ctx.extras["undo_fails"] = False
    assert results[0] is None
    assert results[1] is not None and "rollback incomplete" in (results[1].hint or "")
    assert results[2] is not None and results[2].message == f"an interrupted change is pending in /{JOURNAL}"
    assert ctx.extras["log"] == ["+a", "+b"]
    journal = read_journal(str(tmp_path))
    assert journal is not None and (journal["state"], journal["undo"]) == ("rolling-back", [1])
    assert recover(ctx) == ["rolled back: note b"]  # the done unit (a) is kept
    assert ctx.extras["log"] == ["+a", "+b", "-b"]


def test_a_pending_journal_fails_every_unit(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    (tmp_path / JOURNAL).parent.mkdir(parents=True)
    (tmp_path / JOURNAL).write_text(json.dumps({"version": 1, "state": "applying", "current": 0,
                                                "plan": {"summary": "", "steps": []}}))  # fmt: skip
    results = execute_units(_units(("a", ""), ("b", "")), ctx, "")
    assert [r.message if r else None for r in results] == [f"an interrupted change is pending in /{JOURNAL}"] * 2
    assert ctx.extras["log"] == []


def test_journal_fsyncs_once_per_call_for_durable_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
    ctx = _ctx(tmp_path)
    assert execute_units(_units(("a", ""), ("b", ""), ("c", "")), ctx, "") == [None] * 3
    assert synced == ["file", "dir", "dir"]  # the journal's creation (file + directory), its removal


CRASH = """
import sys
sys.path.insert(0, {tests!r})
from tests.unit.test_executor import RuntimeNote, _ctx
from vgpuadm.executor import execute_units
from vgpuadm.steps import Plan
from pathlib import Path
execute_units([Plan.of([RuntimeNote(n)], n) for n in "abc"], _ctx(Path({root!r})), "restore: vgpu")
"""


@pytest.mark.process
def test_a_crash_mid_batch_leaves_the_whole_batch_to_recover(tmp_path: Path) -> None:
    """The process dies after the batch's 2nd step (the executor's test crash hook): the journal names all three
    units' steps at step 2, and `recover` undoes all of them, in reverse (undo tolerates the step never run)."""
    tests = str(Path(__file__).resolve().parents[2])
    (tmp_path / SIM_MARKER).write_text("{}")  # the crash hook is honoured on a simulated root only
    r = subprocess.run([sys.executable, "-c", CRASH.format(tests=tests, root=str(tmp_path))],
                       env={"VGPUADM_TEST_CRASH_AFTER_STEP": "2", "PYTHONPATH": tests}, capture_output=True)  # fmt: skip
    assert r.returncode == 99, r.stderr
    journal = read_journal(str(tmp_path))
    assert journal is not None and journal["state"] == "applying" and journal["current"] == 1
    assert [s["name"] for s in journal["plan"]["steps"]] == ["a", "b", "c"]
    ctx = _ctx(tmp_path)
    ctx.extras["log"] += ["+a", "+b"]  # what the dead process did
    assert recover(ctx) == ["rolled back: note b", "rolled back: note a"]
    # the whole batch is undone in reverse; c never ran (a real undo checks the host and finds nothing; the test
    # kind's undo just logs)
    assert ctx.extras["log"] == ["+a", "+b", "-c", "-b", "-a"]
    assert not (tmp_path / JOURNAL).exists()


def test_restore_journals_once_per_phase(
    sim_host: Callable[[str], Path], tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 mdevs on each P4 of the p4 host, from saved domain XML after `sim reboot`: the vgpu phase is one journal
    of every mdev (it was one per device), and the host is read once, then once after the phase that changed it."""
    root = str(sim_host("p4"))
    snap = api.discover(root)
    parents = sorted(snap.mdev_parents)
    saved = tmp_path / "saved"
    saved.mkdir()
    for n, (parent, k) in enumerate((p, k) for p in parents for k in range(4)):
        name, duuid, u = f"vm{n}", f"00000000-0000-4000-8000-{n:012d}", f"11111111-0000-4000-8000-{n:012d}"
        a = Allocation(name, "mdev", "nvidia-63", parent, u, domain_uuid=duuid, slot=0, extra={"display": "off"})
        save(saved, domain(name, duuid, metadata=metadata_xml([a], snap.host_key)))
        del k
    assert cli("sim", "reboot", root).code == 0
    begun: list[tuple[str, int]] = []
    real_begin = executor_mod._Journal.begin
    monkeypatch.setattr(
        executor_mod._Journal,
        "begin",
        lambda self, plan: (begun.append((plan.summary, len(plan.steps))), real_begin(self, plan))[1],
    )
    reads: list[str] = []
    real_snapshot = session_mod.snapshot
    monkeypatch.setattr(session_mod, "snapshot", lambda *a, **k: (reads.append("read"), real_snapshot(*a, **k))[1])
    res = cli("--root", root, "restore", "--domain-xml-dir", str(saved))
    devices = 4 * len(parents)
    assert res.code == 0 and res.out.splitlines()[-1] == f"restored: {devices} step(s) for {devices} recorded device(s)"
    assert begun == [("restore: vgpu", devices)]
    assert len(reads) == 2
    assert set(api.discover(root).mdevs) == {f"11111111-0000-4000-8000-{n:012d}" for n in range(devices)}
    assert not (Path(root) / JOURNAL).exists()


@pytest.mark.process
@pytest.mark.parametrize(("simulated", "value"), [(False, "2"), (True, "9" * 100_000), (True, "-1"), (True, "2x")])
def test_the_crash_hook_is_honoured_only_on_a_simulated_root_and_only_as_a_step_number(
    tmp_path: Path, simulated: bool, value: str
) -> None:
    """A production run (a real root) never dies on purpose whatever its environment says; a value that is not a
    step number (100,000 digits, negative, text) is no step on a simulated root either, and never a traceback."""
    tests = str(Path(__file__).resolve().parents[2])
    if simulated:
        (tmp_path / SIM_MARKER).write_text("{}")
    r = subprocess.run([sys.executable, "-c", CRASH.format(tests=tests, root=str(tmp_path))],
                       env={"VGPUADM_TEST_CRASH_AFTER_STEP": value, "PYTHONPATH": tests}, capture_output=True)  # fmt: skip
    assert (r.returncode, r.stderr) == (0, b"")
    assert read_journal(str(tmp_path)) is None


@pytest.mark.process
def test_the_crash_hook_is_honoured_on_a_real_root_once_armed(tmp_path: Path) -> None:
    """The kernel lane's throwaway guest (a real root) arms it with a root-only file under /run/vgpuadm."""
    tests = str(Path(__file__).resolve().parents[2])
    (tmp_path / CRASH_ARMED).parent.mkdir(parents=True, mode=0o700)
    (tmp_path / CRASH_ARMED).write_text("")
    r = subprocess.run([sys.executable, "-c", CRASH.format(tests=tests, root=str(tmp_path))],
                       env={"VGPUADM_TEST_CRASH_AFTER_STEP": "2", "PYTHONPATH": tests}, capture_output=True)  # fmt: skip
    assert r.returncode == 99, r.stderr
