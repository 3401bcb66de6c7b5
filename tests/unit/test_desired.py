"""Plan files (apply -f): loading with file:line:key errors, and the desired-vs-current diff (pure)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from vgpuadm.errors import ConflictError, UsageError
from vgpuadm.io.planfile import load_plan, parse_plan
from vgpuadm.model import Allocation
from vgpuadm.plan.desired import (
    Add,
    Current,
    Display,
    SetParams,
    check_safe,
    diff,
    format_params,
    params_equal,
)
from vgpuadm.schemas import conforms
from vgpuadm.schemas import load as load_schema

PLAN = """\
version: 1
defaults:
  policy: spread
vms:
  web01:
    type: nvidia-63
    count: 2
    params: {frame_rate_limiter: false, disable_vnc: 1}
    display: {enabled: true, ramfb: true}
  db02:
    passthrough: [0000:65:00.0, 0000:65:00.1]
  ci:
    type: GRID P4-2Q
    gpu: 0000:01:00.0
    numa: 0
    policy: pack
"""


def test_plan_loads_every_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    plan = load_plan(str(path))
    assert plan.source == "plan.yaml"
    web, db, ci = plan.vms["web01"], plan.vms["db02"], plan.vms["ci"]
    assert (web.type, web.count, web.policy, web.params, web.display, web.line) == (
        "nvidia-63", 2, "spread", "frame_rate_limiter=0, disable_vnc=1", Display(True, True), 5,
    )  # fmt: skip
    assert db.passthrough == ("0000:65:00.0", "0000:65:00.1") and db.type is None
    assert (ci.type, ci.count, ci.gpu, ci.numa, ci.policy, ci.params) == (
        "GRID P4-2Q",
        1,
        "0000:01:00.0",
        0,
        "pack",
        "",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vms:\n  web01:\n    type: nvidia-63\n    count: 0\n", "plan.yaml:4: vms.web01.count: must be ≥ 1"),
        ("vms:\n  web01:\n    type: nvidia-63\n    colour: red\n", "plan.yaml:4: vms.web01.colour: unknown key colour"),
        ("vms:\n  a:\n    type: x\n  a:\n    type: y\n", "plan.yaml:4: vms.a: duplicate key"),
        (
            "vms:\n  a:\n    type: x\n    policy: best\n",
            "plan.yaml:4: vms.a.policy: must be one of pack, spread, not 'best'",
        ),
        ("vms:\n  a:\n    type: x\n    count: two\n", "plan.yaml:4: vms.a.count: must be an integer, not 'two'"),
        ("vms:\n  a:\n    type: x\n    gpu: 1:0.0\n", "plan.yaml:4: vms.a.gpu: '1:0.0' is not a PCI address"),
        ("vms:\n  a: {}\n", "plan.yaml:2: vms.a: needs a type or passthrough"),
        (
            "vms:\n  a:\n    type: x\n    passthrough: 0000:65:00.0\n",
            "plan.yaml:2: vms.a: names both type and passthrough",
        ),
        (
            "vms:\n  a:\n    passthrough: 0000:65:00.0\n    count: 2\n",
            "plan.yaml:4: vms.a.count: does not apply to passthrough",
        ),
        ("version: 2\nvms: {}\n", "plan.yaml:1: version: must be 1, not 2"),
        ("machines: {}\n", "plan.yaml:1: (top level): missing key vms"),
        ("vms: [1\n", "plan.yaml:2: not valid YAML"),
        ("", "plan.yaml:1: the plan is empty"),
    ],
)
def test_plan_errors_point_at_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_plan(text)
    assert info.value.message.startswith(message)
    assert info.value.hint


def test_one_parse_keeps_the_yaml_version_aliases_and_lines_of_each_load() -> None:
    """The plan is parsed once and built twice (values, line marks) from the same events: a `%YAML 1.1` directive
    still makes `yes` a boolean, an alias and a merge key still copy values, and keys a merge brought in still
    take their mapping's line."""
    with pytest.raises(UsageError) as info:
        parse_plan("%YAML 1.1\n---\nvms: {web01: {type: yes}}\n")
    assert info.value.message == "plan.yaml:3: vms.web01.type: must be a string, not True"
    assert parse_plan("vms: {web01: {type: yes}}\n").vms["web01"].type == "yes"
    plan = parse_plan("vms:\n  a: &a {type: nvidia-63, count: 2}\n  b: *a\n  c:\n    <<: *a\n    count: 3\n")
    assert [(v.name, v.type, v.count, v.line, v.key_lines) for v in plan.vms.values()] == [
        ("a", "nvidia-63", 2, 2, {"type": 2, "count": 2}),
        ("b", "nvidia-63", 2, 3, {"type": 2, "count": 2}),
        ("c", "nvidia-63", 3, 4, {"type": 5, "count": 6}),
    ]


