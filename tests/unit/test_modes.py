"""Modes: exact plans, safety refusals (boot VGA, host-used group members, busy VFs, missing sriov-manage),
hostdev specs, and idempotence (apply, plan again → empty)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from vgpuadm import api, model
from vgpuadm import modes as modes_pkg
from vgpuadm.errors import ConflictError, UnsafeError, UsageError
from vgpuadm.io.planfile import parse_plan
from vgpuadm.model import Allocation, Holding, Layout, VgpuType, declare_device_mode, holding, known_device_mode
from vgpuadm.modes import MODES, Mode, for_layout, for_name, of, register
from vgpuadm.modes import base as registry
from vgpuadm.modes.mdev import MdevMode
from vgpuadm.modes.vf_pool import VfPoolMode
from vgpuadm.modes.vf_vgpu import VfVgpuMode
from vgpuadm.plan import desired
from vgpuadm.plan.apply import build_apply_plan, resolve_types
from vgpuadm.plan.domains import Domains
from vgpuadm.plan.guest import plan_create
from vgpuadm.plan.restore import reset_losses
from vgpuadm.sim.treestate import diff, tree_state
from vgpuadm.steps import DefineDomain, DriversProbe, RecordDrivers, SetDriverOverride, SriovManage, Unbind
from vgpuadm.virt import xml

PCI = "/sys/bus/pci"


def test_registry() -> None:
    assert for_layout(Layout.MDEV_PF).name == "mdev" and for_layout("mdev-vf").name == "mdev"
    assert for_layout(Layout.VENDOR_VFIO).name == "vf"
    assert for_layout(Layout.PASSTHROUGH).name == "pci"
    assert for_name("vf") is for_layout(Layout.VENDOR_VFIO)
    with pytest.raises(UsageError, match=r'^No mode handles layout "nope"$'):
        for_layout("nope")


def test_register_refuses_what_would_shadow_a_mode() -> None:
    """modes.register (what an entry point of the vgpuadm.modes group names) takes a Mode whose name and layouts
    are free; these are refused before anything is registered."""

    class Again(MdevMode):
        layouts = ()

    class Layouts(MdevMode):
        name = "another"

    with pytest.raises(ValueError, match=r"^'nope' is not a vgpuadm Mode$"):
        register("nope")  # type: ignore[arg-type]
    for mode in (Again(), Layouts()):
        with pytest.raises(ValueError, match=r"is already registered \(or its layouts are handled\)$"):
            register(mode)
    assert [m.name for m in MODES] == ["mdev", "vf", "pci", "sriov", "mig", "pool", "virtio-gl"]
    assert not known_device_mode("another")
    with pytest.raises(UsageError, match=r'^Unknown device mode "another"$'):
        for_name("another")


def test_a_recorded_mode_holds_what_its_mode_declares() -> None:
    """What a device holds of its GPU is the mode's (Mode.holds) and the model's one table (model.holding) alike; an
    added mode's name follows the mode-name grammar and cannot change what a known mode holds."""
    assert {m.name: m.holds for m in MODES if known_device_mode(m.name)} == {
        m.name: holding(m.name) for m in MODES if known_device_mode(m.name)
    }
    assert {m.name for m in MODES if known_device_mode(m.name)} == {"mdev", "vf", "pci", "pool", "virtio-gl"}
    for bad in ("", "Serial", "9x", "a b", "x" * 33):
        with pytest.raises(ValueError, match=r"cannot be declared"):
            declare_device_mode(bad, Holding.NOTHING)
    with pytest.raises(ValueError, match=r"^device mode 'mdev' cannot be declared \(as nothing\)$"):
        declare_device_mode("mdev", Holding.NOTHING)
    assert not known_device_mode("x" * 33)


