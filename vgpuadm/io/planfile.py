"""Plan files (`vgpuadm apply -f plan.yaml`): load, check against vgpuadm/schemas/plan-v1.schema.json, convert.

Every error names the place: `plan.yaml:7: vms.web01.count: must be ≥ 1`. ruamel.yaml reads the plan as YAML 1.2
(core schema: unquoted `0000:01:00.0` is a string, not a YAML 1.1 base-60 number; only true/false are booleans) and
refuses duplicate keys itself. The plan is parsed once, into events that are screened, then built twice from them: as
plain Python values (the safe loader) to validate and convert, and round-trip, whose maps and lists know the line of
every key and value (`.lc`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.host.inputs import read_input, read_stream
from vgpuadm.model import PCI_HINT, pci_address
from vgpuadm.plan.desired import DesiredPlan, Display, VmSpec, format_params
from vgpuadm.plan.policies import GpuSpec
from vgpuadm.schemas import conforms, load

# -- loading ------------------------------------------------------------------------------------------------------


def plan_schema() -> dict[str, Any]:

    return load("plan-v1")


def load_plan(path: str) -> DesiredPlan:
    """Read (`-`: from stdin), validate and convert a plan file; UsageError `file:line: key.path: problem` on the first fault."""
    hint = "pass an existing YAML file to -f (or `-f -` and the plan on stdin)"
    if path == "-":
        data, source = read_stream(sys.stdin.buffer, "the plan on stdin", hint), "<stdin>"
    else:
        data = read_input(path, "plan", hint, pipes=True)
        source = path if path.startswith(("/dev/", "/proc/")) else os.path.basename(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(
            f"{source}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            "save the plan as UTF-8 text",
        ) from None
    return parse_plan(text, source)


def parse_plan(text: str, source: str = "plan.yaml") -> DesiredPlan:
    from ruamel.yaml import YAML  # lazily: ~30 ms of imports only `apply -f` needs
    from ruamel.yaml.constructor import DuplicateKeyError
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    try:
        events = _screen(YAML(typ="safe", pure=True).parse(text), source)  # pure: the C parser would read YAML 1.1
        # CommentedMap / CommentedSeq: .lc holds every key's and value's line
        marks = _construct(YAML(typ="rt"), events)
        data = _construct(YAML(typ="safe", pure=True), events)
    except DuplicateKeyError as exc:
        raise _duplicate_key(text, exc, source) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 0
        raise UsageError(f"{source}:{line}: not valid YAML: {exc.problem}", "fix the YAML syntax") from None
    except ReaderError as exc:  # its text spans two lines; name the character and its line instead
        line = text.count("\n", 0, exc.position) + 1
        raise UsageError(
            f"{source}:{line}: not valid YAML: character U+{exc.character:04X} is not allowed in YAML",
            "remove control characters from the plan",
        ) from None
    except YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}", "fix the YAML syntax") from None
    except TypeError:  # ruamel's round-trip loader cannot hash a mapping used as a key (`{vms: {}}: 1`)
        raise UsageError(f"{source}: a key of the plan is a mapping or a list",
                         "keys are names: VM names and setting names") from None  # fmt: skip
    if data is None:
        raise UsageError(f"{source}:1: the plan is empty", "write at least `vms: {web01: {type: nvidia-63}}`")
    _validate(data, marks, source)
    return _to_plan(data, marks, source)


VM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+:-]*")  # the schema's propertyNames pattern, matched whole
PASSTHROUGH_KEY = "passthrough"  # a VM's key listing the functions it gets whole
MAX_DEPTH = 32  # nesting a plan needs: vms → name → params is 3; the composer recurses per level
MAX_ALIASES = 64  # aliases (*name) a plan may use; each may copy a whole subtree (the "billion laughs")
MAX_NODES = 50_000  # values (scalars, maps, lists), aliases and merge keys expanded: ruamel parses ~10,000 a second
MAX_DIGITS = 64  # a plain number longer than this is no count (Python refuses int() past 4300 digits)
MAX_VMS = 1024  # VMs in one plan: far more than a host runs, and what --check plans in seconds


class _Replay:
    """The parser's side of a ruamel loader, serving events parsed once (what its composer asks of a parser)."""

    def __init__(self, events: list[Any]) -> None:
        self._events, self._next = events, 0

    def check_event(self, *choices: Any) -> bool:
        if self._next >= len(self._events):
            return False
        return not choices or isinstance(self._events[self._next], choices)

    def peek_event(self) -> Any:
        return self._events[self._next]

    def get_event(self) -> Any:
        self._next += 1
        return self._events[self._next - 1]

    def dispose(self) -> None:
        pass


