"""Concurrency and crashes: 16 forked processes running the CLI at once never over-allocate, a held lock gives a clear conflict, and a
process killed between two steps leaves a journal that `recover` rolls back (or finishes)."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpuadm import api
from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.errors import ConflictError
from vgpuadm.executor import CRASH_HOOK, JOURNAL, ExecContext, execute, read_journal
from vgpuadm.host.root import FileLock, LockTimeout
from vgpuadm.sim.treestate import diff, tree_state

GPU = "0000:01:00.0"


def _vgpuadm(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vgpuadm", "--root", str(root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _cli_in_child(root: str, args: list[str], start: Any, results: Any) -> None:
    """Runs in a forked process: wait for the others, then run the CLI in-process (typer is already imported)."""
    out, err = io.StringIO(), io.StringIO()
    start.wait()
    code = run(["--root", root, *args], Console(out, err))
    results.put((code, out.getvalue(), err.getvalue()))


def _race(root: Path, n: int, args: list[str]) -> list[tuple[int, str, str]]:
    """n forked processes run `vgpuadm ARGS` at the same moment; returns (exit code, stdout, stderr) of each."""
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_cli_in_child, args=(str(root), args, start, results)) for _ in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    return out


def test_sixteen_processes_race_for_the_last_four(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    plan, _ = api.plan_create(api.discover(str(root)), "nvidia-63", 4, gpu=GPU)
    api.apply(plan, str(root))
    run(["mdev", "--help"], Console(io.StringIO(), io.StringIO()))  # import typer once, before forking
    results = _race(root, 16, ["mdev", "create", "--type", "nvidia-63", "--gpu", GPU])
    codes = sorted(code for code, _, _ in results)
    assert codes == [0] * 4 + [4] * 12, results
    for code, _out, err in results:
        # a waiter names the holder, or "another process" when the holder has not written its name yet (under load)
        err = "".join(line for line in err.splitlines(True) if not line.startswith("warning: waiting for "))
        if code:
            assert err.startswith(f"error: No room for 1 × nvidia-63 on {GPU}: {GPU}: no free instances of nvidia-63")
    snap = api.discover(str(root))
    on_gpu = [m for m in snap.mdevs.values() if m.parent == GPU]
    assert len(on_gpu) == 8
    assert {t.type_id: t.available_instances for t in snap.types() if t.parent == GPU}["nvidia-63"] == 0
    assert read_journal(str(root)) is None


@pytest.mark.process
def test_lock_held_by_another_process_is_a_clear_conflict(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from vgpuadm.executor import host_lock\n"
         f"with host_lock({str(root)!r}):\n    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        plan, _ = api.plan_create(api.discover(str(root)), "nvidia-63")
        sysfs = api.open_sysfs(str(root))
        with pytest.raises(ConflictError) as info:
            execute(plan, ExecContext(sysfs, sysfs.root, lock_timeout=0.2))
        assert (
            info.value.message
            == f"another vgpuadm is changing this host: pid {holder.pid} (vgpuadm), still after 0.2 s"
        )
    finally:
        holder.kill()
        holder.wait()
    assert api.discover(str(root)).mdevs == {}


def test_the_lock_counts_a_threads_holds_and_excludes_other_threads_and_descriptors(tmp_path: Path) -> None:
    """host/root.py (the host lock's and the simulated kernel's): re-entrant within a thread; another thread, or
    another FileLock on the same file, waits (here: times out) as another process would; the file is 0600 as asked."""
    path = str(tmp_path / "lock")
    lock = FileLock(path, mode=0o600)
    lock.acquire(timeout=0)
    lock.acquire()
    assert (lock.lock_counter, lock.is_locked, os.stat(path).st_mode & 0o777) == (2, True, 0o600)
    seen: list[object] = []

    def other_thread() -> None:
        seen.append(lock.lock_counter)
        start = time.monotonic()
        try:
            lock.acquire(timeout=0.2)
        except LockTimeout:
            seen.append(round(time.monotonic() - start, 1))

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert seen == [0, 0.2]
    with pytest.raises(LockTimeout):
        FileLock(path).acquire(timeout=0)
    lock.release()
    assert lock.lock_counter == 1
    lock.release()
    assert (lock.lock_counter, lock.is_locked) == (0, False)
    with FileLock(path) as again:
        assert again.lock_counter == 1
        with pytest.raises(RuntimeError, match="already locked by this thread through another FileLock"):
            FileLock(path).acquire()  # waiting for itself would hang


def test_the_lock_file_is_never_opened_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        FileLock(str(tmp_path / "lock")).acquire(timeout=0)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.process
def test_file_lock_waits_for_another_process_and_counts_its_own_holds(tmp_path: Path) -> None:
    """host/root.py's FileLock: an flock another process holds is waited for up to the timeout (0: one try), then
    LockTimeout; in the holding thread it is re-entrant and only the last release lets go; the file is made with
    the mode asked, less the umask (never more open than asked)."""
    path = tmp_path / "lock"
    old = os.umask(0o077)
    try:
        lock = FileLock(str(path), mode=0o640)
        with lock:
            assert (lock.is_locked, lock.lock_counter, oct(path.stat().st_mode & 0o777)) == (True, 1, "0o600")
            lock.acquire(timeout=0)
            assert lock.lock_counter == 2
            lock.release()
            assert lock.lock_counter == 1
    finally:
        os.umask(old)
    assert (lock.is_locked, lock.lock_counter) == (False, 0)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"fd = os.open({str(path)!r}, os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout):
            lock.acquire(timeout=0)
        start = time.monotonic()
        with pytest.raises(LockTimeout):
            lock.acquire(timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 5
        assert (lock.is_locked, lock.lock_counter) == (False, 0)
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        lock.acquire(timeout=10)  # the holder exits: its flock goes with it
        assert lock.lock_counter == 1
        lock.release()
    finally:
        holder.kill()
        holder.wait()


def _crash_after_two(root: Path) -> tuple[dict[str, object], list[str]]:
    before = tree_state(root)
    proc = _vgpuadm(root, "mdev", "create", "--type", "P4-1Q", "--gpu", GPU, "--count", "3", env={CRASH_HOOK: "2"})
    assert proc.wait(timeout=60) == 99
    journal = read_journal(str(root))
    assert journal is not None and journal["state"] == "applying" and journal["current"] == 1
    uuids = [s["uuid"] for s in journal["plan"]["steps"]]  # type: ignore[index]
    assert sorted(api.discover(str(root)).mdevs) == sorted(uuids[:2])
    return before, uuids


@pytest.mark.process
def test_killed_between_steps_is_rolled_back_by_recover(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("p4")
    before, uuids = _crash_after_two(root)
    blocked = cli("--root", str(root), "mdev", "create", "--type", "P4-1Q")
    assert blocked.code == 5
    assert blocked.err == (
        f"error: an interrupted change is pending in /{JOURNAL}\n"
        "hint: run `vgpuadm recover` to roll it back (or `vgpuadm recover --finish` to complete it)\n"
    )
    res = cli("--root", str(root), "recover")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"rolled back: create mdev {uuids[1]} of type nvidia-63 on {GPU}",
        f"rolled back: create mdev {uuids[0]} of type nvidia-63 on {GPU}",
    ]
    assert diff(before, tree_state(root)) == {}
    assert not (root / JOURNAL).exists()
    assert cli("--root", str(root), "recover").out == "nothing to recover\n"


@pytest.mark.process
def test_killed_between_steps_can_be_finished(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    _, uuids = _crash_after_two(root)
    done = api.recover(str(root), finish=True)
    assert done == [f"applied: create mdev {uuids[2]} of type nvidia-63 on {GPU}"]
    assert sorted(api.discover(str(root)).mdevs) == sorted(uuids)
    assert read_journal(str(root)) is None


@pytest.mark.process
def test_recover_undoes_steps_whose_journal_update_was_lost(sim_host: Callable[[str], Path]) -> None:
    """Per-step journal updates skip the directory fsync, so a crash may leave an older index: recovery undoes
    the whole plan (undo of a step that never ran is a no-op), so nothing leaks either way."""
    root = sim_host("p4")
    before, _ = _crash_after_two(root)
    journal = read_journal(str(root))
    assert journal is not None
    journal["current"] = journal["done"] = 0
    (root / JOURNAL).write_text(json.dumps(journal))
    api.recover(str(root))
    assert diff(before, tree_state(root)) == {}
