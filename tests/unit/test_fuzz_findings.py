"""Bugs the fuzz lane (tests/fuzz) found, each pinned by an exact regression test: values ending in a newline that
`$`-anchored grammars let through, errors printed on two lines, and parsers that ended in an internal error."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.domains import device, domain, vgpuadm
from vgpuadm.cli.console import Console
from vgpuadm.errors import ConflictError, UsageError
from vgpuadm.host.umockdev import load as load_umockdev
from vgpuadm.io.planfile import parse_plan
from vgpuadm.io.unitfile import render as render_unit
from vgpuadm.report.merge import check_report
from vgpuadm.virt.xml import mdev_hostdev, parse_allocations


def test_a_plan_with_a_control_character_is_one_error_line() -> None:
    with pytest.raises(UsageError) as e:
        parse_plan("vms:\n  web01: {type: nvidia-63}\n\x1f\n", "plan.yaml")
    assert (e.value.message, e.value.hint) == (
        "plan.yaml:3: not valid YAML: character U+001F is not allowed in YAML",
        "remove control characters from the plan",
    )


def test_a_plan_vm_name_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(UsageError) as e:
        parse_plan('vms:\n  "web01\\n": {type: nvidia-63}\n', "plan.yaml")
    assert e.value.message == "plan.yaml:2: vms.'web01\\n': 'web01\\n' is not a valid VM name"


def test_a_plan_error_shows_a_key_with_a_newline_escaped() -> None:
    with pytest.raises(UsageError) as e:
        parse_plan('vms:\n  "web01\\n": {type: 5}\n', "plan.yaml")
    assert e.value.message == "plan.yaml:2: vms.'web01\\n'.type: must be a string, not 5"


@pytest.mark.parametrize(
    ("key", "xml_value", "shown"),
    [("type", "nvidia-63&#10;", "'nvidia-63\\n'"), ("uuid", "3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b&#10;",
      "'3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b\\n'"), ("params", "&#10;", "'\\n'"), ("params", "\x7f", "'\\x7f'")],
)  # fmt: skip
def test_metadata_values_are_matched_whole(key: str, xml_value: str, shown: str) -> None:
    with pytest.raises(ConflictError) as e:
        parse_allocations(domain(metadata=vgpuadm(device(slot=0, mode="mdev", **{key: xml_value}))))
    assert e.value.message == f"domain web01: vgpuadm metadata device #0 has a malformed {key} {shown}"


def test_an_mdev_uuid_ending_in_a_newline_makes_no_hostdev() -> None:
    with pytest.raises(UsageError) as e:
        mdev_hostdev("3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b\n")
    assert e.value.message == "'3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b\\n' is not an mdev UUID"


def test_errors_and_warnings_print_as_one_line_each() -> None:
    err = io.StringIO()
    console = Console(io.StringIO(), err)
    console.error(UsageError("domain a\nb is not defined", "define it\x1b[31m first"))
    console.warn("skipped x\r\ny")
    assert err.getvalue() == (
        "error: domain a\\nb is not defined\nhint: define it\\x1b[31m first\nwarning: skipped x\\r\\ny\n"
    )


def test_a_umockdev_link_to_nothing_is_one_error(tmp_path: Path) -> None:
    rec = tmp_path / "rec.umockdev"
    rec.write_text("P: /devices/pci0000:00/0000:00:02.0/0000:01:00.0\nE: SUBSYSTEM=pci\nL: driver=\n")
    with pytest.raises(UsageError) as e:
        load_umockdev(str(rec), str(tmp_path / "target"))
    assert e.value.message == (
        "rec.umockdev: link /sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0/driver -> '' points outside /sys"
    )
    assert not (tmp_path / "target").exists()


def _report() -> dict:
    summary = dict.fromkeys(("gpus", "devices", "missing", "framebuffer_total_mib", "framebuffer_used_mib",
                             "framebuffer_free_mib", "framebuffer_locked_free_mib"), 0)  # fmt: skip
    row = {"type_id": "nvidia-63", "name": "GRID P4-1Q", "framebuffer_mib": 1024, "used": 1, "free": 7,
           "stranded": 0, "max": 8}  # fmt: skip
    return {"schema": "vgpuadm-inventory/1", "host": "h1", "generated_at": "t", "summary": summary, "gpus": [],
            "types": [row], "devices": [], "missing": [], "warnings": []}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [(("types", 0, "used"), "1", "types[0].used"), (("summary", "gpus"), [], "summary.gpus"),
     (("types", 0, "max"), True, "types[0].max"), (("gpus",), [1], "gpus[0]"), (("warnings",), [None], "warnings[]")],
)  # fmt: skip
def test_a_report_value_of_the_wrong_type_is_one_error(path: tuple, value: object, where: str) -> None:
    doc = _report()
    check_report(json.loads(json.dumps(doc)), "r.json")
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(UsageError) as e:
        check_report(doc, "r.json")
    assert e.value.message == f"r.json: {where} has the wrong type"


def test_a_unit_command_with_a_newline_is_refused() -> None:
    with pytest.raises(UsageError) as e:
        render_unit(["/usr/bin/vgpuadm", "--root", "/srv/h\n"])
    assert e.value.message == "'/srv/h\\n' cannot be written into a systemd unit"


def test_a_umockdev_line_with_a_nul_byte_is_one_error(tmp_path: Path) -> None:
    rec = tmp_path / "rec.umockdev"
    rec.write_text("P: /devices/pci0000:00/0000:00:02.0/0000:01:00.0\nA: ven\x00dor=1\n")
    with pytest.raises(UsageError) as e:
        load_umockdev(str(rec), str(tmp_path / "target"))
    assert e.value.message == "rec.umockdev line 2: 'A: ven\\x00dor=1' is not a umockdev record line"


def test_a_duplicate_key_inside_a_mapping_used_as_a_key_is_one_error() -> None:
    """Found by the fuzz lane: naming the duplicate key re-read the plan with duplicates allowed, where ruamel cannot
    hash a mapping used as a key (TypeError, exit 70)."""
    with pytest.raises(UsageError) as exc:
        parse_plan("? vms:\n    type: nvidia-63\n    type: nvidia-63\n  web01:\n", "plan.yaml")
    assert (exc.value.message, exc.value.hint) == (
        'plan.yaml:3: not valid YAML: found duplicate key "type" with value "nvidia-63" (original value: "nvidia-63")',
        "name each key once",
    )


def test_a_plan_whose_key_is_a_mapping_is_one_error() -> None:
    """Found by the fuzz lane: ruamel's round-trip loader raised TypeError on a mapping used as a key (exit 70)."""
    with pytest.raises(UsageError) as exc:
        parse_plan('{"vms": {}}:', "plan.yaml")
    assert (exc.value.message, exc.value.hint) == (
        "plan.yaml: a key of the plan is a mapping or a list",
        "keys are names: VM names and setting names",
    )
