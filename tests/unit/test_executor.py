"""The executor's contract with any registered step kind (the libvirt steps plug in the same way): order of apply
and undo, the journal seen from inside a step, effect verification, incomplete rollbacks, ^C. The step kinds here
are test-only and record into a list instead of touching a host."""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import vgpuadm.executor as executor_mod
from vgpuadm.errors import HostIOError, Interrupted, UsageError
from vgpuadm.executor import HANDLERS, JOURNAL, ExecContext, execute, handlers, host_lock, read_journal, recover
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.steps import STEP_KINDS, Plan, Step, step_kind


@step_kind("test-note")
@dataclass(frozen=True)
class Note(Step):
    """Appends `name` to ctx.extras["log"]; fails when `fail` names the failure."""

    name: str
    fail: str = ""

    def describe(self) -> str:
        return f"note {self.name}"


@step_kind("test-runtime-note")
@dataclass(frozen=True)
class RuntimeNote(Note):
    """A Note whose change, like an mdev's, does not outlive a power loss."""

    durable: ClassVar[bool] = False


@step_kind("test-peek")
@dataclass(frozen=True)
class Peek(Step):
    """Does nothing; its handler (registered by the test using it) looks at the journal file."""

    name: str

    def describe(self) -> str:
        return f"peek {self.name}"


@step_kind("test-lane-note")
@dataclass(frozen=True)
class LaneNote(Note):
    """A Note whose handler names a lane, as a domain definition's does: consecutive ones in distinct lanes run at
    once. Its apply first waits for ctx.extras["barrier"] (when set): with one step at a time it would time out."""

    lane: str = ""


def _apply_lane(s: LaneNote, ctx: ExecContext) -> None:
    if ctx.extras.get("barrier") is not None:
        ctx.extras["barrier"].wait()
    _apply(s, ctx)


LANES = (LaneNote, _apply_lane, lambda s, c: _undo(s, c), lambda s, c: _noted(s, c), lambda s: s.lane)


def _apply(s: Note, ctx: ExecContext) -> None:
    ctx.extras["journals"].append(read_journal(ctx.root))
    if s.fail == "error":
        raise HostIOError("writing '1' to /sys/x failed: Device or resource busy (EBUSY)", path="/sys/x", errno=16)
    if s.fail == "oserror":
        raise PermissionError(13, "Permission denied", "/var/lib/vgpuadm/x")
    if s.fail == "interrupt":
        raise KeyboardInterrupt
    if s.fail == "bug":  # a bug after the change was made: its effect is there
        ctx.extras["log"].append(f"+{s.name}")
        raise RuntimeError(f"bug in {s.name}")
    ctx.extras["log"].append(f"+{s.name}")


def _undo(s: Note, ctx: ExecContext) -> None:
    if s.fail == "undo" or ctx.extras.get("undo_fails"):
        raise HostIOError(f"cannot undo {s.name}")
    ctx.extras["log"].append(f"-{s.name}")


def _noted(s: Note, ctx: ExecContext) -> bool:
    # Applied = its apply logged it (a refused apply logs nothing); "noop" is a write the kernel ignored.
    return s.fail != "noop" and f"+{s.name}" in ctx.extras["log"]


def _ctx(tmp_path: Path, *more: tuple) -> ExecContext:
    """A context whose handler table is the executor's plus the test steps' (Note, and `more` rows). A journal's
    steps are rebuilt as the class STEP_KINDS names, which is another Note when test_execute_units imports this
    module under its package name: both get the handlers."""
    (tmp_path / "sys").mkdir(exist_ok=True)
    notes = [(cls, _apply, _undo, _noted) for cls in {Note, STEP_KINDS["test-note"]}]
    table = {**HANDLERS, **handlers([*notes, *more])}
    return ExecContext(Sysfs(str(tmp_path)), str(tmp_path), extras={"log": [], "journals": []}, handlers=table)


