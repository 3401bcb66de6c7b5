"""Placement on simulated hosts: pack/spread, NUMA, the per-generation compatibility rules, exact reasons."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.errors import CapacityError, NotFoundError, UsageError
from vgpuadm.plan.devices import place


def _host(sim_host: Callable[[str], Path], profile: str, *creates: tuple[str, int, str | None]) -> str:
    root = str(sim_host(profile))
    for type_name, count, gpu in creates:
        plan, _ = api.plan_create(api.discover(root), type_name, count, gpu=gpu)
        api.apply(plan, root)
    return root


def test_pack_fills_the_busiest_gpu_and_spread_the_idlest(sim_host: Callable[[str], Path]) -> None:
    root = _host(sim_host, "p4", ("P4-2Q", 1, "0000:02:00.0"))
    snap = api.discover(root)
    assert [p for p, _ in place(snap, "P4-2Q", 3).choices] == ["0000:02:00.0"] * 3
    assert [p for p, _ in place(snap, "P4-2Q", 3, policy="spread").choices] == [
        "0000:01:00.0", "0000:01:00.0", "0000:02:00.0",
    ]  # fmt: skip
    # Four fit on 02 (one exists), so the fourth of four goes to 01.
    assert [p for p, _ in place(snap, "P4-2Q", 4).choices] == ["0000:02:00.0"] * 3 + ["0000:01:00.0"]


def test_one_type_per_gpu_on_layout_a(sim_host: Callable[[str], Path]) -> None:
    root = _host(sim_host, "p4", ("P4-2Q", 1, "0000:01:00.0"))
    placement = place(api.discover(root), "P4-1Q", 2)
    assert [p for p, _ in placement.choices] == ["0000:02:00.0", "0000:02:00.0"]
    assert placement.rejected == [("0000:01:00.0", "GPU runs nvidia-64 (GRID P4-2Q); one vGPU type per GPU")]
    assert placement.explain() == (
        "placement of 2 × nvidia-63, policy pack (fill the busiest GPU first):\n"
        "  0000:02:00.0: chosen for 2 (0 vGPU(s) ran on it)\n"
        "  0000:01:00.0: not chosen: GPU runs nvidia-64 (GRID P4-2Q); one vGPU type per GPU"
    )  # api.discover reads no model names: the addresses alone
    with pytest.raises(CapacityError) as info:
        place(api.discover(root), "P4-8Q", 2)
    assert info.value.message == (
        "No room for 2 × nvidia-66 (only 1 fit): 0000:01:00.0: GPU runs nvidia-64 (GRID P4-2Q); one vGPU type per "
        "GPU; 0000:02:00.0: no free instances of nvidia-66 left after this request"
    )
    [held] = api.discover(root).mdevs  # placement knows no owners: the hint gives both ways (the Session names them)
    assert info.value.blockers == ((held, "mdev remove"),)
    assert info.value.hint == (
        f"free what is in the way: {held} (`vgpuadm mdev remove {held}`, or `vgpuadm destroy --vm VM --uuid {held}` "
        "where a VM owns it); or pick another type or GPU; `vgpuadm types --available` lists what fits now"
    )
    info.value.name_owners(lambda dev: "web01" if dev == held else None, lambda dev: True)
    assert info.value.hint == (
        f"free what is in the way: web01 owns {held} (`vgpuadm destroy --vm web01 --uuid {held}`); or pick another "
        "type or GPU; `vgpuadm types --available` lists what fits now"
    )


def test_numa(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("p4")))
    placement = place(snap, "P4-2Q", numa=1)
    assert [p for p, _ in placement.choices] == ["0000:02:00.0"]
    assert placement.rejected == [("0000:01:00.0", "on NUMA node 0, wanted 1")]
    with pytest.raises(CapacityError) as info:
        place(snap, "P4-2Q", numa=3)
    assert info.value.message == (
        "No room for 1 × nvidia-64: 0000:01:00.0: on NUMA node 0, wanted 3; 0000:02:00.0: on NUMA node 1, wanted 3"
    )


def test_layout_b_one_vgpu_per_vf_and_one_size_per_gpu(sim_host: Callable[[str], Path]) -> None:
    root = _host(sim_host, "a100-mdev-vf", ("A100-10C", 1, None))
    snap = api.discover(root)
    placement = place(snap, "A100-10C", 2)
    assert [p for p, _ in placement.choices] == ["0000:41:00.5", "0000:41:00.6"]
    assert placement.rejected == [("0000:41:00.4", "VF already hosts a vGPU (nvidia-471); one vGPU per VF")]
    with pytest.raises(CapacityError) as info:
        place(snap, "A100-4C")
    assert info.value.message == (
        "No room for 1 × nvidia-468: 0000:41:00.4: VF already hosts a vGPU (nvidia-471); one vGPU per VF; "
        "15 VFs of 0000:41:00.0: GPU runs 10240 MiB vGPUs; one framebuffer size per GPU"
    )
    # A100-10C: at most 4 per GPU (max_instance), one already runs.
    with pytest.raises(CapacityError, match=r"^No room for 4 × nvidia-471 \(only 3 fit\)"):
        place(snap, "A100-10C", 4)


@pytest.mark.process
def test_layout_c_full_gpu_is_a_capacity_error(sim_host: Callable[[str], Path]) -> None:
    root = _host(sim_host, "h200-vendor-vfio", ("H200X-70C", 2, None))
    with pytest.raises(CapacityError) as info:
        place(api.discover(root), "H200X-70C")
    assert info.value.message == (
        "No room for 1 × H200X-70C: no VF lists it in nvidia/creatable_vgpu_types "
        "(0000:18:00.0: 2 VFs host vGPUs, 14 free VFs do not list it)"
    )


def test_layout_c_places_on_free_vfs(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("h200-vendor-vfio")))
    placement = place(snap, "1420", 2)
    assert [(p, t.type_id) for p, t in placement.choices] == [
        ("0000:18:00.4", "nvidia-1420"), ("0000:18:00.5", "nvidia-1420"),
    ]  # fmt: skip


def test_bad_requests(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("p4")))
    with pytest.raises(NotFoundError) as info:
        place(snap, "P4-1Qx")
    assert info.value.message.startswith('Unknown type "P4-1Qx" on this host; did you mean nvidia-63 (GRID P4-1Q)')
    with pytest.raises(UsageError, match=r'^Unknown placement policy "fill"$'):
        place(snap, "P4-1Q", policy="fill")
    with pytest.raises(UsageError, match=r"^--count must be at least 1, not 0$"):
        place(snap, "P4-1Q", 0)
    with pytest.raises(NotFoundError, match=r"^No GPU or mdev parent 0000:09:00.0 on this host$"):
        place(snap, "P4-1Q", gpu="0000:09:00.0")


def test_pool_types_count_down(sim_host: Callable[[str], Path]) -> None:
    snap = api.discover(str(sim_host("mtty")))
    assert len(place(snap, "mtty-2", 12).choices) == 12
    with pytest.raises(CapacityError, match=r"^No room for 13 × mtty-2 \(only 12 fit\)"):
        place(snap, "mtty-2", 13)
