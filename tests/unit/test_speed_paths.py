"""Fast paths that must answer exactly as the slow ones did: the bounded input read (one read of the file's size,
not of the limit) and the one-expression check of an inventory's types[] rows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from vgpuadm.errors import UsageError
from vgpuadm.host import inputs
from vgpuadm.report.merge import check_report


def test_read_input_reads_up_to_the_limit(tmp_path: Path) -> None:
    f = tmp_path / "plan.yaml"
    for data in (b"", b"x", b"y" * 100):
        f.write_bytes(data)
        assert inputs.read_input(str(f), "plan", "h", limit=100) == data
    f.write_bytes(b"z" * 101)
    with pytest.raises(UsageError) as e:
        inputs.read_input(str(f), "plan", "h", limit=100)
    assert e.value.message == f"plan {f} is 101 bytes, over the 100 bytes limit"


@pytest.mark.parametrize(("size", "refused"), [(60, False), (100, False), (101, True), (5000, True)])
def test_a_file_that_grows_after_fstat_is_read_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, refused: bool
) -> None:
    """fstat says 10 bytes (the file grew after it): the read goes on past them, up to one byte over the limit."""
    f = tmp_path / "r.json"
    f.write_bytes(b"a" * size)
    real = os.fstat

    def small(fd: int) -> Any:
        st = real(fd)
        return os.stat_result((st.st_mode, *st[1:6], 10, *st[7:]))

    monkeypatch.setattr(inputs.os, "fstat", small)
    if refused:
        with pytest.raises(UsageError) as e:
            inputs.read_input(str(f), "", "h", limit=100)
        assert e.value.message == f"{f} is over the 100 bytes limit"
    else:
        assert inputs.read_input(str(f), "", "h", limit=100) == b"a" * size


def _report(**row: Any) -> dict[str, Any]:
    summary = dict.fromkeys(("gpus", "devices", "missing", "framebuffer_total_mib", "framebuffer_used_mib",
                             "framebuffer_free_mib", "framebuffer_locked_free_mib"), 0)  # fmt: skip
    base = {"type_id": "nvidia-63", "name": "GRID P4-1Q", "framebuffer_mib": 1024, "used": 1, "free": 7,
            "stranded": 0, "max": 8}  # fmt: skip
    return {"schema": "vgpuadm-inventory/1", "host": "h1", "generated_at": "t", "summary": summary, "gpus": [],
            "types": [dict(base), {**base, **row}], "devices": [], "missing": [], "warnings": []}  # fmt: skip


@pytest.mark.parametrize(
    "row", [{}, {"name": None}, {"framebuffer_mib": None}, {"max": None}, {"used": 0, "free": 0, "stranded": 3}]
)
def test_a_types_row_with_the_right_kinds_passes(row: dict[str, Any]) -> None:
    check_report(_report(**row), "r.json")


@pytest.mark.parametrize(
    ("row", "key"),
    [
        ({"type_id": None}, "type_id"),
        ({"type_id": 63}, "type_id"),
        ({"name": 1}, "name"),
        ({"framebuffer_mib": True}, "framebuffer_mib"),
        ({"framebuffer_mib": 1.5}, "framebuffer_mib"),
        ({"used": None}, "used"),
        ({"free": False}, "free"),
        ({"stranded": "0"}, "stranded"),
        ({"max": [8]}, "max"),
        ({"name": 1, "max": True}, "name"),  # the first wrong key, in the schema's order
        ({"used": 1.0, "type_id": 5}, "type_id"),
    ],
)
def test_a_types_row_of_the_wrong_kind_names_its_first_wrong_key(row: dict[str, Any], key: str) -> None:
    with pytest.raises(UsageError) as e:
        check_report(_report(**row), "r.json")
    assert e.value.message == f"r.json: types[1].{key} has the wrong type"