def test_vfio_bind_takes_the_whole_group_and_restore_gives_it_back(sim_host: Callable[[str], Path]) -> None:
    root = str(sim_host("passthrough"))
    before = tree_state(root)
    snap = api.discover(root)
    plan = api.plan_vfio_bind(snap, "0000:65:00.0")
    assert plan.steps == (
        RecordDrivers((("0000:65:00.0", "nvidia"), ("0000:65:00.1", "snd_hda_intel"))),
        Unbind("0000:65:00.0", "nvidia"),
        SetDriverOverride("0000:65:00.0", "vfio-pci"),
        DriversProbe("0000:65:00.0", "vfio-pci"),
        Unbind("0000:65:00.1", "snd_hda_intel"),
        SetDriverOverride("0000:65:00.1", "vfio-pci"),
        DriversProbe("0000:65:00.1", "vfio-pci"),
    )
    assert for_name("pci").hostdev_spec(snap, "0000:65:00.0") == {
        "mode": "pci", "functions": ["0000:65:00.0", "0000:65:00.1"], "managed": "yes",
    }  # fmt: skip
    api.apply(plan, root)
    after = api.discover(root)
    assert after.functions["0000:65:00.0"].driver == "vfio-pci"
    assert after.functions["0000:65:00.1"].driver == "vfio-pci"
    assert api.original_drivers(root) == {"0000:65:00.0": "nvidia", "0000:65:00.1": "snd_hda_intel"}
    assert api.plan_vfio_bind(after, "0000:65:00.0").empty
    api.apply(api.plan_vfio_restore(after, "0000:65:00.0"), root)
    assert diff(before, tree_state(root)) == {}
    assert api.original_drivers(root) == {}
    assert api.plan_vfio_restore(api.discover(root), "0000:65:00.0").empty


def test_bridge_in_group_is_ignored(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("passthrough")))
    plan = api.plan_vfio_bind(snap, "0000:01:00.0")
    touched = {getattr(s, "address", None) for s in plan.steps} - {None}
    assert touched == {"0000:01:00.0", "0000:01:00.1"}  # the root port 0000:00:01.0 shares group 1


def test_boot_vga_is_refused_unless_forced(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("gvt-g")))
    with pytest.raises(UnsafeError) as info:
        api.plan_vfio_bind(snap, "0000:00:02.0")
    assert info.value.message == "0000:00:02.0 is the boot VGA device (boot_vga=1); the host console uses it"
    assert info.value.hint == "pass --force if the host console is expendable"
    assert not api.plan_vfio_bind(snap, "0000:00:02.0", force=True).empty


def test_host_used_group_member_is_unsafe(sim_host: Callable[[str], Path]) -> None:
    """A NIC bound to its driver in the GPU's group: built by re-pointing the audio function's group link would
    need tree surgery, so the snapshot is edited instead (the planner is pure)."""
    import dataclasses

    snap = api.discover(str(sim_host("passthrough")))
    nic = dataclasses.replace(
        snap.functions["0000:65:00.1"], address="0000:66:00.0", class_code="0x020000", driver="ixgbe"
    )
    groups = {**snap.iommu_groups, 13: (*snap.iommu_groups[13], "0000:66:00.0")}
    snap = dataclasses.replace(snap, functions={**snap.functions, nic.address: nic}, iommu_groups=groups)
    with pytest.raises(UnsafeError) as info:
        api.plan_vfio_bind(snap, "0000:65:00.0")
    assert info.value.message == (
        "IOMMU group 13 of 0000:65:00.0 also holds 0000:66:00.0 (class 0x020000, driver ixgbe), which the host uses"
    )
    forced = api.plan_vfio_bind(snap, "0000:65:00.0", force=True)
    assert Unbind("0000:66:00.0", "ixgbe") in forced.steps


def test_vfio_bind_refuses_a_gpu_with_vgpus(sim_host: Callable[[str], Path]) -> None:
    root = str(sim_host("p4"))
    plan, ids = api.plan_create(api.discover(root), "P4-1Q", gpu="0000:01:00.0")
    api.apply(plan, root)
    with pytest.raises(ConflictError, match=rf"^0000:01:00.0 hosts vGPUs or VFs \({ids[0]}\)$"):
        api.plan_vfio_bind(api.discover(root), "0000:01:00.0")


