"""Re-converging after a GPU reset or a driver reload (issue 35): `vgpuadm sim reset` forgets one GPU's state as the
driver does; `restore --check` says what drifted from the domains' record (exit 1; 0 once nothing has) and changes
nothing; `restore --gpu` brings exactly that GPU back — the same VFs, types, params, UUIDs, MIG mode and GPU
instances — and writes nothing of another GPU (its files keep their bytes, inodes and mtimes). Real libvirt (the
root's embedded driver), the simulated kernel, the real CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import libvirt
import pytest
from embedded_host import allocations, attr, define, hostdev_keys, mdevs, vgpuadm

from tests.trees import written
from vgpuadm.schemas import load as load_schema
from vgpuadm.schemas import validate

pytestmark = pytest.mark.libvirt

P4 = "0000:03:00.0"
H200 = "0000:18:00.0"
A100 = "0000:41:00.0"
SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"


def _apply(root: Path, tmp_path: Path, plan: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(plan)
    res = vgpuadm(root, "apply", "-f", str(path))
    assert res.code == 0, res.err


def test_restore_gpu_brings_back_that_gpu_only(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    root = sim_host("mixed")
    define(root, "web01", "db02")
    _apply(root, tmp_path, "vms:\n  web01:\n    type: nvidia-63\n    params: frame_rate_limiter=0\n"
                           "  db02:\n    type: H200X-4C\n    count: 2\n    params: enable_uvm=1\n")  # fmt: skip
    (uuid,) = hostdev_keys(root, "web01")
    vfs = hostdev_keys(root, "db02")
    assert mdevs(root) == [uuid] and len(vfs) == 2
    others = {pf: written(root, pf) for pf in (P4, A100)}
    assert vgpuadm(root, "restore", "--check").code == 0  # nothing drifted yet

    res = vgpuadm(root, "sim", "reset", str(root), "18:00.0")
    assert (res.code, res.out) == (0, f"reset GPU {H200} of simulated host {root}: lost 8 VF(s) (2 with a vGPU type)\n")
    check = vgpuadm(root, "restore", "--check")
    assert check.code == 1, check.err
    assert check.out.splitlines() == [
        f"drift: sriov: not as recorded: would run {SRIOV_MANAGE} -e {H200}",
        *(f"drift: vgpu: db02: VF {vf} (nvidia-1420) is gone" for vf in vfs),
        "3 difference(s) from what 3 recorded device(s) need; `vgpuadm restore` brings them back",
    ]
    only = vgpuadm(root, "restore", "--check", "--gpu", P4, "--json")
    assert only.code == 0
    doc = json.loads(only.out)
    validate("restore-check", doc)
    assert doc == {"devices": 1, "drifted": False, "drift": [], "gpus": [P4], "parents": []}

    res = vgpuadm(root, "restore", "--gpu", "18:00.0")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"sriov: run {SRIOV_MANAGE} -e {H200}",
        *(f"vgpu: set vGPU type 1420 (nvidia-1420) on VF {vf}" for vf in vfs),
        *(f'params: set vgpu_params of VF {vf} to "enable_uvm=1"' for vf in vfs),
        f"restored: 5 step(s) for 2 recorded device(s) on GPU {H200}",
    ]
    for vf in vfs:
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1420\n"
        assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/vgpu_params") == "enable_uvm=1\n"
    assert {pf: written(root, pf) for pf in (P4, A100)} == others  # the other GPUs' files were not written
    assert mdevs(root) == [uuid]
    again = vgpuadm(root, "restore", "--gpu", H200)
    assert (again.code, again.out) == (0, f"nothing to restore: all 2 recorded device(s) on GPU {H200} are in place\n")
    after = vgpuadm(root, "restore", "--check")
    assert (after.code, after.out) == (0, "no drift: all 3 recorded device(s) are as recorded\n")

    # the P4 next, by its mdev parent: the mdev comes back with its UUID and params; the H200 is not written
    h200 = written(root, H200)
    assert vgpuadm(root, "sim", "reset", str(root), P4).code == 0
    res = vgpuadm(root, "restore", "--parent", "03:00.0")
    assert res.code == 0, res.err
    assert res.out.splitlines()[-1] == f"restored: 2 step(s) for 1 recorded device(s) on parent {P4}"
    assert mdevs(root) == [uuid]
    assert attr(root, f"/sys/bus/mdev/devices/{uuid}/nvidia/vgpu_params") == "frame_rate_limiter=0\n"
    assert written(root, H200) == h200


def test_restore_parent_names_one_vf_or_a_virtual_parent(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    """--parent VF: that VF's vGPU only (its GPU's VFs enabled again, which it needs), not its sibling's; --parent
    mtty after the sample driver's reload: its mdev with the same UUID."""
    root = sim_host("mixed")
    define(root, "db02", "tty01")
    _apply(root, tmp_path, "vms:\n  db02:\n    type: H200X-4C\n    count: 2\n  tty01:\n    type: mtty-1\n")
    first, second = hostdev_keys(root, "db02")
    (port,) = hostdev_keys(root, "tty01")
    assert vgpuadm(root, "sim", "reset", str(root), H200).code == 0
    res = vgpuadm(root, "restore", "--parent", first)
    assert res.code == 0, res.err
    assert res.out.splitlines() == [f"sriov: run {SRIOV_MANAGE} -e {H200}",
                                    f"vgpu: set vGPU type 1420 (nvidia-1420) on VF {first}",
                                    f"restored: 2 step(s) for 1 recorded device(s) on parent {first}"]  # fmt: skip
    assert attr(root, f"/sys/bus/pci/devices/{second}/nvidia/current_vgpu_type") == "0\n"
    res = vgpuadm(root, "sim", "reload-driver", str(root), "mtty")
    assert (res.code, res.out) == (0, "reloaded mtty on mtty: lost 1 mdev(s)\n")
    res = vgpuadm(root, "restore", "--parent", "mtty")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [f"vgpu: create mdev {port} of type mtty-1 on mtty",
                                    "restored: 1 step(s) for 1 recorded device(s) on parent mtty"]  # fmt: skip
    assert port in mdevs(root)