def test_applies_in_order_and_journals_each_step(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    plan = Plan.of([Note("a"), Note("b"), Note("c")], "three notes")
    result = execute(plan, ctx)
    assert result.changed and result.applied == ("step 1/3 note a", "step 2/3 note b", "step 3/3 note c")
    assert ctx.extras["log"] == ["+a", "+b", "+c"]
    assert [j["current"] for j in ctx.extras["journals"]] == [0, 1, 2]
    assert ctx.extras["journals"][2]["plan"] == json.loads(json.dumps(plan.to_dict()))
    assert not (tmp_path / JOURNAL).exists()


def test_journal_holds_the_plan_once_then_one_progress_line_per_step(tmp_path: Path) -> None:
    """Only the plan is written with fsync + rename; each later step appends its index (cheap, no fsync)."""
    seen: list[str] = []
    ctx = _ctx(tmp_path, (Peek, lambda s, c: seen.append((tmp_path / JOURNAL).read_text()), lambda s, c: None))
    plan = Plan.of([Peek("a"), Peek("b"), Peek("c")], "three peeks")
    execute(plan, ctx)
    first, _ = json.JSONDecoder().raw_decode(seen[0])
    assert first == {"version": 1, "pid": os.getpid(), "state": "applying", "current": 0, "done": 0,
                     "plan": json.loads(json.dumps(plan.to_dict()))}  # fmt: skip
    assert seen[1] == seen[0] + '{"current": 1, "state": "applying"}\n'
    assert seen[2] == seen[1] + '{"current": 2, "state": "applying"}\n'


def _directory_of(fd: int) -> list[str]:
    """[the directory's name] when `fd` is a directory (an fsync of it makes a rename or removal durable), else []."""
    return [os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))] if stat.S_ISDIR(os.fstat(fd).st_mode) else []


def test_journal_directory_fsyncs_per_plan_and_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability cannot be observed without pulling the plug, so the directory fsyncs are recorded (os.fsync
    wrapped) and their order checked: alone, a plan syncs the journal's creation and its removal; in a
    batch under an outer lock hold, each removal is made durable by the next plan's creation or by the release."""
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.extend(_directory_of(fd)), real(fd)))
    ctx = _ctx(tmp_path)
    execute(Plan.of([Note("a"), Note("b")], ""), ctx)
    assert synced == ["vgpuadm", "vgpuadm"]
    synced.clear()
    with host_lock(str(tmp_path)):
        for name in ("c", "d", "e"):
            execute(Plan.of([Note(name)], ""), ctx)
            assert not (tmp_path / JOURNAL).exists()
        assert synced == ["vgpuadm", "vgpuadm", "vgpuadm"]  # one per plan: its journal's creation
    assert synced == ["vgpuadm"] * 4  # the release made the last removal durable
    assert ctx.extras["log"] == ["+a", "+b", "+c", "+d", "+e"]


def test_a_nested_hold_does_not_check_the_root_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A verb holds the lock and executes its plans under that hold: the root's checks (it exists, this process
    can write it) and the lock directory's set-up ran when the verb took the lock, not again per plan."""
    checked: list[str] = []
    real = executor_mod.check_writable
    monkeypatch.setattr(executor_mod, "check_writable", lambda root: (checked.append(root), real(root))[1])
    ctx = _ctx(tmp_path)
    with host_lock(str(tmp_path)):
        for name in ("a", "b"):
            execute(Plan.of([Note(name)], ""), ctx)
    assert checked == [str(tmp_path)]
    assert ctx.extras["log"] == ["+a", "+b"]


def test_runtime_only_plans_are_journaled_without_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of runtime kernel steps only (no Step.durable) loses nothing to a power cut that its journal could
    bring back, so neither the journal nor its directory is fsynced per plan: a batch of such plans (restore runs
    one per device) costs one directory fsync, at the lock's release. A plan with a durable step still syncs."""
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append("dir" if _directory_of(fd) else "file"), real_fsync(fd)))
    ctx = _ctx(tmp_path)
    with host_lock(str(tmp_path)):
        for name in ("a", "b", "c"):
            execute(Plan.of([RuntimeNote(name), RuntimeNote(name + "2")], ""), ctx)
            assert not (tmp_path / JOURNAL).exists()
        assert synced == []
    assert synced == ["dir"]
    synced.clear()
    execute(Plan.of([RuntimeNote("d"), Note("e")], ""), ctx)
    assert synced == ["file", "dir", "dir"]
    assert ctx.extras["log"] == ["+a", "+a2", "+b", "+b2", "+c", "+c2", "+d", "+e"]


def test_a_torn_progress_line_is_ignored(tmp_path: Path) -> None:
    """A crash mid-append leaves half a line: the previous index stands (recover undoes the whole plan anyway)."""
    (tmp_path / JOURNAL).parent.mkdir(parents=True)
    head = json.dumps({"version": 1, "state": "applying", "current": 0, "plan": {"summary": "", "steps": []}})
    (tmp_path / JOURNAL).write_text(head + '\n{"current": 1, "state": "applying"}\n{"current": 2, "sta')
    journal = read_journal(str(tmp_path))
    assert journal is not None and (journal["current"], journal["done"], journal["state"]) == (1, 1, "applying")


