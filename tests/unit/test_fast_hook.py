"""`hook run` without typer (vgpuadm/cli/fast.py), as libvirt runs the installed hook at every domain start and
stop: the same output, exit code and host state as through the typer app, for what it takes; any other argument
list goes to typer; and the process imports neither typer nor the whole vgpuadm.api."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_hook_run import UUIDS, bare, hook, on_demand
from vgpuadm.cli import fast
from vgpuadm.executor import LOCK_POLICY
from vgpuadm.sim.profiles import build
from vgpuadm.sim.treestate import tree_state

REPO = Path(__file__).resolve().parents[2]


def test_hook_run_answers_as_through_typer(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for typer_only in (False, True):
        root = tmp_path / ("typer" if typer_only else "fast")
        build("p4", str(root))
        doms = {f"vm{i}": on_demand(root, f"vm{i}", UUIDS[i], "P4-8Q") for i in range(3)}
        calls = [("vm0", "prepare", "begin"), ("vm1", "prepare", "begin"), ("vm2", "prepare", "begin"),
                 ("vm0", "started", "begin"), ("vm0", "release", "end"), ("vm2", "prepare", "begin")]  # fmt: skip
        seen = []
        for name, op, sub in calls:
            if typer_only:
                monkeypatch.setattr(fast, "_hook_run", lambda *_a: None)
            r = hook(cli, monkeypatch, root, name, op, sub, doms[name])
            monkeypatch.undo()
            seen.append((r.code, r.out, r.err.replace(str(root), "ROOT"), len(tree_state(root))))
        runs.append(seen)
    assert runs[0] == runs[1]
    assert [code for code, *_ in runs[0]] == [0, 0, 4, 0, 0, 0]  # the third whole P4 fits once vm0 gave its back
    assert (LOCK_POLICY.timeout, LOCK_POLICY.on_wait, LOCK_POLICY.argv) == (30.0, None, ())  # reset after the run


@pytest.mark.parametrize(
    "words",
    [
        ["--help"],
        ["web01", "prepare"],
        ["web01", "prepare", "begin", "-", "x"],
        ["web01", "prepare", "begin", "x"],
        ["--vm", "prepare", "begin"],
        ["web01", "-c", "begin", "-"],
    ],
)
def test_other_argument_lists_go_to_typer(words: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vgpuadm.cli.hookrun.run_hook", lambda *_a: pytest.fail("ran without typer"))
    assert fast.try_run(["hook", "run", *words], fast.Console()) is None


@pytest.mark.process
def test_hook_run_imports_neither_typer_nor_an_orchestrator(sim_host) -> None:
    """A domain without on-demand devices (most): not even the orchestrator, the lock or discovery is loaded (the
    api is, but it imports a name's home only when the name is used)."""
    code = ("import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); "
            "ops = any(m.startswith('vgpuadm.ops') for m in sys.modules); "
            "print(code, ops, *(m in sys.modules for m in ('typer', 'vgpuadm.host.discover', 'filelock')))")  # fmt: skip
    argv = ["--root", str(sim_host("p4")), "hook", "run", "web01", "prepare", "begin", "-"]
    r = subprocess.run([sys.executable, "-c", code, *argv], input=bare("web01", UUIDS[0]), capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True, cwd="/")  # fmt: skip
    assert (r.stdout.splitlines()[-1], r.stderr) == ("0 False False False False", "")