def test_a_pool_vf_comes_back_on_its_gpu(sim_host: Callable[[str], Path]) -> None:
    """A VF pool (Intel Flex 170 on i915): the reset takes the VFs and the VF's vfio-pci bind; restore --gpu enables
    the VFs again and binds the VF for its guest."""
    root = sim_host("flex170-vf-pool")
    define(root, "gpu01")
    res = vgpuadm(root, "create", "--type", "vf-flex170", "--vm", "gpu01")
    assert res.code == 0, res.err
    (vf,) = hostdev_keys(root, "gpu01")
    pf = allocations(root, "gpu01")[0].parent
    assert vgpuadm(root, "sim", "reset", str(root), pf).code == 0
    assert not (root / f"sys/bus/pci/devices/{vf}").exists()
    assert vgpuadm(root, "restore", "--check", "--gpu", pf).code == 1
    res = vgpuadm(root, "restore", "--gpu", pf)
    assert res.code == 0, res.err
    assert (root / f"sys/bus/pci/devices/{vf}/driver").resolve().name == "vfio-pci"
    assert vgpuadm(root, "restore", "--check").code == 0


def test_hopper_mig_mode_and_instances_come_back_at_their_slots(sim_host: Callable[[str], Path]) -> None:
    """On Hopper a reset leaves MIG mode off (and MIG-backed types unlisted): restore --gpu turns it on again,
    makes the recorded GPU instance at its slot, then the vGPU on it."""
    root = sim_host("h200-mig")
    assert vgpuadm(root, "mig", "enable", "--gpu", H200).code == 0
    define(root, "mig01")
    res = vgpuadm(root, "create", "--type", "H200X-1-18C", "--vm", "mig01")
    assert res.code == 0, res.err
    (vf,) = hostdev_keys(root, "mig01")
    (rec,) = [a.extra["mig_instance"] for a in allocations(root, "mig01")]
    start = rec.split(":")[1]
    assert vgpuadm(root, "sim", "reset", str(root), H200).out.endswith("lost 16 VF(s) (1 with a vGPU type), "
                                                                       "1 GPU instance(s), MIG mode\n")  # fmt: skip
    check = vgpuadm(root, "restore", "--check", "--gpu", H200)
    assert check.code == 1
    assert check.out.splitlines()[:4] == [
        f"drift: sriov: not as recorded: would run {SRIOV_MANAGE} -e {H200}",
        f"drift: mig: not as recorded: would enable MIG mode on GPU {H200} (nvidia-smi -i 0)",
        f"drift: mig: not as recorded: would create MIG GPU instance 1g.18gb (profile 19) at slot {start} on {H200}",
        f"drift: vgpu: mig01: VF {vf} (nvidia-1414) is gone",
    ]
    res = vgpuadm(root, "restore", "--gpu", H200)
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"sriov: run {SRIOV_MANAGE} -e {H200}",
        f"mig: enable MIG mode on GPU {H200} (nvidia-smi -i 0)",
        f"mig: create MIG GPU instance 1g.18gb (profile 19) at slot {start} on {H200}",
        f"vgpu: set vGPU type 1414 (nvidia-1414) on VF {vf}",
        f"restored: 4 step(s) for 1 recorded device(s) on GPU {H200}",
    ]
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1414\n"
    assert vgpuadm(root, "restore", "--check").code == 0