@pytest.mark.process
def test_mdev_and_vf_idempotence_and_specs(sim_host: Callable[[str], Path]) -> None:
    root = str(sim_host("h200-vendor-vfio"))
    plan, ids = api.plan_create(api.discover(root), "H200X-4C", params="frame_rate_limiter=0")
    assert ids == ["0000:18:00.4"]
    api.apply(plan, root)
    snap = api.discover(root)
    assert snap.vendor_vfs["0000:18:00.4"].current_type == 1420
    assert snap.vendor_vfs["0000:18:00.4"].vgpu_params == "frame_rate_limiter=0"
    again, vf = api.plan_vf_type(snap, "H200X-4C", "0000:18:00.4")
    assert again.empty and vf == "0000:18:00.4"
    assert for_name("vf").hostdev_spec(snap, vf) == {"mode": "vf", "address": vf, "managed": "no"}
    api.apply(api.plan_vf_clear(snap, vf), root)
    assert api.plan_vf_clear(api.discover(root), vf).empty


def test_sriov_nvidia_needs_sriov_manage(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    (root / "usr/lib/nvidia/sriov-manage").unlink()  # `sim build` installs the simulated one; a host without it
    snap = api.discover(str(root))
    with pytest.raises(UsageError) as info:
        api.plan_sriov(snap, "0000:18:00.0", False)
    assert info.value.message == ("0000:18:00.0 is bound to nvidia and /usr/lib/nvidia/sriov-manage is not installed")
    script = root / "usr/lib/nvidia/sriov-manage"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    assert api.plan_sriov(snap, "0000:18:00.0", False).steps == (SriovManage("0000:18:00.0", False),)
    assert api.plan_sriov(snap, "0000:18:00.0", True).empty  # already enabled
    with pytest.raises(UsageError, match="sriov-manage enables all 16 VFs, not 4"):
        api.plan_sriov(snap, "0000:18:00.0", True, 4)


def test_sriov_refuses_busy_vfs(sim_host: Callable[[str], Path]) -> None:
    root = str(sim_host("a100-mdev-vf"))
    plan, ids = api.plan_create(api.discover(root), "A100-4C")
    api.apply(plan, root)
    with pytest.raises(ConflictError, match=rf"^VFs of 0000:41:00.0 are in use \({ids[0]}\)$"):
        api.plan_sriov(api.discover(root), "0000:41:00.0", False)


@pytest.mark.process
def test_sriov_manage_failure_is_rolled_back(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    script = root / "usr/lib/nvidia/sriov-manage"
    script.write_text("#!/bin/sh\necho 'GPU at $2 is busy' >&2\nexit 3\n")
    script.chmod(0o755)
    plan = api.plan_sriov(api.discover(str(root)), "0000:18:00.0", False)
    with pytest.raises(Exception) as info:
        api.apply(plan, str(root))
    assert str(info.value) == (
        "step 1/1 run /usr/lib/nvidia/sriov-manage -d 0000:18:00.0 failed: "
        "/usr/lib/nvidia/sriov-manage -d 0000:18:00.0 exited with 3: GPU at $2 is busy"
    )


def test_create_with_fixed_uuids_is_idempotent(sim_host: Callable[[str], Path]) -> None:
    root = str(sim_host("p4"))
    uuids = ["83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"]
    plan, ids = api.plan_create(api.discover(root), "P4-1Q", 2, uuids=uuids)
    api.apply(plan, root)
    again, ids_again = api.plan_create(api.discover(root), "P4-1Q", 2, uuids=uuids)
    assert again.empty and ids_again == ids == uuids
    with pytest.raises(ConflictError, match=rf"^mdev {uuids[0]} already exists \(type nvidia-63 on 0000:01:00.0\)$"):
        api.plan_create(api.discover(root), "P4-2Q", 2, uuids=uuids)
    with pytest.raises(ConflictError, match=rf"^mdev {uuids[1]} already exists"):
        api.plan_create(api.discover(root), "P4-1Q", 2, uuids=[uuids[1], "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003"])


def test_a_mode_answers_what_the_reports_ask(sim_host: Callable[[str], Path]) -> None:
    """The id the device lists show, the label a sentence gives, whether `show` finds the device present (the mdev
    of its type, the VF running its type, the function on vfio-pci, the render node), and the registry's flags."""
    root = str(sim_host("p4"))
    plan, [uuid] = api.plan_create(api.discover(root), "nvidia-63")
    api.apply(plan, root)
    snap = api.discover(root)
    parent = snap.mdevs[uuid].parent
    mdev = Allocation("vm", "mdev", "nvidia-63", parent, uuid=uuid.upper())
    other_type = Allocation("vm", "mdev", "nvidia-64", parent, uuid=uuid)
    vf = Allocation("vm", "vf", "nvidia-1414", "0000:41:00.4", address="0000:41:00.4")
    pci = Allocation("vm", "pci", None, parent, address=parent)
    gl = Allocation("vm", "virtio-gl", extra={"rendernode": "/dev/dri/renderD128"})
    answers = [(of(a).device_id(a), of(a).device_label(a), of(a).present(snap, a)) for a in (mdev, vf, pci, gl)]
    assert answers == [
        (uuid.upper(), f"mdev {uuid.upper()}", True),
        ("0000:41:00.4", "VF 0000:41:00.4", False),
        (parent, None, False),  # on nvidia, not vfio-pci
        (None, None, False),  # a P4 host has no render node
    ]
    assert not of(other_type).present(snap, other_type)
    assert [m.name for m in MODES if m.paravirtual] == ["virtio-gl"]
    assert [m.name for m in MODES if m.needs_vfs] == ["sriov"]
    assert [m.name for m in MODES if m.whole_gpu] == ["pci"]


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """modes.register for one test: the registry's and the model's tables are this test's copies, put back after
    it (an added mode registered in the test process would claim its types in every later test)."""
    monkeypatch.setattr(registry, "_ADDED", [])
    monkeypatch.setattr(registry, "_BY_NAME", dict(registry._BY_NAME))
    monkeypatch.setattr(registry, "_BY_LAYOUT", dict(registry._BY_LAYOUT))
    monkeypatch.setattr(model, "_HOLDS", dict(model._HOLDS))


def _claiming(base: type[Mode], mode_name: str, layout: Layout) -> Mode:
    """A mode added over `base`'s mechanics that claims every type of `layout`."""

    class Added(base):  # type: ignore[valid-type,misc]
        name: ClassVar[str] = mode_name
        layouts: ClassVar[tuple[Layout, ...]] = ()

        def claims(self, t: VgpuType) -> bool:
            return t.layout == layout

    return Added()


_DOMAIN = xml.domain_definition("web01", uuid="6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a01")


@pytest.mark.parametrize(
    ("profile", "type_name", "base", "layout", "holds"),
    [
        ("mtty", "mtty-1", MdevMode, Layout.MDEV_PF, Holding.MDEV_INSTANCE),
        ("h200-vendor-vfio", "nvidia-1426", VfVgpuMode, Layout.VENDOR_VFIO, Holding.VF_TYPE),
        ("uhd770-vf-pool", "vf-uhd770", VfPoolMode, Layout.VF_POOL, Holding.POOL_VF),
    ],
)
def test_an_added_mode_records_the_devices_of_the_types_it_claims(
    sim_host: Callable[[str], Path], isolated_registry: None, profile: str, type_name: str, base: type[Mode],
    layout: Layout, holds: Holding,
) -> None:  # fmt: skip
    """Whatever layout's types an added mode claims, `create`, `create --on-demand` and `apply -f` plan its devices
    with it and record them under its name, holding what its base mode's hold."""
    snap = api.discover(str(sim_host(profile)))
    added = register(_claiming(base, "added", layout))
    assert (for_name("added"), holding("added")) == (added, holds)
    [t] = [t for t in snap.types() if t.type_id == type_name][:1]
    assert modes_pkg.for_type(t) is added

    _plan, made, _after = plan_create(snap, _DOMAIN, type_name)
    assert [(a.mode, a.type_id) for a in made] == [("added", type_name)]
    if layout is not Layout.VF_POOL:  # a pool VF is not made on demand
        _plan, made, _after = plan_create(snap, _DOMAIN, type_name, on_demand=True)
        assert [(a.mode, a.type_id, a.on_demand) for a in made] == [("added", type_name, True)]

    doc = parse_plan(f"vms:\n  web01: {{type: {type_name}}}\n")
    doms = Domains.of(snap.host_key, [("web01", "6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a01", _DOMAIN, False, "")])
    d = desired.diff(doc, desired.Current(), resolve_types(doc, snap, []))
    [define] = [s for s in build_apply_plan(doc, d, snap, doms, {}).steps if isinstance(s, DefineDomain)]
    recorded = xml.parse_allocations(define.element, domain="web01")
    assert [(a.mode, a.type_id) for a in recorded] == [("added", type_name)]


def test_each_mode_and_enabler_declares_what_a_gpu_reset_loses():
    """Issue 35: what a reset loses is declared once — by the enablers next to the restore order and by each mode
    for its devices — and listed in restore order (the phases that make it again); the simulator (sim/reset.py)
    forgets exactly these (tests/unit/test_sim_gpu_reset.py)."""
    assert reset_losses() == [
        ("sriov", ("SR-IOV VFs",)),
        ("policies", ("heterogeneous mode", "the vGPU scheduler")),
        ("mig", ("GPU instances", "MIG mode (Hopper and newer)")),
        ("vgpu", ("mdevs", "VF vGPU types and placement IDs")),
        ("params", ("vgpu_params",)),
        ("vfio", ("vfio-pci binds of the GPU's functions", "VF binds to vfio-pci")),
    ]


def test_entry_points_are_read_only_when_a_distribution_may_declare_a_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.mode_entry_points skips importlib.metadata (~20 ms of imports) only when no dist-info or egg-info on
    sys.path has an entry_points.txt naming the group; a zip, an egg or another distribution finder is left to
    importlib.metadata."""
    site = tmp_path / "site"
    info = site / "other-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text("[console_scripts]\nother = other:main\n")
    (site / "plain.egg-info").write_text("Metadata-Version: 2.1\n")  # a PKG-INFO file: no entry points
    monkeypatch.setattr("sys.path", [str(site), str(tmp_path / "missing")])
    assert (model._may_declare_modes(), model.mode_entry_points()) == (False, [])
    (info / "entry_points.txt").write_text("[vgpuadm.modes]\nserial = vgpuadm_serial_port:MODE\n")
    assert model._may_declare_modes()
    assert [(ep.name, ep.value) for ep in model.mode_entry_points()] == [("serial", "vgpuadm_serial_port:MODE")]
    (info / "entry_points.txt").unlink()
    assert not model._may_declare_modes()
    (tmp_path / "lib.zip").write_bytes(b"PK\x05\x06" + bytes(18))
    monkeypatch.setattr("sys.path", [str(site), str(tmp_path / "lib.zip")])
    assert model._may_declare_modes()
    monkeypatch.setattr("sys.path", [str(site)])

    class Finder:
        @staticmethod
        def find_distributions(*_args: object) -> list[object]:
            return []

    monkeypatch.setattr("sys.meta_path", [*sys.meta_path, Finder])
    assert model._may_declare_modes()
