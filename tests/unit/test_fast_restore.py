"""`restore` without typer (vgpuadm/cli/fast.py), as the boot unit runs it: the same output, exit code, host state
and lock policy as through the typer app, for every argument list it takes; any other list goes to typer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result
from tests.domains import domain, save
from vgpuadm import api
from vgpuadm.cli import fast
from vgpuadm.executor import LOCK_POLICY
from vgpuadm.model import Allocation
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import metadata_xml

REPO = Path(__file__).resolve().parents[2]


def _host(sim_host: Callable[[str], Path], tmp_path: Path) -> tuple[str, Path]:
    """The p4 host with 2 mdevs per GPU recorded in saved domain XML, plus one the host cannot make (a type its
    parent does not offer), so restore has work, output and a problem to report."""
    root = str(sim_host("p4"))
    snap = api.discover(root)
    saved = tmp_path / "saved"
    saved.mkdir()
    wanted = [(p, "nvidia-63") for p in sorted(snap.mdev_parents) for _ in range(2)] + [("0000:3b:00.0", "nvidia-999")]
    for n, (parent, type_id) in enumerate(wanted):
        name, duuid, u = f"vm{n}", f"00000000-0000-4000-8000-{n:012d}", f"11111111-0000-4000-8000-{n:012d}"
        a = Allocation(name, "mdev", type_id, parent, u, domain_uuid=duuid, slot=0, extra={"display": "off"})
        save(saved, domain(name, duuid, metadata=metadata_xml([a], snap.host_key)))
    return root, saved


def _argvs(root: str, saved: Path) -> list[list[str]]:
    return [
        ["--root", root, "restore", "--domain-xml-dir", str(saved), "--timeout", "1"],
        [f"--root={root}", "restore", "--json", f"--domain-xml-dir={saved}", "--timeout=0.5"],
        ["--root", root, "restore", "--domain-xml-dir", str(saved), "--timeout", "0"],  # refused: not > 0
        ["--root", root, "restore", "--timeout", "3601", "--json"],  # refused: over an hour
    ]


def test_restore_answers_as_through_typer(
    sim_host: Callable[[str], Path], tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, saved = _host(sim_host, tmp_path)
    for argv in _argvs(root, saved):
        runs = []
        for typer_only in (False, True):
            assert cli("sim", "reboot", root).code == 0
            if typer_only:
                monkeypatch.setattr(fast, "_restore", lambda *_a: None)
            runs.append((cli(*argv), tree_state(root)))
            monkeypatch.undo()
        assert runs[0] == runs[1], argv
    assert runs[0][0].code == 2  # the last case: a usage error
    assert (LOCK_POLICY.timeout, LOCK_POLICY.on_wait, LOCK_POLICY.argv) == (30.0, None, ())  # reset after the run


def test_restore_results(sim_host: Callable[[str], Path], tmp_path: Path, cli: Callable[..., Result]) -> None:
    root, saved = _host(sim_host, tmp_path)
    assert cli("sim", "reboot", root).code == 0
    r = cli("--root", root, "restore", "--domain-xml-dir", str(saved), "--timeout", "1")
    made = len(api.discover(root).mdevs)
    assert r.code == 3 and r.out.splitlines()[-1] == f"restored: {made} step(s) for {made + 1} recorded device(s)"
    assert r.err.startswith(f"error: 1 device(s) could not be restored: vgpu: vm{made}: mdev ")


@pytest.mark.parametrize(
    "rest",
    [
        ["--help"],
        ["--timeout", "1e1"],
        ["--timeout", " 5"],
        ["--timeout", "5", "--timeout", "6"],
        ["--json", "--json"],
        ["--domain-xml-dir", "--json"],
        ["--domain-xml-dir"],
        ["--domain-xml-dir="],
        ["--domains-xml", "d"],
        ["-c", "test:///default"],
        ["--timeout", "٣"],  # a digit, but not ASCII
    ],
)
def test_other_argument_lists_go_to_typer(rest: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vgpuadm.cli.declarative.restore", lambda *_a: pytest.fail("ran without typer"))
    assert fast.try_run(["restore", *rest], fast.Console()) is None


@pytest.mark.process
def test_restore_does_not_import_typer(sim_host: Callable[[str], Path]) -> None:
    code = "import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); print(code, 'typer' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", code, "--root", str(sim_host("p4")), "restore"],
                       capture_output=True, text=True, env=env, check=True, cwd="/")  # fmt: skip
    assert r.stdout.splitlines()[-1] == "0 False"


@pytest.mark.process
def test_restore_imports_only_what_its_phases_run(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    """The boot unit's `restore --domain-xml-dir` restoring devices loads the restore planner and what its phases
    run: not apply's plan file grammar (planfile, jsonschema, ruamel.yaml), the desired-state and reconcile planners,
    the other verbs' ops modules, nor the filelock package (the host lock is host/root.py's)."""
    root, saved = _host(sim_host, tmp_path)
    subprocess.run([sys.executable, "-m", "vgpuadm", "sim", "reboot", root], check=True, capture_output=True, cwd="/",
                   env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    unwanted = ("filelock", "jsonschema", "ruamel", "vgpuadm.io.planfile", "vgpuadm.plan.apply", "vgpuadm.plan.desired",
                "vgpuadm.plan.reconcile", "vgpuadm.ops.declarative", "vgpuadm.ops.host")  # fmt: skip
    code = ("import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); "
            f"print(code, sorted(m for m in sys.modules if m.split('.')[0] in {unwanted!r} or m in {unwanted!r}))")  # fmt: skip
    argv = ["--root", root, "restore", "--domain-xml-dir", str(saved), "--timeout", "1"]
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd="/",
                       env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    made = len(api.discover(root).mdevs)
    assert f"restored: {made} step(s) for {made + 1} recorded device(s)" in r.stdout
    assert r.stdout.splitlines()[-1] == "3 []"
