"""Type names: NVIDIA profile parsing, description parsing, creatable_vgpu_types parsing and resolve_type."""

from __future__ import annotations

import pytest

from vgpuadm.errors import NotFoundError
from vgpuadm.model import Layout, VgpuType, describe_nvidia_name, parse_creatable, parse_description, resolve_type


def vtype(type_id: str, name: str, parent: str = "0000:01:00.0", layout: Layout = Layout.MDEV_PF) -> VgpuType:
    return VgpuType(parent, layout, type_id, name, name.split()[-1], 1, 1, None, "vfio-pci", "")


P4 = [vtype("nvidia-63", "GRID P4-1Q"), vtype("nvidia-64", "GRID P4-2Q"), vtype("nvidia-69", "GRID P4-4A"),
      vtype("nvidia-71", "GRID P4-1B"), vtype("nvidia-289", "GRID P4-8C")]  # fmt: skip
H200 = [vtype("nvidia-1414", "NVIDIA H200X-1-18C", vf, Layout.VENDOR_VFIO) for vf in ("0000:18:00.4", "0000:18:00.5")]


@pytest.mark.parametrize("wanted", ["nvidia-63", "GRID P4-1Q", "P4-1Q", "p4-1q", "NVIDIA-63", "grid  p4-1q"])
def test_mdev_spellings_resolve(wanted):
    assert [t.type_id for t in resolve_type(P4, wanted)] == ["nvidia-63"]


@pytest.mark.parametrize("wanted", ["nvidia-1414", "1414", "H200X-1-18C", "NVIDIA H200X-1-18C"])
def test_layout_c_spellings_resolve_on_every_vf(wanted):
    assert [(t.parent, t.type_id) for t in resolve_type(H200, wanted)] == [
        ("0000:18:00.4", "nvidia-1414"), ("0000:18:00.5", "nvidia-1414")
    ]  # fmt: skip


def test_bare_number_is_layout_c_only():
    with pytest.raises(NotFoundError) as exc:
        resolve_type(P4, "63", "0000:01:00.0")
    assert exc.value.message.startswith('Unknown type "63" on 0000:01:00.0')


def test_unknown_name_suggests_closest():
    with pytest.raises(NotFoundError) as exc:
        resolve_type(P4, "nvidia-999", "0000:01:00.0")
    assert exc.value.message == (
        'Unknown type "nvidia-999" on 0000:01:00.0; did you mean nvidia-69 (GRID P4-4A) or nvidia-289 (GRID P4-8C) '
        "or nvidia-63 (GRID P4-1Q)?"
    )
    assert exc.value.hint == "run `vgpuadm types` to list the types this host offers"


def test_a_swap_of_two_digits_is_one_edit():
    with pytest.raises(NotFoundError) as exc:
        resolve_type(P4, "nvidia-36")
    assert exc.value.message.startswith('Unknown type "nvidia-36" on this host; did you mean nvidia-63 (GRID P4-1Q) ')


def test_unknown_name_without_close_match_and_empty_host():
    with pytest.raises(NotFoundError) as exc:
        resolve_type(P4, "zzz", "this host")
    assert exc.value.message == 'Unknown type "zzz" on this host'
    with pytest.raises(NotFoundError) as exc:
        resolve_type([], "nvidia-63")
    assert exc.value.hint == "this host offers no vGPU types"


def test_ambiguous_profile_names_both_ids():
    types = [vtype("nvidia-63", "GRID P4-1Q"), vtype("nvidia-400", "NVIDIA P4-1Q", "0000:02:00.0")]
    with pytest.raises(NotFoundError) as exc:
        resolve_type(types, "P4-1Q")
    assert exc.value.message == 'Type "P4-1Q" is ambiguous on this host: nvidia-400, nvidia-63'


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("GRID P4-1Q", ("P4-1Q", "P4", None, 1024, "Q", None)),
        ("NVIDIA H200X-1-18C", ("H200X-1-18C", "H200X", 1, 18432, "C", None)),
        ("NVIDIA H200X-1-18CME", ("H200X-1-18CME", "H200X", 1, 18432, "C", "ME")),
        ("GRID P4-2B4", ("P4-2B4", "P4", None, 2048, "B", "4")),
        ("GRID M60-0B", ("M60-0B", "M60", None, 512, "B", None)),
        ("NVIDIA RTX6000-Ada-1Q", ("RTX6000-Ada-1Q", "RTX6000-Ada", None, 1024, "Q", None)),
        ("Single port serial", ("serial", None, None, None, None, None)),
    ],
)
def test_describe_nvidia_name(name, fields):
    n = describe_nvidia_name(name)
    assert (n.profile, n.board, n.slices, n.framebuffer_mib, n.series, n.variant) == fields


def test_parse_nvidia_description():
    text = "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=8\n"
    assert parse_description(text) == {
        "num_heads": 4, "frl_config": 60, "framebuffer_mib": 1024, "max_resolution": "5120x2880", "max_instance": 8
    }  # fmt: skip


def test_parse_gvt_description():
    text = "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n"
    assert parse_description(text) == {
        "low_gm_mib": 128, "high_gm_mib": 512, "fence": 4, "resolution": "1920x1200", "weight": 4
    }  # fmt: skip


@pytest.mark.parametrize("text", ["", "garbage", "num_heads=x, frl_config=60", "\x00\xff"])
def test_parse_odd_description_is_empty(text):
    assert parse_description(text) == {}


CREATABLE = [(1145, "NVIDIA L40S-1B"), (1146, "NVIDIA L40S-2B")]


@pytest.mark.parametrize(
    "text",
    [
        "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n",  # the driver's own format
        "1145 : NVIDIA L40S-1B\n1146 : NVIDIA L40S-2B\n",  # NVIDIA's fixtures: no header, one space
        "\nID : vGPU Name\n\n   1145   :   NVIDIA L40S-1B  \n\n1146:NVIDIA L40S-2B\n\n",  # blank lines, spacing
        "1145 NVIDIA L40S-1B\n1146 NVIDIA L40S-2B",  # colon-less, no final newline
    ],
)
def test_parse_creatable_forms(text):
    assert parse_creatable(text) == CREATABLE


def test_parse_creatable_header_only_is_empty():
    assert parse_creatable("ID    : vGPU Name\n") == []