def _plan_like(rnd: random.Random) -> Any:
    """A document shaped like a plan, right or wrong at any level (for test_schema_check_…)."""
    values: list[Any] = [0, 1, 2, 30, 31, 64, 65, -1, True, False, None, "", "x", "nvidia-63", "pack", "best",
                         "0000:01:00.0", "01:00.0", "1:0.0", "0000:01:00.0\n", 1.0, 1.5, "equal-share", [], {},
                         ["0000:01:00.0"], ["0000:01:00.0", "0000:01:00.0"], ["x"], {"gpu": "01:00.0"}, {"gpu": "x"},
                         {"enabled": True}, {"enabled": 1}, {"a": "b", "c": 1, "d": True}, {"a": 1.5}, {1: 2}]  # fmt: skip
    good = {"type": "nvidia-63", "count": 2, "policy": "spread", "display": {"enabled": True, "ramfb": True},
            "params": {"frame_rate_limiter": False}, "passthrough": ["0000:65:00.0"], "virtio_gl": {"gpu": "01:00.0"},
            "gpu": "0000:01:00.0", "numa": 0, "on_demand": True}  # fmt: skip
    keys = [*good, "colour"]
    vms = {rnd.choice(["web01", "a.b", "-x", "x y", "", 1]): {k: good.get(k) if rnd.random() < 0.5 else
           rnd.choice(values) for k in rnd.sample(keys, rnd.randint(0, 4))} for _ in range(rnd.randint(0, 4))}  # fmt: skip
    doc: dict[str, Any] = {"vms": vms} if rnd.random() < 0.9 else {}
    if rnd.random() < 0.3:
        doc["version"] = rnd.choice([1, 2, True, 1.0, "1"])
    if rnd.random() < 0.3:
        doc["defaults"] = {"policy": rnd.choice(["pack", "x"]), "display": rnd.choice([{"enabled": False}, {"x": 1}])}
    if rnd.random() < 0.3:
        doc["gpus"] = {rnd.choice(["0000:01:00.0", "zz", 5]): rnd.choice([{}, {"scheduler": "equal-share",
                       "timeslice_ms": rnd.randint(0, 40)}, {"mig": rnd.choice([{"enabled": True}, {}])}, None])}  # fmt: skip
    return doc if rnd.random() < 0.97 else rnd.choice([[], 1, "x", None])


def test_schema_check_without_jsonschema_passes_only_what_jsonschema_passes() -> None:
    """A plan that `conforms` skips jsonschema (its import is a twentieth of an `apply -f`): it may leave a valid
    document to jsonschema, never pass one jsonschema refuses; the plans of this file conform."""
    schema = load_schema("plan-v1")
    validator = jsonschema.Draft202012Validator(schema)
    rnd, passed = random.Random(7), 0
    for _ in range(3000):
        doc = _plan_like(rnd)
        if conforms(schema, doc):
            passed += 1
            assert not list(validator.iter_errors(doc)), doc
    assert passed > 100
    for text in (PLAN, "version: 1\ngpus: {01:00.0: {scheduler: fixed-share, timeslice_ms: 3, mig: {enabled: false}}}\n"
                 "vms: {a: {passthrough: 0000:65:00.0, virtio_gl: true}, b: {type: x, params: 'a=1'}}\n"):  # fmt: skip
        assert conforms(schema, YAML(typ="safe", pure=True).load(text))
    assert not conforms(schema, {"vms": {"a": {"type": "x", "count": 0}}})


def test_unreadable_plan_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read plan .*/nope.yaml"):
        load_plan(str(tmp_path / "nope.yaml"))


def test_params_format_and_compare() -> None:
    assert format_params({"frame_rate_limiter": False, "disable_vnc": True}) == "frame_rate_limiter=0, disable_vnc=1"
    assert format_params("  a=1   b=2 ") == "a=1, b=2"  # the legacy space form is accepted
    assert format_params("a=1,b=2") == format_params("a=1, b=2") == "a=1, b=2"
    assert format_params(None) == ""
    assert params_equal("a=1 b=2", "b=2  a=1")
    assert params_equal(None, "")
    assert not params_equal("a=1", "a=0")


