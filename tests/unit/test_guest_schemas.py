"""The JSON Schemas of the guest and declarative commands' `--json` documents are valid draft 2020-12 and reject
what they must (real command output is validated in tests/libvirt/test_guest_json.py)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from vgpuadm.model import Allocation
from vgpuadm.ops.declarative import Leak, ReconcileResult
from vgpuadm.ops.guest import GuestResult
from vgpuadm.ops.restore import RestoreResult
from vgpuadm.schemas import load, validate
from vgpuadm.steps import Plan

NAMES = ("guest", "apply", "restore", "reconcile")
UUID = "0a0a0a0a-0000-4000-8000-000000000001"


def _guest() -> dict[str, Any]:
    mdev = Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", UUID, slot=0, extra={"display": "on"})
    pci = Allocation("web01", "pci", None, "0000:65:00.0", address="0000:65:00.1", slot=1, extra={"managed": "yes"})
    result = GuestResult("web01", "qemu:///system", Plan.of([], ""), False, [mdev, pci], added=[mdev])
    return result.to_json()


def test_schemas_are_valid_draft_2020_12() -> None:
    for name in NAMES:
        schema = load(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


def test_documents_built_by_the_result_classes_validate() -> None:
    validate("guest", _guest())
    validate("restore", RestoreResult(["vgpu: create mdev x"], [], ["gone"], 1).to_json())
    leak = Leak("vfio", "0000:65:00.0", "bound to vfio-pci, was nvidia")
    validate("reconcile", ReconcileResult(("rolled back: x",), (leak,), ("step 1/1 bind",), ("web01: y",)).to_json())


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("devices", 0, "mode"), "GPU"),  # a mode name is lower case (modes/__init__.py: added modes too)
        (("devices", 0, "uuid"), "0A0A0A0A-0000-4000-8000-000000000001"),
        (("devices", 0, "uuid"), None),  # an mdev always has its UUID
        (("devices", 1, "type_id"), "nvidia-63"),  # passthrough has no type
        (("devices", 1, "address"), "65:00.1"),
        (("devices", 0, "slot"), -1),
        (("devices", 0, "options", "display"), True),
        (("steps",), ["create mdev"]),
        (("changed",), "yes"),
    ],
)
def test_guest_schema_rejects_bad_values(path: tuple[Any, ...], value: Any) -> None:
    doc = copy.deepcopy(_guest())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate("guest", doc)


def test_guest_schema_rejects_missing_and_unknown_keys() -> None:
    doc = _guest()
    del doc["hostdevs"]
    with pytest.raises(jsonschema.ValidationError, match="'hostdevs' is a required property"):
        validate("guest", doc)
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        validate("guest", {**_guest(), "extra": 1})


def test_declarative_schemas_reject_bad_values() -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate("restore", {"devices": 1, "done": ["create mdev x"], "skipped": [], "problems": []})
    with pytest.raises(jsonschema.ValidationError):
        validate("reconcile", {"dry_run": False, "recovered": [], "leaks": [{"kind": "pci", "id": "x", "detail": ""}], "fixed": [],
                               "lost": []})  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        validate("apply", {"changed": False, "check": True, "summary": "", "diff": ["web01 added"], "untouched": [],
                           "steps": []})  # fmt: skip
