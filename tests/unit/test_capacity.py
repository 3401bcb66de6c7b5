"""catalog/capacity.py against the simulated kernel (the independent oracle): projected snapshots after planned
creates and removes, and placement / inventory / projection agreeing with what the kernel then reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.catalog import capacity
from vgpuadm.errors import CapacityError, NotFoundError
from vgpuadm.model import Allocation, DeviceMode, Holding, HostSnapshot, Layout, MdevParent, VgpuType
from vgpuadm.plan.devices import place
from vgpuadm.report.inventory import inventory
from vgpuadm.steps import CreateMdev, SetVfVgpuType


def _avail(snap: HostSnapshot) -> dict[tuple[str, str], int]:
    return {(t.parent, t.type_id): t.available_instances for t in snap.types()}


def _create(root: str, type_name: str, count: int = 1, gpu: str | None = None) -> list[Allocation]:
    """Create through the API; the allocations the plan made (as consume takes them)."""
    plan, _ = api.plan_create(api.discover(root), type_name, count, gpu=gpu)
    out = []
    for step in plan.steps:
        if isinstance(step, CreateMdev):
            out.append(Allocation("vm", "mdev", step.type_id, step.parent, step.uuid))
        elif isinstance(step, SetVfVgpuType):
            out.append(Allocation("vm", "vf", f"nvidia-{step.type_num}", step.vf, address=step.vf))
    api.apply(plan, root)
    return out


def _remove(root: str, a: Allocation) -> None:
    api.apply(api.plan_remove(api.discover(root), a.uuid or a.address or ""), root)


def _check_pool_projection(before: dict[tuple[str, str], int], proj: HostSnapshot, root: str, parent: str) -> None:
    """The projection never claims more than the kernel then reports, and for drivers whose costs are known (all
    the samples and GVT-g) it is exact."""
    real = _avail(api.discover(root))
    mine = {k: v for k, v in _avail(proj).items() if k[0] == parent}
    assert mine == {k: v for k, v in real.items() if k[0] == parent}, before
    assert all(v <= real[k] for k, v in _avail(proj).items())


@pytest.mark.parametrize(
    ("profile", "creates"),
    [
        ("mtty", [("mtty-2", 2), ("mtty-1", 3)]),
        ("kernel-samples", [("mbochs-large", 1), ("mbochs-small", 3), ("mdpy-hd", 2), ("mdpy-vga", 1)]),
        ("gvt-g", [("GVTg_V5_8", 1)]),
    ],
)
def test_release_on_pooled_parents_frees_the_shared_budget(
    sim_host: Callable[[str], Path], profile: str, creates: list[tuple[str, int]]
) -> None:
    """Regression: removing one mdev of a pooled type frees budget for the parent's other types too (mtty-2 gives
    back two mtty-1 ports). The old projection left the other types unchanged."""
    root = str(sim_host(profile))
    made = [a for type_name, n in creates for a in _create(root, type_name, n)]
    for a in made:
        snap = api.discover(root)
        before = _avail(snap)
        proj = capacity.release(snap, [a])
        assert proj.mdevs.keys() == snap.mdevs.keys() - {a.uuid}
        assert _avail(proj)[(a.parent or "", a.type_id or "")] >= before[(a.parent or "", a.type_id or "")] + 1
        _remove(root, a)
        _check_pool_projection(before, proj, root, a.parent or "")


@pytest.mark.parametrize(
    ("profile", "creates"),
    [
        ("mtty", [("mtty-2", 1), ("mtty-1", 1), ("mtty-2", 3)]),
        ("kernel-samples", [("mbochs-medium", 1), ("mbochs-small", 2), ("mdpy-xga", 1)]),
        ("gvt-g", [("GVTg_V5_4", 1)]),
    ],
)
def test_consume_on_pooled_parents_draws_on_the_shared_budget(
    sim_host: Callable[[str], Path], profile: str, creates: list[tuple[str, int]]
) -> None:
    """Creating one mtty-2 takes two ports from mtty-1 as well: the projection must not offer them."""
    root = str(sim_host(profile))
    for type_name, n in creates:
        snap = api.discover(root)
        before = _avail(snap)
        made = _create(root, type_name, n)
        _check_pool_projection(before, capacity.consume(snap, made), root, made[0].parent or "")


def test_unknown_pooled_driver_is_conservative(sim_host: Callable[[str], Path]) -> None:
    """Costs unknown (a driver not in the model): a removal frees one of its own type only, a create takes one of
    every type — never more than the kernel could report."""
    snap = api.discover(str(sim_host("mtty")))
    p = snap.mdev_parents["mtty"]
    renamed = tuple(t.__class__(**{**t.__dict__, "type_id": "x" + t.type_id}) for t in p.types)
    assert capacity.pool_cost(renamed[0]) is None
    assert [t.available_instances for t in capacity._pool_after(renamed, "xmtty-2", +1)] == [24, 13]
    assert [t.available_instances for t in capacity._pool_after(renamed, "xmtty-2", -1)] == [23, 11]


# -- placement, inventory and the projection agree with the kernel ------------------------------------------

PROBES = {
    "p4": ["P4-1Q", "P4-2Q", "P4-4Q", "P4-8Q"],
    "a100-mdev-vf": ["A100-4C", "A100-5C", "A100-10C", "A100-20C", "A100-40C"],
    "h200-vendor-vfio": ["H200X-4C", "H200X-8C", "H200X-35C", "H200X-70C", "H200X-141C"],
}


def _fits(snap: HostSnapshot, type_name: str) -> int:
    """How many of `type_name` placement finds room for at once (0 when none or the type is not offered)."""
    n = 0
    while True:
        try:
            place(snap, type_name, n + 1)
        except (CapacityError, NotFoundError):
            return n
        n += 1


def _inventory_free(snap: HostSnapshot, type_name: str) -> int:
    doc = inventory(snap, None, host="h", generated_at="t")
    return sum(r["free"] for r in doc["types"] if type_name in (r["type_id"], r["name"], r["profile"]))


@pytest.mark.process
@pytest.mark.parametrize(
    ("profile", "steps"),
    [
        ("p4", [("+", "P4-2Q", 2), ("+", "P4-8Q", 1), ("-", 0), ("+", "P4-1Q", 3), ("-", 0), ("-", 0)]),
        ("a100-mdev-vf", [("+", "A100-10C", 3), ("+", "A100-5C", 1), ("+", "A100-10C", 1), ("-", 0), ("-", 2),
                          ("-", 0), ("-", 0), ("+", "A100-4C", 2), ("+", "A100-40C", 1), ("-", 1)]),
        ("h200-vendor-vfio", [("+", "H200X-35C", 2), ("+", "H200X-8C", 1), ("+", "H200X-35C", 2), ("-", 0),
                              ("-", 2), ("-", 0), ("-", 0), ("+", "H200X-70C", 2), ("-", 1), ("+", "H200X-4C", 1)]),
    ],
)  # fmt: skip
def test_placement_inventory_and_projection_agree_with_the_kernel(
    sim_host: Callable[[str], Path], profile: str, steps: list[tuple[object, ...]]
) -> None:
    root = str(sim_host(profile))
    live: list[Allocation] = []
    for step in steps:
        snap = api.discover(root)
        if step[0] == "+":
            try:
                made = _create(root, str(step[1]), int(str(step[2])))
            except CapacityError:
                continue  # the kernel agrees below: nothing changed
            projected = capacity.consume(snap, made)
            live.extend(made)
        else:
            gone = live.pop(int(str(step[1])))
            projected = capacity.release(snap, [gone])
            _remove(root, gone)
        real = api.discover(root)
        for probe in PROBES[profile]:
            fits = _fits(real, probe)
            assert _inventory_free(real, probe) == fits, (step, probe)
            if any(probe == t.profile for t in snap.types()):
                assert _fits(projected, probe) == fits, (step, probe)
            else:  # layout C: a type no VF listed before the change is unknown to the projection; never more
                assert _fits(projected, probe) <= fits, (step, probe)


def test_the_simulated_kernel_does_not_import_the_rules_it_checks() -> None:
    sim = Path(capacity.__file__).parent.parent / "sim"
    assert not [
        p.name for p in sim.glob("*.py") if "catalog.capacity" in p.read_text() or "import capacity" in p.read_text()
    ]


def test_each_layout_and_device_mode_declares_its_rule_once() -> None:
    """capacity applies the sharing rule a layout declares (Layout.sharing) and what a device mode holds
    (DeviceMode.holds) as data: exact for every layout and mode, NVIDIA's one type per GPU turned into the kernel's
    shared budget for other mdev drivers."""

    def parent(layout: Layout, type_id: str) -> MdevParent:
        t = VgpuType("p", layout, type_id, type_id, type_id, 1, 1, None, "vfio-pci", "")
        return MdevParent("p", "/sys/devices/p", layout, None, (t,))

    assert {layout: capacity.sharing_rule(layout, parent(layout, "nvidia-63")) for layout in Layout} == {
        Layout.MDEV_PF: "one-type",
        Layout.MDEV_VF: "one-size",
        Layout.VENDOR_VFIO: "one-size",
        Layout.SRIOV_PF: "whole",
        Layout.PASSTHROUGH: "whole",
        Layout.VF_POOL: "whole",
    }
    assert capacity.sharing_rule(Layout.MDEV_PF, parent(Layout.MDEV_PF, "mtty-1")) == "kernel"
    assert capacity.sharing_rule(Layout.MDEV_PF, None) == "kernel"
    assert [layout for layout in Layout if layout.one_vgpu_per_vf] == [Layout.MDEV_VF, Layout.VENDOR_VFIO]
    assert [layout for layout in Layout if layout.parent_is_device or layout.types_by_number] == [Layout.VENDOR_VFIO]
    assert {mode: mode.holds for mode in DeviceMode} == {
        DeviceMode.MDEV: Holding.MDEV_INSTANCE,
        DeviceMode.VF: Holding.VF_TYPE,
        DeviceMode.PCI: Holding.NOTHING,
        DeviceMode.POOL: Holding.POOL_VF,
        DeviceMode.VIRTIO_GL: Holding.NOTHING,
    }