def _mdev(domain: str, slot: int, type_id: str = "nvidia-63", params: str | None = None) -> Allocation:
    return Allocation(domain, "mdev", type_id, "0000:01:00.0", f"00000000-0000-0000-0000-{slot:012d}", params=params,
                      slot=slot)  # fmt: skip


def _pci(domain: str, slot: int, address: str) -> Allocation:
    return Allocation(domain, "pci", address=address, slot=slot)


def test_diff_adds_what_is_missing_and_keeps_what_matches() -> None:
    plan = parse_plan(PLAN)
    current = Current([_mdev("web01", 0, params="disable_vnc=1 frame_rate_limiter=0"), _pci("db02", 0, "0000:65:00.0")])
    d = diff(plan, current, {"nvidia-63": "nvidia-63", "GRID P4-2Q": "nvidia-64"})
    assert d.adds == (
        Add("ci", plan.vms["ci"], type_id="nvidia-64", count=1),
        Add("db02", plan.vms["db02"], address="0000:65:00.1"),
        Add("web01", plan.vms["web01"], type_id="nvidia-63", count=1),
    )
    assert d.removes == () and d.set_params == () and len(d.kept) == 2
    assert d.instances_needed == 3
    assert d.lines() == ["+ ci: nvidia-64 ×1", "+ db02: passthrough 0000:65:00.1", "+ web01: nvidia-63 ×1 (2 in all)"]


def test_diff_of_a_satisfied_plan_is_empty() -> None:
    plan = parse_plan("vms:\n  web01:\n    type: nvidia-63\n    count: 2\n")
    d = diff(plan, Current([_mdev("web01", 0), _mdev("web01", 1), _mdev("other", 0)]), {})
    assert d.empty and d.lines() == [] and d.untouched == ("other",)


def test_diff_removes_surplus_and_wrong_type_and_changes_params() -> None:
    plan = parse_plan("vms:\n  web01:\n    type: nvidia-63\n    params: frame_rate_limiter=0\n")
    current = Current(
        [_mdev("web01", 0, "nvidia-64"), _mdev("web01", 1), _mdev("web01", 2), _pci("web01", 3, "0000:65:00.0")]
    )
    d = diff(plan, current, {})
    assert [a.slot for a in d.removes] == [0, 3, 2]
    assert d.set_params == (SetParams(_mdev("web01", 1), "frame_rate_limiter=0"),)
    assert d.adds == ()
    assert d.lines() == [
        "- web01: nvidia-64 00000000-0000-0000-0000-000000000000 on 0000:01:00.0",
        "- web01: passthrough 0000:65:00.0",
        "- web01: nvidia-63 00000000-0000-0000-0000-000000000002 on 0000:01:00.0",
        "~ web01: nvidia-63 00000000-0000-0000-0000-000000000001 on 0000:01:00.0 vgpu_params '' → 'frame_rate_limiter=0'",
    ]


def test_prune_removes_devices_of_vms_the_plan_does_not_name() -> None:
    plan = parse_plan("vms:\n  web01:\n    type: nvidia-63\n")
    current = Current([_mdev("web01", 0), _mdev("old", 0), _pci("old", 1, "0000:65:00.0")])
    assert diff(plan, current, {}).removes == ()
    pruned = diff(plan, current, {}, prune=True)
    assert [(a.domain, a.slot) for a in pruned.removes] == [("old", 0), ("old", 1)] and pruned.untouched == ()


def test_running_vm_keeps_its_devices() -> None:
    plan = parse_plan("vms:\n  web01:\n    type: nvidia-64\n")
    d = diff(plan, Current([_mdev("web01", 0)]), {})
    check_safe(d, {"other"})
    with pytest.raises(ConflictError, match=r"domain web01 is running and owns nvidia-63 .* the plan would remove"):
        check_safe(d, {"web01"})
    params_only = diff(
        parse_plan("vms:\n  web01:\n    type: nvidia-63\n    params: a=1\n"), Current([_mdev("web01", 0)]), {}
    )
    with pytest.raises(ConflictError, match="vgpu_params"):
        check_safe(params_only, {"web01"})
