"""SR-IOV VF pools (AMD Instinct MI300X under GIM, Intel Flex 170 on i915, Intel UHD 770 on xe) on simulated hosts:
exact discovery (VFs predicted from sriov_offset/sriov_stride, per-VF quotas), exact create plans (enable with
autoprobe off, bind one free VF to vfio-pci or the variant driver), placement reasons, and the give-back steps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm.errors import CapacityError
from vgpuadm.host.discover import snapshot
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.model import Allocation, Layout
from vgpuadm.modes import for_name, vf_pool
from vgpuadm.plan import devices
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.tree import TreeBuilder
from vgpuadm.steps import Bind, DriversProbe, SetDriverOverride, SetNumVfs, SetSriovAutoprobe, Unbind

FLEX = "0000:4d:00.0"
MI300X = "0000:83:00.0"
IGPU = "0000:00:02.0"


def snap(root: Path):  # type: ignore[no-untyped-def]
    return snapshot(Sysfs(str(root)))


def test_flex170_is_a_pool_of_31_predicted_vfs(sim_host: Callable[[str], Path]) -> None:
    s = snap(sim_host("flex170-vf-pool"))
    pool = s.vf_pools[FLEX]
    assert (pool.total_vfs, pool.num_vfs, pool.autoprobe, pool.variant) == (31, 0, True, None)
    assert pool.vfs[:3] == ("0000:4d:00.1", "0000:4d:00.2", "0000:4d:00.3")
    assert pool.vfs[-1] == "0000:4d:03.7"  # offset 1, stride 1: VF 31 is routing ID 0x4d00 + 32
    assert pool.free == pool.vfs
    [t] = pool.offered
    assert (t.type_id, t.layout, t.available_instances, t.max_instances, t.framebuffer_mib) == (
        "vf-flex170", Layout.VF_POOL, 31, 31, 16384 // 31)  # fmt: skip
    assert s.layouts[FLEX] == Layout.VF_POOL


def test_flex170_per_vf_share_is_read_from_prelim_iov_once_enabled(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("flex170-vf-pool")
    SimKernel(str(root)).write(f"/sys/bus/pci/devices/{FLEX}/sriov_numvfs", "8\n")
    pool = snap(root).vf_pools[FLEX]
    assert pool.num_vfs == 8 and len(pool.free) == 8
    # i915 auto-provisioning's fair share of 16 000 MiB over 8 VFs: Intel's flex170_m8 profile (2000 MiB).
    assert pool.per_vf["lmem_quota"] == 2097152000
    assert pool.offered[0].framebuffer_mib == 2000
    assert pool.per_vf["doorbells_quota"] == 30  # flex170_m8 again


def test_mi300x_pool_has_its_8_vfs_enabled_by_gim(sim_host: Callable[[str], Path]) -> None:
    s = snap(sim_host("mi300x-vf-pool"))
    pool = s.vf_pools[MI300X]
    assert (pool.total_vfs, pool.num_vfs) == (8, 8)
    assert pool.free == (*tuple(f"0000:83:00.{f}" for f in range(1, 8)), "0000:83:01.0")
    assert pool.offered[0].framebuffer_mib == 24576  # 192 GB / 8 VFs
    assert [g.address for g in s.gpus][:2] == [MI300X, "0000:83:00.1"]  # class 0x1200 accelerators are GPUs


def test_create_on_a_disabled_pool_enables_it_with_autoprobe_off(sim_host: Callable[[str], Path]) -> None:
    s = snap(sim_host("flex170-vf-pool"))
    plan, ids = devices.plan_create(s, "vf-flex170", 2)
    assert ids == ["0000:4d:00.1", "0000:4d:00.2"]
    assert list(plan.steps) == [
        SetSriovAutoprobe(FLEX, False, True),
        SetNumVfs(FLEX, 31, 0),
        SetDriverOverride("0000:4d:00.1", "vfio-pci"),
        DriversProbe("0000:4d:00.1", "vfio-pci"),
        SetDriverOverride("0000:4d:00.2", "vfio-pci"),
        DriversProbe("0000:4d:00.2", "vfio-pci"),
    ]


def test_create_skips_vfs_other_domains_hold_and_unbinds_a_host_driver(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("uhd770-vf-pool")
    SimKernel(str(root)).write(f"/sys/bus/pci/devices/{IGPU}/sriov_numvfs", "7\n")  # xe probes its VFs
    s = snap(root)
    assert s.functions["0000:00:02.1"].driver == "xe"
    plan, ids = devices.plan_create(s, "vf-uhd770", 1, taken={"0000:00:02.1": "other"})
    assert ids == ["0000:00:02.2"]
    assert list(plan.steps) == [
        Unbind("0000:00:02.2", "xe"),
        SetDriverOverride("0000:00:02.2", "vfio-pci"),
        DriversProbe("0000:00:02.2", "vfio-pci"),
    ]


def test_a_loaded_variant_driver_is_used_for_xe_vfs(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("uhd770-vf-pool")
    TreeBuilder(str(root)).driver("xe-vfio-pci")  # the xe VFIO variant driver module is loaded
    s = snap(root)
    assert s.vf_pools[IGPU].variant == "xe-vfio-pci"
    plan, _ = devices.plan_create(s, "vf-uhd770", 1)
    assert plan.steps[-2:] == (SetDriverOverride("0000:00:02.1", "xe-vfio-pci"),
                               DriversProbe("0000:00:02.1", "xe-vfio-pci"))  # fmt: skip


def test_numa_and_full_pools_say_why(sim_host: Callable[[str], Path]) -> None:
    s = snap(sim_host("mi300x-vf-pool"))
    with pytest.raises(CapacityError) as exc:
        devices.plan_create(s, "vf-mi300x", 1, numa=0)
    assert exc.value.message == "No room for 1 × vf-mi300x: 0000:83:00.0: on NUMA node 1, wanted 0"
    with pytest.raises(CapacityError) as exc:
        devices.plan_create(s, "vf-mi300x", 9)
    assert exc.value.message == "9 instances are more than this host could ever hold (8 vGPU devices in all)"


def test_free_gives_the_vf_back_and_never_binds_a_driver_named_by_hostile_metadata(
    sim_host: Callable[[str], Path],
) -> None:
    root = sim_host("uhd770-vf-pool")
    k = SimKernel(str(root))
    k.write(f"/sys/bus/pci/devices/{IGPU}/sriov_numvfs", "7\n")
    vf = "0000:00:02.1"
    k.write("/sys/bus/pci/drivers/xe/unbind", vf)
    k.write(f"/sys/bus/pci/devices/{vf}/driver_override", "vfio-pci\n")
    k.write("/sys/bus/pci/drivers_probe", vf)
    s = snap(root)
    mode = for_name("pool")
    assert mode is vf_pool.MODE
    a = Allocation("web01", "pool", "vf-uhd770", IGPU, address=vf, extra={"host_driver": "xe"})
    assert mode.plan_free(s, a, {}) == [Unbind(vf, "vfio-pci"), SetDriverOverride(vf, "", previous="vfio-pci"),
                                        Bind(vf, "xe")]  # fmt: skip
    hostile = Allocation("web01", "pool", "vf-uhd770", IGPU, address=vf, extra={"host_driver": "../../../x"})
    assert mode.plan_free(s, hostile, {}) == [Unbind(vf, "vfio-pci"), SetDriverOverride(vf, "", previous="vfio-pci")]
    assert not mode.missing(s, a)
    assert snap(root).vf_pools[IGPU].free == tuple(f"0000:00:02.{f}" for f in range(2, 8))
