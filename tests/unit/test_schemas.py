"""Every `--json` document of every simulated profile and of the real captured hosts validates against its JSON
Schema (draft 2020-12) in vgpuadm/schemas, and the schemas reject what they must."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from vgpuadm import api
from vgpuadm.host.umockdev import load
from vgpuadm.schemas import NAMES, validate
from vgpuadm.schemas import load as load_schema
from vgpuadm.sim.profiles import PROFILES, build

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("schema-hosts")
    out = {}
    for name in PROFILES:
        build(name, str(base / name))
        out[name] = base / name
    # Devices of every kind on the mixed host: an mdev on a VF, an mdev on a PF, a typed layout C VF.
    sysfs = api.open_sysfs(str(out["mixed"]))
    sysfs.write("/sys/class/mdev_bus/0000:41:00.4/mdev_supported_types/nvidia-468/create",
                "0a0a0a0a-0000-4000-8000-000000000001")  # fmt: skip
    sysfs.write("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create", "0a0a0a0a-0000-4000-8000-000000000002")
    sysfs.write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1426\n")  # H200X-35C
    load(str(DATA / "harvester-a2/vgpu-node.umockdev"), str(base / "a2"), str(DATA / "harvester-a2/testdata-sys"),
         {"pci", "mdev"})  # fmt: skip
    out["a2"] = base / "a2"
    return out


def test_schemas_are_valid_draft_2020_12():
    for name in NAMES:
        schema = load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.process
@pytest.mark.parametrize("command", NAMES)
@pytest.mark.parametrize("host", [*PROFILES, "a2"])
def test_json_output_validates(roots, cli, host, command):
    r = cli("--root", str(roots[host]), command, "--json")
    assert (r.code, r.err) == (0, "")
    doc = json.loads(r.out)
    validate(command, doc)
    if command == "devices" and host in ("mixed", "a2"):
        assert len(doc) == 3
    elif command == "types" and host != "passthrough":
        assert doc


def test_types_available_filter_validates(roots, cli):
    r = cli("--root", str(roots["a2"]), "types", "--available", "--gpu", "0000:08:00.0", "--json")
    validate("types", json.loads(r.out))


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("gpus", "layout", "mdev"),
        ("gpus", "address", "01:00.0"),
        ("gpus", "iommu_group", "13"),
        ("types", "layout", "passthrough"),
        ("types", "available_instances", -1),
        ("types", "framebuffer_mib", "1024"),
        ("devices", "uuid", "not-a-uuid"),
        ("devices", "kind", "pci"),
    ],
)
def test_schema_rejects_bad_values(roots, cli, name, field, value):
    host = "a2" if name != "gpus" else "p4"
    doc = json.loads(cli("--root", str(roots[host]), name, "--json").out)
    bad = copy.deepcopy(doc)
    bad[0][field] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(name, bad)


@pytest.mark.parametrize("name", NAMES)
def test_schema_requires_every_issue_field(name):
    required = set(load_schema(name)["items"]["required"])
    expected = {
        "gpus": {"address", "vendor_id", "device_id", "driver", "iommu_group", "numa_node", "layout",
                 "sriov_total_vfs", "sriov_num_vfs"},
        "types": {"parent", "layout", "type_id", "name", "profile", "available_instances", "max_instances",
                  "framebuffer_mib", "device_api", "description",
                  "fits_on_gpu", "max_on_gpu"},  # #30.4: the capacity model's count for the row's GPU
        "devices": {"kind", "id", "uuid", "parent", "physical_gpu", "layout", "type_id", "name", "iommu_group",
                    "vgpu_params"},
    }[name]  # fmt: skip
    assert required == expected
