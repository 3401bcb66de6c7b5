"""The api module's lazy re-exports: the names type checkers see (the imports under TYPE_CHECKING) are exactly the
names it serves at run time (_HOMES), each resolves to the object its home module defines, and importing the api
loads no orchestrator until a name is used."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import vgpuadm.api as api

API = Path(api.__file__)


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    tree = ast.parse(API.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {
        (a.asname or a.name): (n.module or "", a.name)
        for n in block.body
        if isinstance(n, ast.ImportFrom)
        for a in n.names
        if n.module != "typing"
    }


def test_the_names_type_checkers_see_are_the_names_served() -> None:
    assert _type_checking_imports() == api._HOMES
    assert api.__all__ == sorted(api._HOMES)


def test_every_name_resolves_to_its_home() -> None:
    for name, (module, attr) in api._HOMES.items():
        home = importlib.import_module(module)
        expected = getattr(home, attr, None) or importlib.import_module(f"{module}.{attr}")
        assert getattr(api, name) is expected, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        api.no_such_verb  # noqa: B018
    except AttributeError as e:
        assert str(e) == "module 'vgpuadm.api' has no attribute 'no_such_verb'"
    else:
        raise AssertionError("no AttributeError")


@pytest.mark.process
def test_importing_the_api_loads_no_orchestrator() -> None:
    """A fresh interpreter (the module cache of this one already holds everything)."""
    code = "import sys, vgpuadm.api; print(sorted(m for m in sys.modules if m.startswith('vgpuadm.ops')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
