"""Shared fixtures: simulated hosts built fresh per test, and the CLI run in-process."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.sim.profiles import build

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def sim_host(tmp_path: Path) -> Callable[[str], Path]:
    """Build a simulated host of a profile; returns its root."""

    def make(profile: str) -> Path:
        root = tmp_path / f"host-{profile}"
        build(profile, str(root))
        return root

    return make


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Run `vgpuadm ARGS…` in-process; returns exit code, stdout and stderr."""

    def invoke(*args: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = run(list(args), Console(out, err))
        return Result(code, out.getvalue(), err.getvalue())

    return invoke