def test_a_reset_without_uevent_is_found_by_check(sim_host: Callable[[str], Path]) -> None:
    """A reset through the PCI core keeps the VFs (no device goes or comes, so no uevent runs restore): the drift
    — MIG mode off, the instance and the vGPU type gone, while the VFs remain — is found by --check only."""
    root = sim_host("h200-mig")
    assert vgpuadm(root, "mig", "enable", "--gpu", H200).code == 0
    define(root, "mig01")
    assert vgpuadm(root, "create", "--type", "H200X-1-18C", "--vm", "mig01").code == 0
    (vf,) = hostdev_keys(root, "mig01")
    res = vgpuadm(root, "sim", "reset", str(root), H200, "--keep-vfs")
    assert res.out.endswith("lost 1 VF vGPU type(s), 1 GPU instance(s), MIG mode\n")
    assert attr(root, f"/sys/bus/pci/devices/{H200}/sriov_numvfs") == "16\n"  # the devices remain
    check = vgpuadm(root, "restore", "--check", "--json")
    assert check.code == 1
    doc = json.loads(check.out)
    validate("restore-check", doc)
    assert [line.split(":")[0] for line in doc["drift"]] == ["mig", "mig", "vgpu"]
    assert doc["drift"][0] == f"mig: not as recorded: would enable MIG mode on GPU {H200} (nvidia-smi -i 0)"
    doctor = vgpuadm(root, "doctor", "--json")
    assert doctor.code == 1
    (found,) = [c for c in json.loads(doctor.out)["checks"] if c["check"] == "drift"]
    assert found == {"check": "drift", "status": "fail",
                     "detail": f"2 difference(s) from what the domains record: {doc['drift'][0]}; {doc['drift'][1]}",
                     "hint": "vgpuadm restore --check lists them; vgpuadm restore (--gpu ADDR for one GPU) brings "
                             "them back"}  # fmt: skip
    assert vgpuadm(root, "restore", "--gpu", H200).code == 0
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1414\n"
    assert vgpuadm(root, "restore", "--check").code == 0
    assert "drift" not in [c["check"] for c in json.loads(vgpuadm(root, "doctor", "--json").out)["checks"]]


