"""Lazy command loading (vgpuadm/cli/app.py): a run builds only the invoked command's module, and what it prints
is exactly what the whole app prints. The table of modules is checked against what each module registers."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from tests.conftest import Result
from vgpuadm.cli import app as app_mod


def test_the_module_table_names_what_each_module_registers() -> None:
    for name, words in app_mod.MODULES:
        module = importlib.import_module(f"vgpuadm.cli.{name}")
        if name in app_mod.SUB_APPS:
            assert (name,) == words
            continue
        sub = typer.Typer()
        module.register(sub)
        got = [c.name for c in sub.registered_commands] + [g.name for g in sub.registered_groups]
        assert tuple(got) == words, name
    full = typer.main.get_command(app_mod.build_app())
    listed = {w for _m, words in app_mod.MODULES for w in words} | set(app_mod.READ_COMMANDS)
    assert set(full.commands) == listed


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        ([], None),
        (["--help"], None),
        (["--version"], None),
        (["--install-completion"], None),
        (["restore", "--domain-xml-dir", "d"], "restore"),
        (["--root", "/r", "-c", "test:///default", "--wait", "3", "--no-wait", "apply", "-f", "p"], "apply"),
        (["--root=/r", "--connect=qemu:///system", "--wait=3", "mdev", "create"], "mdev"),
        (["--root", "--help", "types"], "types"),  # --help is --root's value here
        (["--", "restore"], None),
    ],
)
def test_command_word(argv: list[str], word: str | None) -> None:
    assert app_mod.command_word(argv) == word


def test_modules_for() -> None:
    assert app_mod.modules_for(["--root", "/r", "restore"]) == ("declarative",)
    assert app_mod.modules_for(["types", "--json"]) == ()
    assert app_mod.modules_for(["give-back", "--vm", "a"]) == ("app",)
    for argv in (["man"], ["resotre"], ["--help"], []):
        assert app_mod.modules_for(argv) is None


def _words() -> list[str]:
    return [*app_mod.READ_COMMANDS, *(w for _m, words in app_mod.MODULES for w in words)]


def _both(cli: Callable[..., Result], capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[Result, str, str]:
    """The result and what went to sys.stdout/sys.stderr directly (click writes its help there)."""
    r = cli(*argv)
    captured = capsys.readouterr()
    return r, captured.out, captured.err


@pytest.mark.parametrize("word", _words())
def test_a_command_prints_the_same_help_as_in_the_whole_app(
    word: str, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lazy = _both(cli, capsys, word, "--help")
    monkeypatch.setattr(app_mod, "modules_for", lambda _argv: None)
    assert _both(cli, capsys, word, "--help") == lazy
    assert lazy[0].code == 0 and f"Usage: vgpuadm {word}" in lazy[1]


def test_errors_are_those_of_the_whole_app(
    cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [("resotre",), ("restore", "--bogus"), ("mdev",), ("--root",), ("sim", "reboot"), ("mdev", "create")]
    lazy = [_both(cli, capsys, *argv) for argv in cases]
    monkeypatch.setattr(app_mod, "modules_for", lambda _argv: None)
    assert [_both(cli, capsys, *argv) for argv in cases] == lazy
    assert lazy[0][0].code == 2 and "No such command 'resotre'" in lazy[0][0].err


@pytest.mark.process
def test_a_command_imports_only_its_own_module(sim_host: Callable[[str], Path]) -> None:
    """`recover` imports the host commands, not the declarative, MIG or hook commands."""
    code = (
        "import sys; from vgpuadm.cli.app import run; code = run(sys.argv[1:]); "
        "print(code, sorted(m for m in sys.modules if m.startswith('vgpuadm.cli.')))"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([sys.executable, "-c", code, "--root", str(sim_host("p4")), "recover"],
                       capture_output=True, text=True, env=env, check=True)  # fmt: skip
    assert r.stdout.splitlines()[-1] == (
        "0 ['vgpuadm.cli.app', 'vgpuadm.cli.console', 'vgpuadm.cli.fast', 'vgpuadm.cli.host', 'vgpuadm.cli.read']"
    )
