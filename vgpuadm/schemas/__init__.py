"""JSON Schemas (draft 2020-12) of every `--json` document: `load("gpus")` returns the parsed schema.

jsonschema is imported only by `validate`, never on the read commands' fast path."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

NAMES = ("gpus", "types", "devices")
MIG_NAMES = ("mig-status", "mig-profiles", "mig-instances")  # `vgpuadm mig status|profiles|instances --json`


@cache
def load(name: str) -> dict[str, Any]:
    """The schema `<name>.schema.json` shipped in this package."""
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(name: str, document: Any) -> None:
    """Raise jsonschema.ValidationError when `document` does not match schema `name`."""
    import jsonschema

    jsonschema.Draft202012Validator(load(name), format_checker=jsonschema.FormatChecker()).validate(document)
