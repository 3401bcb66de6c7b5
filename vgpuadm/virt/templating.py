"""The one jinja2 environment over templates/ (hostdev XML, domain metadata, the HTML report): autoescaped, strict
about undefined values. jinja2 is imported on first use only."""

from __future__ import annotations

import os
from functools import cache
from typing import Any


def template_dir() -> str:
    """templates/ shipped inside the package (wheel), else the repo root's (editable install, checkout)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = package
    for candidate in (os.path.join(package, "templates"), os.path.join(os.path.dirname(package), "templates")):
        if os.path.isdir(os.path.join(candidate, "hostdev")):
            return candidate
    raise FileNotFoundError(f"vgpuadm templates not found next to {here}")


def readme_path() -> str:
    """README.md shipped inside the package (wheel), else the repo root's (editable install, checkout)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(package, "README.md"), os.path.join(os.path.dirname(package), "README.md")):
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"vgpuadm's README.md not found next to {package}")


@cache
def environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir()),
        autoescape=True,  # every value lands in an attribute or text node: escape ' " < > &
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
    )
