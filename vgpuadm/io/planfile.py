"""Plan files (`vgpuadm apply -f plan.yaml`): load, check against vgpuadm/schemas/plan-v1.schema.json, convert.

Every error names the place: `plan.yaml:7: vms.web01.count: must be ≥ 1`. Locations come from PyYAML's node marks,
so the plan is composed into nodes once, checked, and only then turned into Python values.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from vgpuadm.errors import UsageError
from vgpuadm.plan.desired import DesiredPlan, Display, VmSpec, format_params
from vgpuadm.schemas import load

# -- loading ------------------------------------------------------------------------------------------------------


class PlanLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's base-60 numbers: unquoted `0000:01:00.0` would otherwise load as 60.0."""


PlanLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
PlanLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
PlanLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def plan_schema() -> dict[str, Any]:

    return load("plan-v1")


def load_plan(path: str) -> DesiredPlan:
    """Read, validate and convert a plan file; UsageError `file:line: key.path: problem` on the first fault."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read plan {path}: {exc.strerror}", "pass an existing YAML file to -f") from None
    return parse_plan(text, os.path.basename(path))


def parse_plan(text: str, source: str = "plan.yaml") -> DesiredPlan:
    try:
        node = yaml.compose(text, Loader=PlanLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 0
        raise UsageError(f"{source}:{line}: not valid YAML: {exc.problem}", "fix the YAML syntax") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML: {exc}", "fix the YAML syntax") from None
    if node is None:
        raise UsageError(f"{source}:1: the plan is empty", "write at least `vms: {web01: {type: nvidia-63}}`")
    _check_duplicate_keys(node, source, ())
    data = yaml.load(text, Loader=PlanLoader)  # PlanLoader is a SafeLoader
    _validate(data, node, source)
    return _to_plan(data, node, source)


def plan_from_data(data: Mapping[str, Any], source: str = "plan") -> DesiredPlan:
    """A plan given as data (the Ansible module's options) rather than as a file: checked against the same schema
    and converted the same way. It has no lines, so faults name only the key path (`source: vms.web01.count: must
    be ≥ 1`) and its VMs carry line 0, which the apply planner takes as "no place to name"."""
    node = yaml.compose(json.dumps(data, default=str), Loader=PlanLoader)  # JSON is YAML: the nodes _validate reads
    assert node is not None  # a JSON document is never empty
    try:
        _validate(data, node, source)
        plan = _to_plan(data, node, source)
    except UsageError as exc:
        raise UsageError(re.sub(rf"^{re.escape(source)}:\d+: ", f"{source}: ", exc.message), exc.hint) from None
    vms = {name: dataclasses.replace(spec, line=0, key_lines={}) for name, spec in plan.vms.items()}
    return DesiredPlan(source=source, vms=vms)


def _check_duplicate_keys(node: yaml.Node, source: str, path: tuple[str, ...]) -> None:
    # PyYAML keeps the last of two equal keys silently; a plan naming a VM twice is a mistake worth stopping.
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                raise _fault(source, key, (*path, name), "duplicate key", "name each key once")
            seen.add(name)
            _check_duplicate_keys(value, source, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(item, source, (*path, str(i)))


def _validate(data: Any, node: yaml.Node, source: str) -> None:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(plan_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (_line_of(node, list(e.absolute_path)), e.path))
    if errors:
        err = errors[0]
        path = [str(p) for p in err.absolute_path]
        target = _node_at(node, path)
        problem, hint = _explain(err)
        if err.validator == "additionalProperties" and isinstance(target, yaml.MappingNode):
            extra = _unknown_keys(err)
            key_node = next((k for k, _ in target.value if str(k.value) in extra), None)
            if key_node is not None:
                raise _fault(source, key_node, [*path, str(key_node.value)], problem, hint)
        if err.validator == "propertyNames" and isinstance(target, yaml.MappingNode):
            key_node = next((k for k, _ in target.value if str(k.value) == str(err.instance)), None)
            if key_node is not None:
                raise _fault(source, key_node, [*path, str(err.instance)], problem, hint)
        raise _fault(source, target, path, problem, hint)


def _explain(err: Any) -> tuple[str, str]:
    """jsonschema's error as a short phrase plus a hint that says what to write instead."""
    v, arg = err.validator, err.validator_value
    if v == "minimum":
        return f"must be ≥ {arg}", f"use a whole number of at least {arg}"
    if v == "maximum":
        return f"must be ≤ {arg}", f"use a whole number of at most {arg}"
    if v == "type":
        kinds = " or ".join(arg) if isinstance(arg, list) else arg
        return f"must be {'an' if kinds[0] in 'aeiou' else 'a'} {kinds}, not {err.instance!r}", f"write a {kinds}"
    if v == "enum":
        return f"must be one of {', '.join(map(str, arg))}, not {err.instance!r}", "pick one of the listed values"
    if v == "const":
        return f"must be {arg!r}, not {err.instance!r}", f"write {arg!r} (the only plan format this version reads)"
    if v == "required":
        missing = [k for k in arg if k not in err.instance]
        return f"missing key {', '.join(missing)}", "see the plan example in README.md (Reboot survival)"
    if v == "additionalProperties":
        known = ", ".join(sorted(err.schema.get("properties", {})))
        return f"unknown key {', '.join(_unknown_keys(err))}", f"known keys here: {known}"
    if v == "pattern" or (v == "oneOf" and isinstance(err.instance, str)):
        return f"{err.instance!r} is not a PCI address", "write the full address, e.g. 0000:65:00.0"
    if v == "propertyNames":
        return f"{err.instance!r} is not a valid VM name", "use the libvirt domain name (letters, digits, _.+:-)"
    if v == "oneOf":
        return "must be one address or a list of addresses" if "passthrough" in list(
            err.absolute_path
        ) else "must be a string or a mapping", "see the plan example in README.md (Reboot survival)"
    if v in ("minItems", "uniqueItems"):
        return "must list at least one address, each once", "list each PCI function once"
    if v == "minLength":
        return "must not be empty", "write a value"
    return err.message, "see vgpuadm/schemas/plan-v1.schema.json"


def _unknown_keys(err: Any) -> list[str]:
    known = set(err.schema.get("properties", {}))
    return sorted(str(k) for k in err.instance if k not in known)


def _node_at(node: yaml.Node, path: Sequence[str]) -> yaml.Node:
    for part in path:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if str(k.value) == part), None)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            nxt = node.value[int(part)]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
    return node