def _construct(yaml: Any, events: list[Any]) -> Any:
    """The document `yaml` (a ruamel.yaml YAML) loads from the screened `events`: scanning and parsing, most of a
    load's time, happen once for the plain values and the line marks both. Its composer and constructor are ruamel's;
    the parser it would make is replaced (ruamel keeps it in `_parser`, made on first use)."""
    from ruamel.yaml.events import DocumentStartEvent

    # the version a `%YAML 1.1` directive asks for: what the resolver reads when the loader has no scanner of its own
    yaml.version = next((ev.version for ev in events if isinstance(ev, DocumentStartEvent)), None)
    yaml._parser = _Replay(events)
    return yaml.constructor.get_single_data()


def _screen(events: Any, source: str) -> list[Any]:
    """Refuse, from the parser's events (iterative: no recursion, nothing built yet), what a plan never needs and
    an attacker would use: nesting deeper than MAX_DEPTH, more than MAX_ALIASES aliases, an alias to a node that
    is still open (a self-referencing structure), any explicit tag (`!!python/object`, `!custom`), and a document
    of more than MAX_NODES values once its aliases are expanded (each alias counts the size of the subtree it
    names, a merge key `<<: *a` too: 30 doubling aliases make 2^30 values, under the alias limit). Returns the events,
    for _construct."""
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent, ScalarEvent

    open_nodes: list[list[Any]] = []  # [anchor, expanded size so far] of each open collection
    sizes: dict[str, int] = {}  # anchor → its subtree's expanded size
    aliases = total = 0
    seen: list[Any] = []
    for ev in events:
        seen.append(ev)
        line = ev.start_mark.line + 1 if ev.start_mark is not None else 0
        if isinstance(ev, AliasEvent):
            aliases += 1
            if any(ev.anchor == anchor for anchor, _ in open_nodes):
                raise UsageError(
                    f"{source}:{line}: alias *{ev.anchor} refers to a node that contains it (a recursive structure)",
                    "write the value out instead of the alias",
                )
            if aliases > MAX_ALIASES:
                raise UsageError(f"{source}:{line}: more than {MAX_ALIASES} aliases", "write the values out")
        elif isinstance(ev, NodeEvent) and getattr(ev, "tag", None) is not None:
            tag = str(getattr(ev, "tag", "")).replace("tag:yaml.org,2002:", "!!")
            raise UsageError(f"{source}:{line}: YAML tag {tag} is not allowed in a plan", "remove the tag")
        if isinstance(ev, ScalarEvent) and ev.style is None and len(ev.value) > MAX_DIGITS \
                and re.fullmatch(r"[-+]?[0-9_.eE+-]+", ev.value):  # fmt: skip
            raise UsageError(f"{source}:{line}: a number of {len(ev.value)} characters",
                             f"write counts and numbers with at most {MAX_DIGITS} digits")  # fmt: skip
        if isinstance(ev, NodeEvent):
            n = sizes.get(ev.anchor, 1) if isinstance(ev, AliasEvent) else 1
            total += n
            if total > MAX_NODES:
                raise UsageError(f"{source}:{line}: the plan expands to more than {MAX_NODES} values",
                                 "write a plan for one host's VMs, without aliases that copy large parts")  # fmt: skip
            for node in open_nodes:
                node[1] += n
            if not isinstance(ev, (AliasEvent, CollectionStartEvent)) and ev.anchor is not None:
                sizes[ev.anchor] = 1
        if isinstance(ev, CollectionStartEvent):
            open_nodes.append([ev.anchor, 1])
            if len(open_nodes) > MAX_DEPTH:
                raise UsageError(
                    f"{source}:{line}: nested more than {MAX_DEPTH} levels deep", "a plan is vms → name → settings"
                )
        elif isinstance(ev, CollectionEndEvent):
            anchor, size = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = size
    return seen


