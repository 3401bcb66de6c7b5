"""JSON Schemas (draft 2020-12) of every `--json` document: `load("gpus")` returns the parsed schema.

jsonschema is imported only by `validate`, never on the read commands' fast path; `conforms` answers "certainly
valid" for the common case without it (a plan file is checked with it first, jsonschema only to name a fault)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from functools import cache
from typing import Any

NAMES = ("gpus", "types", "devices")
MIG_NAMES = ("mig-status", "mig-profiles", "mig-instances")  # `vgpuadm mig status|profiles|instances --json`


@cache
def load(name: str) -> dict[str, Any]:
    """The schema `<name>.schema.json` shipped in this package."""
    # next to this file, as templating.py finds templates/ (importlib.resources cost ~10 ms of imports on `apply -f`)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.schema.json"), encoding="utf-8") as f:
        text = f.read()
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(name: str, document: Any) -> None:
    """Raise jsonschema.ValidationError when `document` does not match schema `name`."""
    import jsonschema

    jsonschema.Draft202012Validator(load(name), format_checker=jsonschema.FormatChecker()).validate(document)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "null": lambda v: v is None,
}
_ANNOTATIONS = frozenset(("$schema", "$id", "$defs", "title", "description"))
_PLAIN = (str, int, type(None))  # bool is an int: values compared by type and value (jsonschema: True != 1)


def conforms(schema: dict[str, Any], instance: Any) -> bool:
    """Whether `instance` (values as json or a YAML safe loader makes them) certainly matches `schema` (draft
    2020-12), without importing jsonschema: exact for the keywords below over dicts with text keys, lists, text,
    whole numbers, booleans and None; anything else (another keyword, a float, a non-text key) is "not certain",
    False, as is a fault — then ask jsonschema, which also says where the fault is."""
    return _check(schema, instance, schema) is True


def _check(schema: Any, v: Any, root: dict[str, Any]) -> bool | None:
    """True: matches; False: certainly does not; None: not certain (a case `conforms` leaves to jsonschema)."""
    if isinstance(v, float) or not isinstance(schema, dict):
        return None
    verdict: bool | None = True
    for key, arg in schema.items():
        result = _keyword(key, arg, v, schema, root)
        if result is False:
            return False
        if result is None:
            verdict = None
    return verdict


def _keyword(key: str, arg: Any, v: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool | None:
    if key in _ANNOTATIONS:
        return True
    if key == "$ref":
        if not (isinstance(arg, str) and arg.startswith("#/$defs/")):
            return None
        target = root.get("$defs", {}).get(arg[len("#/$defs/") :])
        return None if target is None else _check(target, v, root)
    if key == "type":
        kinds = arg if isinstance(arg, list) else [arg]
        if not all(k in _TYPES for k in kinds):
            return None
        return any(_TYPES[k](v) for k in kinds)
    if key in ("const", "enum"):
        choices = [arg] if key == "const" else arg
        if not isinstance(v, _PLAIN) or not all(isinstance(c, _PLAIN) for c in choices):
            return None
        return any(type(c) is type(v) and c == v for c in choices)
    if key == "oneOf":
        results = [_check(sub, v, root) for sub in arg]
        return None if None in results else results.count(True) == 1
    if key in ("minimum", "maximum", "minLength", "pattern"):
        return _scalar_keyword(key, arg, v)
    if key in ("minItems", "uniqueItems", "items"):
        if not isinstance(v, list):
            return True
        if key == "minItems":
            return len(v) >= arg
        if key == "uniqueItems":
            return None if not all(isinstance(x, str) for x in v) else (not arg or len(set(v)) == len(v))
        return _all(_check(arg, x, root) for x in v)
    if key in ("required", "properties", "additionalProperties", "propertyNames"):
        if not isinstance(v, dict):
            return True
        if not all(isinstance(k, str) for k in v):
            return None
        if key == "required":
            return all(k in v for k in arg)
        if key == "properties":
            return _all(_check(sub, v[k], root) for k, sub in arg.items() if k in v)
        if key == "propertyNames":
            return _all(_check(arg, k, root) for k in v)
        extra = [k for k in v if k not in schema.get("properties", {})]
        if "patternProperties" in schema:
            return None
        return (not extra) if isinstance(arg, bool) and not arg else _all(_check(arg, v[k], root) for k in extra)
    return None


def _scalar_keyword(key: str, arg: Any, v: Any) -> bool | None:
    if key in ("minimum", "maximum"):
        if not isinstance(v, int) or isinstance(v, bool):
            return True  # jsonschema applies them to numbers only
        return v >= arg if key == "minimum" else v <= arg
    if not isinstance(v, str):
        return True
    return len(v) >= arg if key == "minLength" else re.search(arg, v) is not None


def _all(results: Any) -> bool | None:
    """False at the first certain fault; else None when any was not certain; else True."""
    verdict: bool | None = True
    for result in results:
        if result is False:
            return False
        if result is None:
            verdict = None
    return verdict