def test_rolling_back_is_recorded_in_the_journal(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(HostIOError):
        execute(Plan.of([Note("a", "undo"), Note("b"), Note("c", "error")], ""), ctx)
    assert (
        (tmp_path / JOURNAL)
        .read_text()
        .endswith(
            '{"current": 1, "state": "applying"}\n{"current": 2, "state": "applying"}\n'
            '{"current": 2, "state": "rolling-back", "undo": [0, 1]}\n'
        )
    )


def test_first_failure_rolls_back_in_reverse(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(HostIOError) as info:
        execute(Plan.of([Note("a"), Note("b"), Note("c", "error"), Note("d")], ""), ctx)
    assert info.value.message == (
        "step 3/4 note c failed: writing '1' to /sys/x failed: Device or resource busy (EBUSY)"
    )
    assert info.value.hint == "nothing was changed (the earlier steps were rolled back)"
    assert (info.value.path, info.value.errno) == ("/sys/x", 16)
    assert ctx.extras["log"] == ["+a", "+b", "-b", "-a"]  # the failed step is never undone
    assert not (tmp_path / JOURNAL).exists()


def test_effect_is_verified(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(HostIOError) as info:
        execute(Plan.of([Note("a"), Note("b", "noop")], ""), ctx)
    assert info.value.message == "step 2/2 note b failed: the kernel accepted the write but nothing changed (note b)"
    assert ctx.extras["log"] == ["+a", "+b", "-a"]


def test_state_file_errors_become_host_errors(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(HostIOError) as info:
        execute(Plan.of([Note("a"), Note("b", "oserror")], ""), ctx)
    assert info.value.message == "step 2/2 note b failed: Permission denied: /var/lib/vgpuadm/x"
    assert ctx.extras["log"] == ["+a", "-a"]


def test_interrupt_rolls_back_then_surfaces(tmp_path: Path) -> None:
    """^C surfaces as Interrupted (exit 130) naming what was rolled back (the CLI prints it, tests/unit/
    test_rollback.py sends a real SIGINT)."""
    ctx = _ctx(tmp_path)
    with pytest.raises(Interrupted) as info:
        execute(Plan.of([Note("a"), Note("b", "interrupt")], ""), ctx)
    assert (info.value.message, info.value.exit_code) == ("interrupted: rolled back 1 step (note a)", 130)
    assert ctx.extras["log"] == ["+a", "-a"]
    assert not (tmp_path / JOURNAL).exists()


def test_incomplete_rollback_keeps_the_journal_for_recover(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    with pytest.raises(HostIOError) as info:
        execute(Plan.of([Note("a", "undo"), Note("b"), Note("c", "error")], ""), ctx)
    assert info.value.hint == ("rollback incomplete (undo of note a: cannot undo a): run `vgpuadm recover`")
    assert read_journal(str(tmp_path))["state"] == "rolling-back"  # type: ignore[index]
    ctx.extras["log"].clear()
    ctx.extras["undo_fails"] = True
    with pytest.raises(HostIOError, match=r"^rollback of the interrupted change incomplete: undo of note b"):
        recover(ctx)
    ctx.extras["undo_fails"] = False
    with pytest.raises(HostIOError, match=r"^rollback of the interrupted change incomplete: undo of note a"):
        recover(ctx)  # note a can never be undone: the journal stays until a person looks
    assert (tmp_path / JOURNAL).exists()


def test_unknown_step_kind_is_refused_before_anything_runs(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Orphan(Step):
        def describe(self) -> str:
            return "orphan"

    ctx = _ctx(tmp_path)
    with pytest.raises(UsageError, match=r"^no handler registered for step kind 'step'$"):
        execute(Plan.of([Note("a"), Orphan()], ""), ctx)
    assert ctx.extras["log"] == []


def test_steps_in_distinct_lanes_run_at_once_and_read_as_one_at_a_time(tmp_path: Path) -> None:
    """Consecutive steps whose handler names a lane (a domain's definition: `apply -f` of many VMs) run on threads
    at once — the barrier of 3 would time out one at a time — each journaled as in flight before the wave starts;
    the progress lines and the result are those of a run one step at a time."""
    ctx = _ctx(tmp_path, LANES)
    ctx.extras["barrier"] = threading.Barrier(3, timeout=10)
    lines: list[str] = []
    plan = Plan.of([Note("a"), LaneNote("b", lane="x"), LaneNote("c", lane="y"), LaneNote("d", lane="z"), Note("e")],
                   "lanes")  # fmt: skip
    result = execute(plan, ctx, progress=lambda n, total, what: lines.append(f"[{n}/{total}] {what}"))
    assert result.applied == tuple(f"step {i}/5 note {x}" for i, x in enumerate("abcde", 1))
    assert lines == [f"[{i}/5] note {x}" for i, x in enumerate("abcde", 1)]
    log = ctx.extras["log"]
    assert (log[0], sorted(log[1:4]), log[4]) == ("+a", ["+b", "+c", "+d"], "+e")
    assert [j["current"] for j in ctx.extras["journals"]] == [0, 3, 3, 3, 4]  # b, c, d: all three may have run
    assert not (tmp_path / JOURNAL).exists()


def test_a_failure_in_a_wave_rolls_back_the_steps_of_the_wave_that_ran(tmp_path: Path) -> None:
    """The first failed step of a wave is the error, as one at a time; the wave's later steps that ran are undone
    with the earlier ones (in reverse order of the plan); no progress line after the failed step's."""
    ctx = _ctx(tmp_path, LANES)
    ctx.extras["barrier"] = threading.Barrier(3, timeout=10)
    lines: list[int] = []
    plan = Plan.of([LaneNote("b", lane="x"), LaneNote("c", "error", lane="y"), LaneNote("d", lane="z")], "")
    with pytest.raises(HostIOError) as info:
        execute(plan, ctx, progress=lambda n, total, what: lines.append(n))
    assert info.value.message == (
        "step 2/3 note c failed: writing '1' to /sys/x failed: Device or resource busy (EBUSY)"
    )
    assert info.value.hint == "nothing was changed (the earlier steps were rolled back)"
    assert lines == [1, 2]
    log = ctx.extras["log"]
    assert (sorted(log[:2]), log[2:]) == (["+b", "+d"], ["-d", "-b"])
    assert not (tmp_path / JOURNAL).exists()


def test_a_bug_beside_a_failure_in_a_wave_is_undone_too(tmp_path: Path) -> None:
    """A later step of the wave that raised a bug after making its change is undone with the rest when an earlier
    one failed: the failure's error is raised, and nothing of the wave stays."""
    ctx = _ctx(tmp_path, LANES)
    ctx.extras["barrier"] = threading.Barrier(3, timeout=10)
    plan = Plan.of([LaneNote("a", lane="x"), LaneNote("b", "error", lane="y"), LaneNote("c", "bug", lane="z")], "")
    with pytest.raises(HostIOError) as info:
        execute(plan, ctx)
    assert info.value.message.startswith("step 2/3 note b failed: ")
    log = ctx.extras["log"]
    assert (sorted(log[:2]), log[2:]) == (["+a", "+c"], ["-c", "-a"])
    assert not (tmp_path / JOURNAL).exists()


def test_interrupt_in_a_wave_rolls_back_what_ran(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, LANES)
    ctx.extras["barrier"] = threading.Barrier(2, timeout=10)
    with pytest.raises(Interrupted) as info:
        execute(Plan.of([LaneNote("b", lane="x"), LaneNote("c", "interrupt", lane="y")], ""), ctx)
    assert (info.value.message, info.value.exit_code) == ("interrupted: rolled back 1 step (note b)", 130)
    assert ctx.extras["log"] == ["+b", "-b"]
    assert not (tmp_path / JOURNAL).exists()


def test_waves_group_distinct_lanes_and_end_at_the_crash_step(tmp_path: Path) -> None:
    """A wave: consecutive steps in distinct lanes; a step without a lane, a repeated lane and the test crash
    hook's step (the steps after it must never run) end it; workers=1 runs every step alone."""
    ctx = _ctx(tmp_path, LANES)
    plan = Plan.of([Note("a"), LaneNote("b", lane="x"), LaneNote("c", lane="y"), LaneNote("d", lane="x"),
                    LaneNote("e", lane="z"), Note("f"), LaneNote("g", lane="x"), LaneNote("h", lane="y")], "")  # fmt: skip
    assert executor_mod._waves(plan, 0, ctx, 0) == [[0], [1, 2], [3, 4], [5], [6, 7]]
    assert executor_mod._waves(plan, 0, ctx, 2) == [[0], [1], [2, 3, 4], [5], [6, 7]]
    assert executor_mod._waves(plan, 10, ctx, 14) == [[0], [1, 2], [3], [4], [5], [6, 7]]
    ctx.workers = 1
    assert executor_mod._waves(plan, 0, ctx, 0) == [[n] for n in range(8)]
