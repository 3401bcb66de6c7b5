"""The simulated kernel's mdev core: create/remove effects on the tree (exact entries, links and bytes), every
errno of reference §1.3, and the available_instances arithmetic of each rule (§2.4, §3.2, §4.1, §4.4)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.profiles import HostBuilder, add_a2_mdev_vf, add_mbochs, add_mdpy
from vgpuadm.sim.treestate import diff, tree_state

DATA = Path(__file__).resolve().parent.parent / "data"
U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
P4 = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
P4_TYPES = "/sys/class/mdev_bus/0000:01:00.0/mdev_supported_types"


def uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"


def write_errno(root, path: str, data: str | bytes) -> int:
    with pytest.raises(OSError) as info:
        SimKernel(str(root)).write(path, data)
    return info.value.errno


def read(root, path: str) -> str:
    with open(f"{root}{path}") as f:
        return f.read()


def avail(root, parent_dir: str) -> dict[str, int]:
    types = f"{root}{parent_dir}/mdev_supported_types"
    return {t: int(read(root, f"{parent_dir}/mdev_supported_types/{t}/available_instances")) for t in os.listdir(types)}


def test_create_lays_down_exactly_the_kernel_entries(sim_host):
    root = sim_host("p4")
    before = tree_state(root)
    SimKernel(str(root)).write(f"{P4_TYPES}/nvidia-63/create", U1.upper() + "\n")
    changes = diff(before, tree_state(root))
    rel = P4.lstrip("/")
    counts = {k: v for k, v in changes.items() if k.endswith("/available_instances")}
    others = {k: v for k, v in changes.items() if k not in counts}
    assert others == {
        "dev/vfio/100": (None, ("file", b"")),
        f"sys/bus/mdev/devices/{U1}": (None, ("link", f"../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/{U1}")),
        f"{rel}/{U1}": (None, ("dir",)),
        f"{rel}/{U1}/iommu_group": (None, ("link", "../../../../../kernel/iommu_groups/100")),
        f"{rel}/{U1}/mdev_type": (None, ("link", "../mdev_supported_types/nvidia-63")),
        f"{rel}/{U1}/nvidia": (None, ("dir",)),
        f"{rel}/{U1}/nvidia/vgpu_params": (None, ("file", b"\n")),
        f"{rel}/{U1}/remove": (None, ("file", b"")),
        f"{rel}/mdev_supported_types/nvidia-63/devices/{U1}": (None, ("link", f"../../../{U1}")),
        "sys/kernel/iommu_groups/100": (None, ("dir",)),
        "sys/kernel/iommu_groups/100/devices": (None, ("dir",)),
        f"sys/kernel/iommu_groups/100/devices/{U1}": (
            None,
            ("link", f"../../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/{U1}"),
        ),
    }
    # One type per physical GPU (§2.4): nvidia-63 8→7, every other type of this GPU 0; the second P4 untouched.
    assert counts[f"{rel}/mdev_supported_types/nvidia-63/available_instances"] == (("file", b"8\n"), ("file", b"7\n"))
    assert len(counts) == 14 and all(after == ("file", b"0\n") for k, (_, after) in counts.items() if "-63/" not in k)
    assert os.stat(f"{root}{P4}/{U1}/remove").st_mode & 0o777 == 0o200


def test_remove_restores_a_byte_identical_tree(sim_host):
    root = sim_host("p4")
    before = tree_state(root)
    k = SimKernel(str(root))
    k.write(f"{P4_TYPES}/nvidia-63/create", U1)
    k.write(f"{P4_TYPES}/nvidia-63/create", U2 + "\n")
    assert os.readlink(f"{root}{P4}/{U2}/iommu_group").endswith("/101")
    k.write(f"/sys/bus/mdev/devices/{U1}/remove", "1\n")
    k.write(f"{P4}/{U2}/remove", "1")
    assert diff(before, tree_state(root)) == {}


def test_freed_group_number_is_reused_like_the_kernel_ida(sim_host):
    root = sim_host("p4")
    k = SimKernel(str(root))
    k.write(f"{P4_TYPES}/nvidia-63/create", U1)
    k.write(f"{P4_TYPES}/nvidia-63/create", U2)
    k.write(f"{P4}/{U1}/remove", "1")
    k.write(f"{P4_TYPES}/nvidia-63/create", uuid(3))
    assert os.readlink(f"{root}{P4}/{uuid(3)}/iommu_group") == "../../../../../kernel/iommu_groups/100"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (U1[:-1], "35 bytes"),
        (U1 + "\n\n", "38 bytes"),
        ("83b8f4f2+509f-382f-3c1e-e6bfe0fa1001", "not a UUID"),
        ("g3b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n", "not hex"),
        ("", "empty"),
    ],
)
def test_create_rejects_malformed_buffers_with_einval(sim_host, data, why):
    root = sim_host("p4")
    before = tree_state(root)
    assert write_errno(root, f"{P4_TYPES}/nvidia-63/create", data) == errno.EINVAL, why
    assert diff(before, tree_state(root)) == {}


def test_create_eexist_for_a_uuid_used_on_any_parent(sim_host):
    root = sim_host("p4")
    SimKernel(str(root)).write(f"{P4_TYPES}/nvidia-63/create", U1)
    other = "/sys/class/mdev_bus/0000:02:00.0/mdev_supported_types/nvidia-64/create"
    assert write_errno(root, other, U1.upper() + "\n") == errno.EEXIST


def test_nvidia_one_type_refuses_other_types_and_exhaustion_with_einval(sim_host):
    root = sim_host("p4")
    k = SimKernel(str(root))
    k.write(f"{P4_TYPES}/nvidia-66/create", U1)  # GRID P4-8Q, max_instance 1
    assert write_errno(root, f"{P4_TYPES}/nvidia-66/create", U2) == errno.EINVAL
    assert write_errno(root, f"{P4_TYPES}/nvidia-63/create", U2) == errno.EINVAL
    assert set(avail(root, P4).values()) == {0}
    k.write(f"{P4}/{U1}/remove", "1")
    assert avail(root, P4)["nvidia-63"] == 8 and avail(root, P4)["nvidia-66"] == 1


def test_remove_zero_is_a_noop_and_garbage_is_einval(sim_host):
    root = sim_host("p4")
    k = SimKernel(str(root))
    k.write(f"{P4_TYPES}/nvidia-63/create", U1)
    state = tree_state(root)
    k.write(f"{P4}/{U1}/remove", "0\n")
    assert write_errno(root, f"{P4}/{U1}/remove", "yes") == errno.EINVAL
    assert diff(state, tree_state(root)) == {}
    k.write(f"{P4}/{U1}/remove", "0x1")  # kstrtoul base 0
    assert not os.path.exists(f"{root}{P4}/{U1}")


def test_read_only_and_missing_files(sim_host):
    root = sim_host("p4")
    assert write_errno(root, f"{P4_TYPES}/nvidia-63/available_instances", "3") == errno.EACCES
    assert write_errno(root, f"{P4_TYPES}/nvidia-999/create", U1) == errno.ENOENT
    assert write_errno(root, "/sys/bus/pci/drivers/vfio-pci/new_id", "10de 1bb3") == errno.EOPNOTSUPP


def test_mtty_one_pool_of_24_ports_enospc(sim_host):
    root = sim_host("mtty")
    dev = "/sys/devices/virtual/mtty/mtty"
    k = SimKernel(str(root))
    k.write(f"{dev}/mdev_supported_types/mtty-2/create", U1)
    assert avail(root, dev) == {"mtty-1": 22, "mtty-2": 11}  # the lab observation of §4.4
    assert not os.path.exists(f"{root}{dev}/{U1}/nvidia")
    for n in range(11):
        k.write("/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create", uuid(n))
    assert avail(root, dev) == {"mtty-1": 0, "mtty-2": 0}
    assert write_errno(root, f"{dev}/mdev_supported_types/mtty-1/create", U2) == errno.ENOSPC


def test_gvt_types_share_the_aperture_enospc(sim_host):
    root = sim_host("gvt-g")
    dev = "/sys/devices/pci0000:00/0000:00:02.0"
    assert avail(root, dev) == {"i915-GVTg_V5_1": 0, "i915-GVTg_V5_2": 0, "i915-GVTg_V5_4": 1, "i915-GVTg_V5_8": 2}
    k = SimKernel(str(root))
    k.write(f"{dev}/mdev_supported_types/i915-GVTg_V5_8/create", U1)
    # low 128−64 = 64, high 896−384 = 512: V5_8 min(1, 1) = 1, V5_4 min(0, 1) = 0
    assert avail(root, dev)["i915-GVTg_V5_8"] == 1 and avail(root, dev)["i915-GVTg_V5_4"] == 0
    assert write_errno(root, f"{dev}/mdev_supported_types/i915-GVTg_V5_4/create", U2) == errno.ENOSPC


def _samples(tmp_path, mdpy_count=4, mbochs_mib=96):
    root = str(tmp_path / "samples")
    h = HostBuilder(root, "samples")
    add_mdpy(h, mdpy_count)
    add_mbochs(h, mbochs_mib)
    h.finish()
    return root


def test_mdpy_shares_one_core_count_and_fails_with_eusers(tmp_path):
    root = _samples(tmp_path)
    dev = "/sys/devices/virtual/mdpy/mdpy"
    assert read(root, f"{dev}/mdev_supported_types/mdpy-xga/description") == "virtual display, 1024x768 framebuffer\n"
    assert read(root, f"{dev}/mdev_supported_types/mdpy-hd/name") == "mdpy-hd\n"
    k = SimKernel(root)
    k.write(f"{dev}/mdev_supported_types/mdpy-hd/create", uuid(1))
    assert avail(root, dev) == {"mdpy-hd": 3, "mdpy-vga": 3, "mdpy-xga": 3}  # lab: vga 4→3 after one hd
    for n, t in ((2, "vga"), (3, "xga"), (4, "vga")):
        k.write(f"{dev}/mdev_supported_types/mdpy-{t}/create", uuid(n))
    assert write_errno(root, f"{dev}/mdev_supported_types/mdpy-hd/create", uuid(5)) == errno.EUSERS
    assert os.path.islink(f"{root}/sys/bus/mdev/devices/{uuid(1)}")


def test_mbochs_mib_budget_matches_the_lab(tmp_path):
    root = _samples(tmp_path)
    dev = "/sys/devices/virtual/mbochs/mbochs"
    state = tree_state(root)
    k = SimKernel(root)
    assert avail(root, dev) == {"mbochs-large": 1, "mbochs-medium": 6, "mbochs-small": 24}
    k.write(f"{dev}/mdev_supported_types/mbochs-large/create", uuid(1))
    assert avail(root, dev) == {"mbochs-large": 0, "mbochs-medium": 2, "mbochs-small": 8}
    k.write(f"{dev}/mdev_supported_types/mbochs-medium/create", uuid(2))
    assert avail(root, dev) == {"mbochs-large": 0, "mbochs-medium": 1, "mbochs-small": 4}
    assert write_errno(root, f"{dev}/mdev_supported_types/mbochs-large/create", uuid(3)) == errno.ENOSPC
    assert (
        read(root, f"{dev}/mdev_supported_types/mbochs-medium/description") == "virtual display, 16 MB video memory\n"
    )
    k.write(f"{dev}/{uuid(1)}/remove", "1")
    k.write(f"{dev}/{uuid(2)}/remove", "1")
    assert diff(state, tree_state(root)) == {}


A2_PF = "0000:08:00.0"
A2_DIR = "/sys/devices/pci0000:00/0000:07:01.0"


def _a2(tmp_path):
    root = str(tmp_path / "a2")
    h = HostBuilder(root, "a2")
    add_a2_mdev_vf(h, A2_PF, "pci0000:00", 4, 0, 12)  # VF 11 is 0000:08:01.7, the recorded one
    h.finish()
    return root


def vf(n: int) -> str:
    fn = 4 + n
    return f"{A2_DIR}/0000:08:{fn // 8:02x}.{fn % 8}"


def test_a2_runs_4c_4q_4a_together_and_other_sizes_read_zero(tmp_path):
    """The real recording (shared/fixtures/public/harvester-a2): 4C + 4Q + 4A on three VFs; a free VF then reads 1
    for exactly the three 4 GB types."""
    root = _a2(tmp_path)
    k = SimKernel(root)
    assert set(avail(root, vf(3)).values()) == {1}
    for n, t in enumerate(("nvidia-754", "nvidia-746", "nvidia-751")):
        k.write(f"{vf(n)}/mdev_supported_types/{t}/create", uuid(n))
    free = avail(root, vf(11))
    assert {t for t, a in free.items() if a} == {"nvidia-746", "nvidia-751", "nvidia-754"}
    assert set(free.values()) == {0, 1}
    # …exactly what the recording's free VF (0000:08:01.7) reads, type by type
    rec = DATA / "harvester-a2/testdata-sys/class/mdev_bus/0000:08:01.7/mdev_supported_types"
    recorded = {t.name: (t / "available_instances").read_text() for t in rec.iterdir()}
    assert len(recorded) == 15
    assert {t: read(root, f"{vf(11)}/mdev_supported_types/{t}/available_instances") for t in recorded} == recorded
    assert set(avail(root, vf(0)).values()) == {0}  # each VF hosts at most one mdev
    assert write_errno(root, f"{vf(0)}/mdev_supported_types/nvidia-746/create", uuid(9)) == errno.EINVAL
    assert write_errno(root, f"{vf(5)}/mdev_supported_types/nvidia-745/create", uuid(9)) == errno.EINVAL
    k.write(f"{vf(3)}/mdev_supported_types/nvidia-746/create", uuid(3))  # the 4th 4 GB vGPU: max_instance 4
    assert all(set(avail(root, vf(n)).values()) == {0} for n in range(12))


def test_a2_removing_every_vgpu_restores_the_tree(tmp_path):
    root = _a2(tmp_path)
    before = tree_state(root)
    k = SimKernel(root)
    k.write(f"{vf(0)}/mdev_supported_types/nvidia-748/create", uuid(1))  # A2-16Q: max 1 → the GPU is full
    assert all(set(avail(root, vf(n)).values()) == {0} for n in range(12))
    k.write(f"/sys/bus/mdev/devices/{uuid(1)}/remove", "1")
    assert diff(before, tree_state(root)) == {}


def test_mdev_vgpu_params_are_stored_exactly(sim_host):
    root = sim_host("p4")
    k = SimKernel(str(root))
    k.write(f"{P4_TYPES}/nvidia-63/create", U1)
    k.write(f"/sys/bus/mdev/devices/{U1}/nvidia/vgpu_params", "frame_rate_limiter=0 disable_vnc=1\n")
    assert read(root, f"{P4}/{U1}/nvidia/vgpu_params") == "frame_rate_limiter=0 disable_vnc=1\n"
    k.write(f"{P4}/{U1}/nvidia/vgpu_params", " ")  # a single space clears them (reference §2.5)
    assert read(root, f"{P4}/{U1}/nvidia/vgpu_params") == " "