def test_restore_turns_mig_mode_on_again_when_a_reset_left_it_off(sim_host: Callable[[str], Path]) -> None:
    """Regression: with MIG mode off a GPU lists none of its MIG-backed types, so restore did not see that the
    recorded vGPU needs MIG and failed it ("does not offer"). Made with tools the simulator always had: a reboot,
    then MIG mode turned off by hand (as a Hopper reset leaves it)."""
    root = sim_host("h200-mig")
    assert vgpuadm(root, "mig", "enable", "--gpu", H200).code == 0
    define(root, "mig01")
    assert vgpuadm(root, "create", "--type", "H200X-1-18C", "--vm", "mig01").code == 0
    (vf,) = hostdev_keys(root, "mig01")
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    assert vgpuadm(root, "mig", "disable", "--gpu", H200).code == 0
    res = vgpuadm(root, "restore")
    assert res.code == 0, res.err
    assert f"mig: enable MIG mode on GPU {H200} (nvidia-smi -i 0)" in res.out.splitlines()
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1414\n"


def _run_holding_its_record(conn: libvirt.virConnect, name: str) -> None:
    """Start `name` as a guest holding its recorded mdev would be: running, its persistent definition naming the
    device (libvirt cannot start a guest on an mdev the real /sys lacks, so it starts without, then the definition
    with the hostdev is put back, as it was)."""
    dom = conn.lookupByName(name)
    full = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    conn.defineXML(re.sub(r"<hostdev .*?</hostdev>", "", full, flags=re.S))
    dom.create()
    conn.defineXML(full)


def test_a_running_domains_lost_device_is_reported_not_recreated(
    sim_host: Callable[[str], Path], conn: libvirt.virConnect, libvirtd: str, daemon_domain: Callable[..., str]
) -> None:
    """Running VMs are never touched: the mdev a running guest held is gone after the reset; restore names the
    domain and leaves it gone (exit 5) while the stopped domain's device comes back; once the guest is shut down,
    restore makes its device again with the same UUID."""
    root = sim_host("p4")
    gpu = "0000:01:00.0"
    running, stopped = daemon_domain("run", "pc"), daemon_domain("stop", "pc")
    for vm in (running, stopped):
        res = vgpuadm(root, "--connect", libvirtd, "create", "--type", "nvidia-63", "--gpu", gpu, "--vm", vm)
        assert res.code == 0, res.err
    _run_holding_its_record(conn, running)
    held = mdevs(root)
    assert vgpuadm(root, "sim", "reset", str(root), gpu).code == 0
    assert mdevs(root) == []
    ours = [u for u in held if u in conn.lookupByName(running).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)]
    (uuid,) = ours
    line = f"{running} is running and holds mdev {uuid} (nvidia-63) which is gone: stop it and run restore"
    check = vgpuadm(root, "--connect", libvirtd, "restore", "--check", "--gpu", gpu)
    assert check.code == 1
    assert (
        f"drift: vgpu: {running}: mdev {uuid} (nvidia-63) is gone ({running} is running: stop it and run "
        "restore)" in check.out.splitlines()
    )
    res = vgpuadm(root, "--connect", libvirtd, "restore", "--gpu", gpu)
    assert res.code == 5
    assert res.out.splitlines()[0] == f"not restored: {line}"
    assert res.out.splitlines()[-1] == f"restored: 1 step(s) for 2 recorded device(s) on GPU {gpu}"
    assert res.err.splitlines() == [
        f"error: 1 device(s) of running domains are gone and were left alone: {line}",
        "hint: a running guest lost its device: shut the domain down, then run `vgpuadm restore` (it recreates the "
        "device with the same UUID)",
    ]
    assert uuid not in mdevs(root) and len(mdevs(root)) == 1  # the stopped domain's came back, not the guest's
    conn.lookupByName(running).destroy()
    res = vgpuadm(root, "--connect", libvirtd, "restore")
    assert res.code == 0, res.err
    assert mdevs(root) == sorted(held)


