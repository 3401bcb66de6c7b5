"""cli/jsontext.dumps must print exactly what json.dumps(doc, indent=2) prints, whatever the document."""

from __future__ import annotations

import io
import json

import pytest

from vgpuadm import api
from vgpuadm.cli.console import Console
from vgpuadm.cli.jsontext import chunks, dumps
from vgpuadm.model import Layout
from vgpuadm.report.listing import device_rows, gpu_rows, type_rows

ODD = [
    {"a": {"x": 1}, "b": {"x": True}},  # True == 1 and hashes alike: a memo keyed on values alone would mix them
    [{"a": {"x": True}}, {"a": {"x": 1}}, {"a": {"x": 1.0}}, {"a": {"x": 1}}],
    {"a": 1.5, "b": [1e16, 1e-7, float("nan"), float("inf")]},  # floats: json's own spelling
    {1: "non-str key"},
    {"layout": Layout.MDEV_PF},  # a str subclass
    [[], {}, [{}], {"a": []}, (1, 2), ()],
    {"k": {"n": {"m": [1, {"z": None}], "o": {"p": {}}}}, "q": {"n": {"m": [1, {"z": None}], "o": {"p": {}}}}},
    ["é", "\u2028", '"quoted"\n', "\x00"],
    # Same keys, other value types and orders: the per-keys layout and the value memo must not mix them up.
    [{"a": 1, "b": "1"}, {"a": True, "b": 1}, {"b": "1", "a": 1.0}, {"a": [1, {"b": 2}], "b": None}, {"a": 1}],
    [True, False, None, 10**30, -0, -5],
    "plain",
    7,
    None,
]


@pytest.mark.parametrize("doc", ODD, ids=range(len(ODD)))
def test_odd_documents_match_json(doc):
    assert dumps(doc) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("profile", ["p4", "a100-mdev-vf", "h200-vendor-vfio", "gvt-g", "mixed"])
def test_read_command_rows_match_json(sim_host, profile):
    snap = api.discover(str(sim_host(profile)))
    for rows in (type_rows(snap), gpu_rows(snap), device_rows(snap)):
        assert dumps(rows) == json.dumps(rows, indent=2)


@pytest.mark.parametrize("size", [1, 200, 65536])
@pytest.mark.parametrize(
    "doc", [[{"a": i, "b": "x" * (i % 7), "c": {"n": i % 3}} for i in range(300)], [], {"a": [1]}, [7]]
)
def test_chunks_are_the_json_text_in_pieces_of_at_least_size(doc, size):
    pieces = list(chunks(doc, "\n", size))
    assert "".join(pieces) == json.dumps(doc, indent=2) + "\n"
    assert all(len(p) >= size for p in pieces[:-1])
    assert dumps(doc) == json.dumps(doc, indent=2)


def test_the_console_writes_a_big_document_in_pieces_that_make_its_json():
    """Console.json of 2,000 rows: several writes (none holds the whole text twice), together json.dumps + "\\n"."""
    writes = []

    class Out(io.StringIO):
        def write(self, text):
            writes.append(len(text))
            return super().write(text)

    doc = [{"parent": f"0000:41:00.{i}", "available_instances": 1, "attributes": {"board": "A10"}} for i in range(2000)]
    out = Out()
    Console(out=out).json(doc)
    assert out.getvalue() == json.dumps(doc, indent=2) + "\n"
    assert len(writes) > 1 and max(writes) < len(out.getvalue()) / 2


def test_a_value_only_json_encodes_after_the_first_pieces_still_gives_json_text():
    """A float in item 250 of 300: the pieces already given are the start of json.dumps's text, the rest follows."""
    doc = [{"a": i, "b": "x" * (i % 7)} for i in range(300)]
    doc[250]["b"] = 1.5
    pieces = list(chunks(doc, "\n", 200))
    assert len(pieces) > 2 and "".join(pieces) == json.dumps(doc, indent=2) + "\n"
    assert dumps(doc) == json.dumps(doc, indent=2)