def plan_from_data(data: Mapping[str, Any], source: str = "plan") -> DesiredPlan:
    """A plan given as data (the Ansible module's options) rather than as a file: checked against the same schema
    and converted the same way. It has no lines, so faults name only the key path (`source: vms.web01.count: must
    be ≥ 1`) and its VMs carry line 0, which the apply planner takes as "no place to name"."""
    from ruamel.yaml import YAML

    marks = YAML(typ="rt").load(json.dumps(data, default=str))  # JSON is YAML: the positions _validate reads
    try:
        _validate(data, marks, source)
        plan = _to_plan(data, marks, source)
    except UsageError as exc:
        raise UsageError(re.sub(rf"^{re.escape(source)}:\d+: ", f"{source}: ", exc.message), exc.hint) from None
    vms = {name: dataclasses.replace(spec, line=0, key_lines={}) for name, spec in plan.vms.items()}
    gpus = {gpu: dataclasses.replace(spec, line=0) for gpu, spec in plan.gpus.items()}
    return DesiredPlan(source=source, vms=vms, gpus=gpus)


def _duplicate_key(text: str, exc: Any, source: str) -> UsageError:
    """ruamel's DuplicateKeyError as `plan.yaml:4: vms.a: duplicate key`: its marks give the mapping and the second
    key; the key path comes from the same text loaded with duplicates allowed (each mapping keeps the first)."""
    from ruamel.yaml import YAML

    line = exc.problem_mark.line + 1
    loose = YAML(typ="rt")
    loose.allow_duplicate_keys = True
    try:
        tree = loose.load(text)
    except TypeError:  # a mapping used as a key (`? {a: 1}`): ruamel cannot hash it once duplicates are allowed
        tree = None
    found = _path_to(tree, (exc.context_mark.line, exc.context_mark.column), ())
    path, mapping = found if found is not None else ((), {})
    # ruamel names the key only in its message; the closing quote tells `a` from `ab`
    key = next((str(k) for k in mapping if exc.problem.startswith(f'found duplicate key "{k}" with value')), None)
    if key is None:
        return UsageError(f"{source}:{line}: not valid YAML: {exc.problem}", "name each key once")
    return UsageError(f"{source}:{line}: {'.'.join((*path, key))}: duplicate key", "name each key once")