def test_whole_host_restore_leaves_a_running_guests_lost_device_alone(
    sim_host: Callable[[str], Path], conn: libvirt.virConnect, libvirtd: str, daemon_domain: Callable[..., str]
) -> None:
    """Regression: restore re-created a running guest's lost mdev under it (exit 0). Made with tools the simulator
    always had (a reboot of the simulated host while the domain runs on the daemon)."""
    root = sim_host("p4")
    vm = daemon_domain("run", "pc")
    assert vgpuadm(root, "--connect", libvirtd, "create", "--type", "nvidia-63", "--vm", vm).code == 0
    _run_holding_its_record(conn, vm)
    assert vgpuadm(root, "sim", "reboot", str(root)).code == 0
    res = vgpuadm(root, "--connect", libvirtd, "restore")
    assert res.code == 5
    assert mdevs(root) == []


def test_what_is_no_gpu_or_parent_is_refused_before_anything(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    res = vgpuadm(root, "restore", "--gpu", "0000:77:00.0")
    assert (res.code, res.out) == (2, "")
    assert res.err.splitlines() == ["error: --gpu 0000:77:00.0: 0000:77:00.0 is no GPU on this host",
                                    "hint: its GPUs: 0000:01:00.0, 0000:02:00.0 (vgpuadm gpus)"]  # fmt: skip
    res = vgpuadm(root, "restore", "--check", "--gpu", "1:00")
    assert (res.code, res.err.splitlines()[0]) == (2, "error: '1:00' is not a PCI address")
    res = vgpuadm(root, "restore", "--parent", "mtty")
    assert res.code == 2
    assert res.err.splitlines()[0] == "error: --parent mtty: no mdev parent or device of that name on this host"
    res = vgpuadm(root, "restore", "--parent", "x y")
    assert (res.code, res.err.splitlines()[0]) == (2, "error: 'x y' is not an mdev parent name")
    vf_root = sim_host("h200-vendor-vfio")  # a VF names its GPU
    res = vgpuadm(vf_root, "restore", "--gpu", "18:00.4", "--check", "--json")
    assert (res.code, json.loads(res.out)["gpus"]) == (0, [H200])


def test_the_check_schema_names_every_phase() -> None:
    from vgpuadm.plan.restore import PHASES

    pattern = load_schema("restore-check")["properties"]["drift"]["items"]["pattern"]
    assert pattern == f"^({'|'.join(PHASES)}): "


def test_heterogeneous_mode_and_placements_come_back(sim_host: Callable[[str], Path], tmp_path: Path) -> None:
    """The applied `gpus:` section's heterogeneous mode is lost by the reset (the scheduler comes back from the
    modprobe file with the driver): --check names it, restore --gpu turns it on again before the vGPUs, which get
    their recorded placement IDs."""
    root = sim_host("h200-vendor-vfio")
    define(root, "small", "mid")
    _apply(root, tmp_path, f"gpus:\n  {H200}:\n    heterogeneous: true\n    scheduler: equal-share\n"
                           "vms:\n  small:\n    type: H200X-4C\n    count: 2\n  mid:\n    type: H200X-8C\n")  # fmt: skip
    vfs = [vf for vm in ("mid", "small") for vf in hostdev_keys(root, vm)]
    placed = [attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/placement_id") for vf in vfs]
    res = vgpuadm(root, "sim", "reset", str(root), H200, "--keep-vfs")
    assert res.out.endswith("lost 3 VF vGPU type(s), heterogeneous mode\n")
    check = vgpuadm(root, "restore", "--check", "--gpu", H200)
    assert check.code == 1
    assert check.out.splitlines()[0] == (
        f"drift: policies: not as recorded: would enable heterogeneous (mixed-size) vGPU mode on GPU {H200} "
        "(nvidia-smi -i 0)"
    )
    res = vgpuadm(root, "restore", "--gpu", H200)
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == f"policies: enable heterogeneous (mixed-size) vGPU mode on GPU {H200} " \
                                      "(nvidia-smi -i 0)"  # fmt: skip
    assert [attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/placement_id") for vf in vfs] == placed
    assert vgpuadm(root, "restore", "--check").code == 0
