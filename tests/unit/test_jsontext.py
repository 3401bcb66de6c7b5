"""cli/jsontext.dumps must print exactly what json.dumps(doc, indent=2) prints, whatever the document."""

from __future__ import annotations

import json

import pytest

from vgpuadm import api
from vgpuadm.cli.jsontext import dumps
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
