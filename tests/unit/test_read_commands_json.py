"""cli/jsontext.dumps is byte-for-byte json.dumps(doc, indent=2): on every golden document and on odd values."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path

import pytest

from vgpuadm.cli.jsontext import dumps

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "read"


class Color(StrEnum):
    RED = "red"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.name)
def test_same_text_as_json_dumps_on_goldens(path):
    doc = json.loads(path.read_text())
    assert dumps(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize(
    "doc",
    [
        [], {}, [[]], {"a": {}}, None, True, 0, -1, 1.5, float("inf"), "é\n\"\\\x01", ["x", ("t", 1)],
        {"k": [None, False, {"n": 10**20}]}, {1: "int key"}, [Color.RED], {"e": Color.RED}, [1.0, 2e-9],
    ],
)  # fmt: skip
def test_same_text_as_json_dumps_on_odd_values(doc):
    assert dumps(doc) == json.dumps(doc, indent=2)


def test_unserialisable_raises_like_json():
    with pytest.raises(TypeError):
        dumps([object()])