def _key_node(node: yaml.Node, path: Sequence[str]) -> yaml.Node:
    """The key node naming path[-1] (where a person looks for "vms.web01"), else the value node."""
    parent = _node_at(node, path[:-1])
    if isinstance(parent, yaml.MappingNode):
        for key, _value in parent.value:
            if str(key.value) == path[-1]:
                return key
    return _node_at(node, path)


def _line_of(node: yaml.Node, path: Sequence[Any]) -> int:
    return _node_at(node, [str(p) for p in path]).start_mark.line + 1


def _fault(source: str, node: yaml.Node, path: Sequence[str], problem: str, hint: str) -> UsageError:
    where = ".".join(path) or "(top level)"
    return UsageError(f"{source}:{node.start_mark.line + 1}: {where}: {problem}", hint)


def _params(source: str, node: yaml.Node, vm: str, value: Any) -> str:
    try:
        return format_params(value)
    except UsageError as exc:
        raise _fault(
            source, _node_at(node, ["vms", vm, "params"]), ["vms", vm, "params"], exc.message, exc.hint
        ) from None


def _to_plan(data: Mapping[str, Any], node: yaml.Node, source: str) -> DesiredPlan:
    defaults = data.get("defaults") or {}
    vms: dict[str, VmSpec] = {}
    for name, body in (data.get("vms") or {}).items():
        name = str(name)
        body = body or {}
        vm_node = _key_node(node, ["vms", name])
        line = vm_node.start_mark.line + 1
        has_type, has_pt = "type" in body, "passthrough" in body
        if has_type == has_pt:
            problem = "names both type and passthrough" if has_type else "needs a type or passthrough"
            raise _fault(
                source, vm_node, ["vms", name], problem, "give a VM either `type: …` (+ count) or `passthrough: BDF`"
            )
        if has_pt and "count" in body:
            count_node = _node_at(node, ["vms", name, "count"])
            raise _fault(
                source,
                count_node,
                ["vms", name, "count"],
                "does not apply to passthrough",
                "list each function under passthrough instead",
            )
        passthrough = body.get("passthrough", ())
        if isinstance(passthrough, str):
            passthrough = (passthrough,)
        display = {**(defaults.get("display") or {}), **(body.get("display") or {})}
        vms[name] = VmSpec(
            name=name,
            type=body.get("type"),
            count=int(body.get("count", 1)),
            passthrough=tuple(a.lower() for a in passthrough),
            gpu=body["gpu"].lower() if body.get("gpu") else None,
            policy=body.get("policy", defaults.get("policy", "pack")),
            numa=body.get("numa"),
            params=_params(source, node, name, body.get("params")),
            display=Display(**display),
            line=line,
            key_lines={k: _key_node(node, ["vms", name, k]).start_mark.line + 1 for k in body},
        )
    return DesiredPlan(source=source, vms=vms)
