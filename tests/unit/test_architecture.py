"""The one-engine rules that import-linter cannot see: every layout and every recorded mode has its handler in the
one registry, and no module below the CLI hides an import of a vgpuadm module inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vgpuadm import modes
from vgpuadm.model import Layout
from vgpuadm.virt.xml import MODES as RECORDED_MODES

PACKAGE = Path(__file__).resolve().parents[2] / "vgpuadm"


@pytest.mark.parametrize("layout", list(Layout))
def test_every_layout_has_its_mode(layout: Layout) -> None:
    mode = modes.for_layout(layout)
    assert layout in mode.layouts and mode in modes.MODES


@pytest.mark.parametrize("name", RECORDED_MODES)
def test_every_recorded_mode_has_its_handler(name: str) -> None:
    assert modes.for_name(name).name == name


def _function_level_vgpuadm_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [
                f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {n}" for n in names if n.split(".")[0] == "vgpuadm"
            ]  # type: ignore[attr-defined]
    return found


def test_no_function_level_import_of_vgpuadm_outside_the_cli() -> None:
    files = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts]
    assert [hit for p in sorted(files) for hit in _function_level_vgpuadm_imports(p)] == []
