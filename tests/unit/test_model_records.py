"""The model's hand-written records keep the frozen-dataclass behaviour callers rely on (vgpuadm/model.py says why
they are not dataclasses). That the read commands' fast path stays free of the modules they avoid is checked in
test_read_commands.py."""

from __future__ import annotations

import copy
import dataclasses
import enum
import pickle
from collections.abc import Callable

import pytest

from vgpuadm.model import Allocation, DeviceMode, Holding, Layout, Mdev, PciFunction, VgpuType


def p4_type(**changes: object) -> VgpuType:
    t = VgpuType("0000:01:00.0", Layout.MDEV_PF, "nvidia-63", "GRID P4-1Q", "P4-1Q", 8, 8, 1024, "vfio-pci", "d",
                 {"board": "P4"})  # fmt: skip
    return dataclasses.replace(t, **changes) if changes else t


def test_defaults_and_keyword_construction():
    fn = PciFunction(address="0000:01:00.0", vendor_id="0x10de", device_id="0x1bb3", class_code="0x030200")
    assert (fn.driver, fn.virtfns, fn.is_bridge, fn.sysfs_path, fn.iommu_group) == (None, (), False, "", None)
    assert Allocation("vm1", "mdev").extra == {}
    assert Allocation("vm1", "mdev").extra is not Allocation("vm1", "mdev").extra


def test_equality_and_hash_leave_out_attributes_and_extra():
    assert p4_type() == p4_type(attributes={"board": "other"})
    assert hash(p4_type()) == hash(p4_type(attributes={}))
    assert p4_type() != p4_type(available_instances=7)
    assert Allocation("vm1", "mdev", extra={"a": "1"}) == Allocation("vm1", "mdev")
    assert Mdev("u", "nvidia-63", "p") != ("u", "nvidia-63", "p", None, None)  # a record, not a tuple
    assert len({Mdev("u", "nvidia-63", "p"), Mdev("u", "nvidia-63", "p")}) == 1


def test_fields_cannot_be_assigned_or_deleted():
    m = Mdev("u", "nvidia-63", "p")
    with pytest.raises(AttributeError, match="cannot assign to field 'uuid'"):
        m.uuid = "v"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'uuid'"):
        del m.uuid  # type: ignore[misc]
    assert m.uuid == "u"


def test_dataclasses_replace_fields_and_asdict_work():
    t = p4_type()
    changed = dataclasses.replace(t, available_instances=0)
    assert (changed.available_instances, t.available_instances, changed.name) == (0, 8, "GRID P4-1Q")
    assert [f.name for f in dataclasses.fields(Mdev)] == ["uuid", "type_id", "parent", "iommu_group", "vgpu_params"]
    assert dataclasses.asdict(Mdev("u", "nvidia-63", "p", 3)) == {
        "uuid": "u", "type_id": "nvidia-63", "parent": "p", "iommu_group": 3, "vgpu_params": None
    }  # fmt: skip
    with pytest.raises(TypeError):
        dataclasses.replace(t, nope=1)


def test_repr_pickle_and_copy():
    m = Mdev("u", "nvidia-63", "p", 3)
    assert repr(m) == "Mdev(uuid='u', type_id='nvidia-63', parent='p', iommu_group=3, vgpu_params=None)"
    t = p4_type()
    for clone in (pickle.loads(pickle.dumps(t)), copy.copy(t), copy.deepcopy(t)):
        assert clone == t and clone.attributes == t.attributes
        with pytest.raises(AttributeError):
            clone.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize("ours", [Layout, DeviceMode, Holding], ids=lambda c: c.__name__)
def test_the_string_enums_answer_as_enum_strenum(ours: type) -> None:
    """Layout, DeviceMode and Holding are not built with the enum module (model.py says why) yet answer as an
    enum.StrEnum of the same members does: members, values, names, repr, str, format, hash, calls, errors, order,
    copies and pickles."""
    real = enum.StrEnum(ours.__name__, {m.name: m.value for m in ours})  # type: ignore[misc]
    pairs = list(zip(ours, real, strict=True))
    assert [(m.name, m.value, type(m.value)) for m in ours] == [(r.name, r.value, type(r.value)) for r in real]
    for m, r in pairs:
        assert (repr(m), str(m), f"{m}", f"{m:>20}", hash(m), m == r.value) == (
            repr(r), str(r), f"{r}", f"{r:>20}", hash(r), r == r.value)  # fmt: skip
        assert type(str(m)) is str and isinstance(m, ours) and isinstance(m, str)
        assert ours(m.value) is m and ours(m) is m and getattr(ours, m.name) is m
        assert copy.copy(m) is m and copy.deepcopy(m) is m and pickle.loads(pickle.dumps(m)) is m
        assert {m.value: 1}[m] == 1 and {m: 1}[m.value] == 1
    assert len(ours) == len(real)
    bad = ("nope", "", None, 3, [], next(iter(real)).name)
    assert [_value_error(ours, b) for b in bad] == [_value_error(real, b) for b in bad]
    assert None not in [_value_error(ours, b) for b in bad]
    member = next(iter(ours))
    with pytest.raises(AttributeError):
        setattr(ours, member.name, "x")


def _value_error(call: Callable[[object], object], value: object) -> str | None:
    try:
        call(value)
    except ValueError as exc:
        return str(exc)
    return None