def _path_to(tree: Any, start: tuple[int, int], path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """(key path, mapping or list) of the one that starts at (line, column), 0-based."""
    lc = getattr(tree, "lc", None)  # CommentedMap and CommentedSeq have one
    if lc is None:
        return None
    if (lc.line, lc.col) == start:
        return path, tree
    for key, value in tree.items() if isinstance(tree, dict) else enumerate(tree):
        found = _path_to(value, start, (*path, str(key)))
        if found is not None:
            return found
    return None


def _validate(data: Any, marks: Any, source: str) -> None:
    vms = data.get("vms") if isinstance(data, dict) else None
    if isinstance(vms, dict) and len(vms) > MAX_VMS:
        raise _fault(source, _key_line(marks, ["vms"]), ["vms"], f"{len(vms)} VMs, more than {MAX_VMS}",
                     "split the plan: one host runs far fewer VMs")  # fmt: skip
    if conforms(plan_schema(), data):
        return
    from jsonschema import Draft202012Validator  # lazily: ~50 ms of imports, only to name a plan's fault

    validator = Draft202012Validator(plan_schema())
    errors = sorted(
        validator.iter_errors(data), key=lambda e: (_at(marks, [str(p) for p in e.absolute_path])[1], e.path)
    )
    if errors:
        err = errors[0]
        path = [str(p) for p in err.absolute_path]
        target, line = _at(marks, path)
        problem, hint = _explain(err)
        if err.validator == "additionalProperties" and isinstance(target, dict):
            extra = _unknown_keys(err)
            key = next((str(k) for k in target if str(k) in extra), None)
            if key is not None:
                raise _fault(source, _key_line(marks, [*path, key]), [*path, key], problem, hint)
        if err.validator == "propertyNames" and isinstance(target, dict):
            key = str(err.instance)
            if any(str(k) == key for k in target):
                raise _fault(source, _key_line(marks, [*path, key]), [*path, key], problem, hint)
        raise _fault(source, line, path, problem, hint)


def _explain(err: Any) -> tuple[str, str]:
    """jsonschema's error as a short phrase plus a hint that says what to write instead."""
    v, arg = err.validator, err.validator_value
    if v == "minimum":
        return f"must be ≥ {arg}", f"use a whole number of at least {arg}"
    if v == "maximum":
        return f"must be ≤ {arg}", f"use a whole number of at most {arg}"
    if v == "type":
        kinds = " or ".join(arg) if isinstance(arg, list) else arg
        if kinds == "boolean":  # YAML 1.2: yes/no/on/off are strings now
            return (
                f"must be a boolean, not {err.instance!r}",
                "write true or false (yes/no/on/off are text in YAML 1.2)",
            )
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
        return f"{err.instance!r} is not a PCI address", PCI_HINT
    if v == "propertyNames" and list(err.absolute_path)[:1] == ["gpus"]:
        return f"{err.instance!r} is not a PCI address", PCI_HINT
    if v == "propertyNames":
        return f"{err.instance!r} is not a valid VM name", "use the libvirt domain name (letters, digits, _.+:-)"
    if v == "oneOf":
        return "must be one address or a list of addresses" if PASSTHROUGH_KEY in list(
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


_NONE = object()


def _lines(tree: Any, key: Any) -> list[int]:
    """[key line, key column, value line, value column] (0-based) of a mapping's key or a list's index; keys a merge
    (`<<: *anchor`) brought in have none of their own and take the mapping's line."""
    return tree.lc.data.get(key) or [tree.lc.line, tree.lc.col] * 2


def _at(marks: Any, path: Sequence[str]) -> tuple[Any, int]:
    """The value at the key path, as far down as the path exists, and its (1-based) line."""
    tree, line = marks, marks.lc.line if hasattr(marks, "lc") else 0
    for part in path:
        if isinstance(tree, dict):
            key = next((k for k in tree if str(k) == part), _NONE)
            if key is _NONE:
                break
        elif isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            key = int(part)
        else:
            break
        line, tree = _lines(tree, key)[2], tree[key]
    return tree, line + 1


def _key_line(marks: Any, path: Sequence[str]) -> int:
    """The line of the key naming path[-1] (where a person looks for "vms.web01"), else of the value."""
    parent, _ = _at(marks, path[:-1])
    if isinstance(parent, dict):
        for key in parent:
            if str(key) == path[-1]:
                return _lines(parent, key)[0] + 1
    return _at(marks, path)[1]


def _fault(source: str, line: int, path: Sequence[str], problem: str, hint: str) -> UsageError:
    where = ".".join(p if p.isprintable() else repr(p) for p in path) or "(top level)"  # a key may hold a newline
    return UsageError(f"{source}:{line}: {where}: {problem}", hint)


def _params(source: str, marks: Any, vm: str, value: Any) -> str:
    try:
        return format_params(value)
    except UsageError as exc:
        path = ["vms", vm, "params"]
        raise _fault(source, _at(marks, path)[1], path, exc.message, exc.hint) from None


def _address(source: str, line: int, vm: str, key: str, value: Any) -> str:
    """A plan file's `gpu:` / `passthrough:` address in canonical form (01:00.0 means 0000:01:00.0)."""
    try:
        return pci_address(str(value))
    except UsageError as exc:
        raise _fault(source, line, ["vms", vm, key], exc.message, exc.hint) from None


def _to_plan(data: Mapping[str, Any], marks: Any, source: str) -> DesiredPlan:
    defaults = data.get("defaults") or {}
    vms: dict[str, VmSpec] = {}
    for name, body in (data.get("vms") or {}).items():
        name = str(name)
        body = body or {}
        line = _key_line(marks, ["vms", name])
        if not VM_NAME.fullmatch(name):  # the schema's pattern ends in `$`, which Python lets match before a "\n"
            raise _fault(source, line, ["vms", name], f"{name!r} is not a valid VM name",
                         "use the libvirt domain name (letters, digits, _.+:-)")  # fmt: skip
        has_type, has_pt = "type" in body, PASSTHROUGH_KEY in body
        virtio = body.get("virtio_gl", False)
        if has_type == has_pt and not (virtio and not has_type):
            problem = "names both type and passthrough" if has_type else "needs a type or passthrough"
            raise _fault(
                source,
                line,
                ["vms", name],
                problem,
                "give a VM either `type: …` (+ count) or `passthrough: BDF` (and/or `virtio_gl: true`)",
            )
        if has_pt and "count" in body:
            raise _fault(
                source,
                _at(marks, ["vms", name, "count"])[1],
                ["vms", name, "count"],
                "does not apply to passthrough",
                "list each function under passthrough instead",
            )
        passthrough = body.get(PASSTHROUGH_KEY, ())
        if isinstance(passthrough, str):
            passthrough = (passthrough,)
        display = {**(defaults.get("display") or {}), **(body.get("display") or {})}
        vms[name] = VmSpec(
            name=name,
            type=body.get("type"),
            count=int(body.get("count", 1)),
            passthrough=tuple(_address(source, line, name, "passthrough", a) for a in passthrough),
            gpu=_address(source, line, name, "gpu", body["gpu"]) if body.get("gpu") else None,
            policy=body.get("policy", defaults.get("policy", "pack")),
            numa=body.get("numa"),
            params=_params(source, marks, name, body.get("params")),
            display=Display(**display),
            on_demand=bool(body.get("on_demand", False)),
            virtio_gl=bool(virtio),
            virtio_gl_gpu=_address(source, line, name, "virtio_gl", virtio["gpu"])
            if isinstance(virtio, dict)
            else None,
            line=line,
            key_lines={k: _key_line(marks, ["vms", name, str(k)]) for k in body},
        )
    return DesiredPlan(source=source, vms=vms, gpus=_gpus(data, marks, source))


def _gpus(data: Mapping[str, Any], marks: Any, source: str) -> dict[str, GpuSpec]:
    """The `gpus:` section (its shape is the schema's): canonical addresses, a time slice only with a scheduler that
    has one."""
    out: dict[str, GpuSpec] = {}
    for key, body in (data.get("gpus") or {}).items():
        body = body or {}
        line = _key_line(marks, ["gpus", str(key)])
        try:
            address = pci_address(str(key))
        except UsageError as exc:
            raise _fault(source, line, ["gpus", str(key)], exc.message, exc.hint) from None
        if address in out:
            raise _fault(source, line, ["gpus", str(key)], f"names GPU {address} twice", "list each GPU once")
        if "timeslice_ms" in body and body.get("scheduler") not in ("equal-share", "fixed-share"):
            raise _fault(source, _key_line(marks, ["gpus", str(key), "timeslice_ms"]), ["gpus", str(key), "timeslice_ms"],
                         "needs scheduler: equal-share or fixed-share", "best effort has no time slice")  # fmt: skip
        mig = body.get("mig")
        out[address] = GpuSpec(address, body.get("heterogeneous"), body.get("scheduler"), body.get("timeslice_ms"),
                               mig["enabled"] if isinstance(mig, dict) else None, line)  # fmt: skip
    return out
