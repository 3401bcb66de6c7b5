"""The host verbs end to end through the CLI (in-process): exact output, exit codes, one-line errors with hints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.schemas import validate
from vgpuadm.sim.kernel import SimKernel
from vgpuadm.sim.treestate import tree_state

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
GPU = "0000:01:00.0"


def test_mdev_create_dry_run_json_changes_nothing(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("p4")
    before = tree_state(root)
    res = cli("--root", str(root), "mdev", "create", "--type", "P4-1Q", "--count", "2", "--uuid", U1, "--uuid", U2,
              "--param", "frame_rate_limiter=0", "--dry-run", "--json")  # fmt: skip
    assert res.code == 0, res.err
    validate("change", json.loads(res.out))
    assert json.loads(res.out) == {
        "changed": False,
        "dry_run": True,
        "summary": f"create 2 × nvidia-63 on {GPU}",
        "steps": [
            f"step 1/4 create mdev {U1} of type nvidia-63 on {GPU}",
            f'step 2/4 set vgpu_params of mdev {U1} to "frame_rate_limiter=0"',
            f"step 3/4 create mdev {U2} of type nvidia-63 on {GPU}",
            f'step 4/4 set vgpu_params of mdev {U2} to "frame_rate_limiter=0"',
        ],
        "devices": [U1, U2],
    }
    assert tree_state(root) == before


def test_mdev_create_and_remove(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("p4")
    res = cli("--root", str(root), "mdev", "create", "--type", "GRID P4-2Q", "--uuid", U1, "--policy", "spread")
    assert res.code == 0, res.err
    assert res.out == f"done: step 1/1 create mdev {U1} of type nvidia-64 on {GPU}\n{U1}\n"
    mdev = api.discover(str(root)).mdevs[U1]
    assert (mdev.parent, mdev.type_id) == (GPU, "nvidia-64")
    res = cli("--root", str(root), "mdev", "remove", U1)
    assert res.code == 0, res.err
    assert res.out == f"done: step 1/1 remove mdev {U1} from {GPU}\n"
    assert api.discover(str(root)).mdevs == {}


def test_mdev_create_explain(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("p4")
    res = cli("--root", str(root), "mdev", "create", "--type", "P4-8Q", "--count", "2", "--explain", "--dry-run")
    assert res.code == 0, res.err
    assert res.out.splitlines()[:3] == [
        "placement of 2 × nvidia-66, policy pack (fill the busiest GPU first):",
        f"  {GPU} (Tesla P4): chosen for 1 (0 vGPU(s) ran on it)",
        "  0000:02:00.0 (Tesla P4): chosen for 1 (0 vGPU(s) ran on it)",
    ]


@pytest.mark.parametrize(
    ("args", "code", "err"),
    [
        (["mdev", "create", "--type", "P4-1Qx"], 3,
         'error: Unknown type "P4-1Qx" on this host; did you mean nvidia-63 (GRID P4-1Q) or nvidia-64 (GRID P4-2Q) '
         "or nvidia-65 (GRID P4-4Q)?\nhint: run `vgpuadm types` to list the types this host offers\n"),
        (["mdev", "create", "--type", "P4-1Q", "--uuid", "not-a-uuid"], 2,
         'error: Malformed UUID "not-a-uuid"\n'
         "hint: give 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001, or omit --uuid\n"),
        (["mdev", "remove", "not-a-uuid"], 2,
         'error: Malformed UUID "not-a-uuid"\n'
         "hint: give 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001, as `vgpuadm devices` lists them\n"),
        (["mdev", "create", "--type", "P4-8Q", "--count", "3"], 4,
         "error: No room for 3 × nvidia-66 (only 2 fit): 0000:01:00.0: no free instances of nvidia-66 left after "
         "this request; 0000:02:00.0: no free instances of nvidia-66 left after this request\n"
         "hint: pick another type or GPU; `vgpuadm types --available` lists what fits now\n"),
        (["mdev", "create", "--type", "P4-1Q", "--param", "frame_rate_limiter"], 2,
         'error: Malformed vgpu parameter "frame_rate_limiter"\n'
         "hint: write key=value, e.g. --param frame_rate_limiter=0\n"),
        (["mdev", "remove", U1], 3,
         f"error: No mdev {U1} on this host\nhint: run `vgpuadm devices` to list the mdevs\n"),
        (["vf", "clear", "0000:01:00.0"], 3,
         "error: 0000:01:00.0 is not an NVIDIA vendor-VFIO VF\n"
         "hint: run `vgpuadm gpus` and pick a VF of layout vendor-vfio\n"),
        (["sriov", "enable", "0000:01:00.0"], 2,
         "error: 0000:01:00.0 is not SR-IOV capable (no sriov_totalvfs)\nhint: pick a PF that lists VFs in `gpus`\n"),
    ],
)  # fmt: skip
def test_user_errors(args: list[str], code: int, err: str, sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("p4")
    before = tree_state(root)
    res = cli("--root", str(root), *args)
    assert (res.code, res.err, res.out) == (code, err, "")
    assert tree_state(root) == before


@pytest.mark.process
def test_vf_set_type_and_clear(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("h200-vendor-vfio")
    vf = "0000:18:00.5"
    res = cli("--root", str(root), "vf", "set-type", "--type", "H200X-4C", "--vf", vf, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    validate("change", doc)
    assert doc["changed"] is True and doc["devices"] == [vf]
    assert doc["steps"] == [f"step 1/1 set vGPU type 1420 (nvidia-1420) on VF {vf}"]
    res = cli("--root", str(root), "vf", "set-type", "--type", "1420", "--vf", vf)
    assert res.out == f"nothing to do (VF {vf} already runs nvidia-1420)\n"
    res = cli("--root", str(root), "vf", "set-type", "--type", "H200X-8C", "--vf", vf)
    assert (res.code, res.err) == (
        5,
        f"error: VF {vf} already runs nvidia-1420\nhint: free what is in the way: no VM owns {vf} (`vgpuadm vf clear {vf}`); "
        "or pick another VF\n",
    )
    res = cli("--root", str(root), "vf", "clear", vf)
    assert res.out == f"done: step 1/1 clear vGPU type 1420 (nvidia-1420) from VF {vf}\n"
    assert not api.discover(str(root)).vendor_vfs[vf].in_use


def test_vfio_bind_unbind(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("passthrough")
    before = tree_state(root)
    res = cli("--root", str(root), "vfio", "bind", "0000:65:00.0")
    assert res.code == 0, res.err
    assert res.out.splitlines()[0] == (
        "done: step 1/7 remember original drivers (0000:65:00.0=nvidia, 0000:65:00.1=snd_hda_intel)"
    )
    assert cli("--root", str(root), "vfio", "bind", "0000:65:00.0").out.startswith("nothing to do")
    res = cli("--root", str(root), "vfio", "unbind", "0000:65:00.0")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        "done: step 1/7 unbind 0000:65:00.0 from vfio-pci",
        "done: step 2/7 clear driver_override of 0000:65:00.0",
        "done: step 3/7 bind 0000:65:00.0 to nvidia",
        "done: step 4/7 unbind 0000:65:00.1 from vfio-pci",
        "done: step 5/7 clear driver_override of 0000:65:00.1",
        "done: step 6/7 bind 0000:65:00.1 to snd_hda_intel",
        "done: step 7/7 forget original drivers of 0000:65:00.0, 0000:65:00.1",
    ]
    assert tree_state(root) == before


def test_boot_vga_refused(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("gvt-g")
    res = cli("--root", str(root), "vfio", "bind", "0000:00:02.0")
    assert (res.code, res.err) == (
        6,
        "error: 0000:00:02.0 is the boot VGA device (boot_vga=1); the host console uses it\n"
        "hint: pass --force if the host console is expendable\n",
    )


@pytest.mark.process
def test_sriov_nvidia_without_script(sim_host: Callable[[str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    root = sim_host("h200-vendor-vfio")
    (root / "usr/lib/nvidia/sriov-manage").unlink()  # `sim build` installs the simulated one; a host without it
    res = cli("--root", str(root), "sriov", "disable", "0000:18:00.0")
    assert res.code == 2
    assert res.err == (
        "error: 0000:18:00.0 is bound to nvidia and /usr/lib/nvidia/sriov-manage is not installed\n"
        "hint: install the NVIDIA vGPU host driver (it ships sriov-manage)\n"
    )


@pytest.mark.parametrize(
    "command",
    [["mdev", "create"], ["mdev", "remove"], ["vf", "set-type"], ["vf", "clear"], ["sriov", "enable"],
     ["sriov", "disable"], ["vfio", "bind"], ["vfio", "unbind"], ["recover"]],
)  # fmt: skip
def test_help_has_an_example(command: list[str], cli, capsys) -> None:  # type: ignore[no-untyped-def]
    res = cli(*command, "--help")  # click prints help itself, to the real stdout
    out = res.out + capsys.readouterr().out
    assert res.code == 0
    assert f"Example: vgpuadm {command[0]}" in out or "Example: vgpuadm --root" in out


def test_sriov_disable_with_a_vf_on_vfio_names_vfio_unbind(sim_host, cli):
    """A VF handed to vfio-pci blocks `sriov disable`; the hint names the command that gives it back."""
    root = str(sim_host("kernel-samples"))
    assert cli("--root", root, "sriov", "enable", "0000:01:00.0").code == 0
    assert cli("--root", root, "vfio", "bind", "0000:01:00.1").code == 0
    r = cli("--root", root, "sriov", "disable", "0000:01:00.0")
    assert (r.code, r.err.splitlines()) == (
        5,
        [
            "error: VFs of 0000:01:00.0 are in use (0000:01:00.1)",
            "hint: free what is in the way: no VM owns 0000:01:00.1 (`vgpuadm vfio unbind 0000:01:00.1`); then run this "
            "again",
        ],
    )


@pytest.mark.process
def test_only_the_verbs_that_free_devices_open_libvirt(sim_host, cli, tmp_path):  # type: ignore[no-untyped-def]
    """`mdev create`, `sriov`, `vfio bind` never open libvirt (a broken --connect does not matter); `mdev remove`,
    `vf clear`, `vfio unbind` look the device's owner up through it."""
    bad = f"test://{tmp_path}/no-such-libvirt.xml"
    p4, mixed = sim_host("p4"), sim_host("mixed")
    uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    assert cli("--root", str(p4), "--connect", bad, "mdev", "create", "--type", "nvidia-63", "--uuid", uuid).code == 0
    assert cli("--root", str(mixed), "--connect", bad, "vfio", "bind", "0000:65:00.0").code == 0
    assert cli("--root", str(mixed), "--connect", bad, "sriov", "disable", "0000:41:00.0").code == 0
    for root, args in ((p4, ["mdev", "remove", uuid]), (mixed, ["vfio", "unbind", "0000:65:00.0"])):
        res = cli("--root", str(root), "--connect", bad, *args)
        assert res.code == 8, res.err
    assert (p4 / "sys/bus/mdev/devices" / uuid).is_dir()


@pytest.mark.process
def test_a_time_sliced_type_on_a_gpu_running_mig_backed_vgpus_says_why(sim_host, cli):  # type: ignore[no-untyped-def]
    """Layout C with MIG on: asking for a time-sliced type while MIG-backed vGPUs run used to say only "no VF lists
    it in nvidia/creatable_vgpu_types"; the sharing rule says MIG mode is on and the two kinds do not mix, and the
    fix (#30.9)."""
    root = sim_host("h200-vendor-vfio")
    smi = str(root / "usr/bin/nvidia-smi")
    subprocess.run([smi, "-i", "0", "-mig", "1"], check=True, capture_output=True)
    subprocess.run([smi, "mig", "-i", "0", "-cgi", "19:6"], check=True, capture_output=True)
    SimKernel(str(root)).write("/sys/bus/pci/devices/0000:18:00.4/nvidia/current_vgpu_type", "1414\n")
    before = tree_state(root)
    res = cli("--root", str(root), "vf", "set-type", "--type", "H200X-4C")
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: No room for 1 × H200X-4C: 0000:18:00.0: MIG mode is on and 1 MIG-backed vGPU runs on it (NVIDIA "
        "H200X-1-18C); NVIDIA H200X-4C is time-sliced, and time-sliced and MIG-backed vGPUs do not mix on one GPU\n"
        "hint: free what is in the way: no VM owns 0000:18:00.4 (`vgpuadm vf clear 0000:18:00.4`); then turn MIG mode "
        "off (`vgpuadm mig disable --gpu 0000:18:00.0`) to run time-sliced types; or ask for a MIG-backed type "
        "(`vgpuadm types --available` lists what fits now)\n"
    )
    assert tree_state(root) == before


@pytest.mark.process
def test_another_framebuffer_size_on_layout_c_names_the_size_that_runs(sim_host, cli):  # type: ignore[no-untyped-def]
    """Layout C, MIG off: a second framebuffer size used to get the same "no VF lists it" as a full GPU; it names
    the size that runs and the one-size rule (#30.9)."""
    root = sim_host("h200-vendor-vfio")
    kernel = SimKernel(str(root))
    for vf in ("0000:18:00.4", "0000:18:00.5"):
        kernel.write(f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type", "1420\n")
    before = tree_state(root)
    res = cli("--root", str(root), "vf", "set-type", "--type", "H200X-8C")
    assert (res.code, res.out) == (4, "")
    assert res.err == (
        "error: No room for 1 × H200X-8C: 0000:18:00.0: 2 vGPUs of 4096 MiB run on it (NVIDIA H200X-4C) and NVIDIA "
        "H200X-8C is 8192 MiB; one framebuffer size per GPU\n"
        "hint: free what is in the way: no VM owns 0000:18:00.4, 0000:18:00.5 (`vgpuadm vf clear ID`); or ask for a "
        "4096 MiB type (`vgpuadm types --available` lists what fits now)\n"
    )
    assert tree_state(root) == before


@pytest.mark.process
def test_a_time_sliced_type_on_a_gpu_in_mig_mode_says_mig_hides_it(sim_host, cli):  # type: ignore[no-untyped-def]
    """MIG on and no vGPU yet: the driver lists only MIG-backed types, and a time-sliced name was "Unknown type";
    the error says MIG mode hides it and how to get it back (#30.9)."""
    root = sim_host("h200-vendor-vfio")
    subprocess.run([str(root / "usr/bin/nvidia-smi"), "-i", "0", "-mig", "1"], check=True, capture_output=True)
    for args, where in ((["vf", "set-type", "--type", "H200X-4C"], "this host"),
                        (["mdev", "create", "--type", "H200X-4C", "--gpu", "18:00.0"], "0000:18:00.0")):  # fmt: skip
        res = cli("--root", str(root), *args)
        assert (res.code, res.out, res.err) == (
            3,
            "",
            f'error: Unknown type "H200X-4C" on {where}: 0000:18:00.0 (H200 SXM 141GB) is in MIG mode, which lists '
            "only MIG-backed types; H200X-4C is time-sliced, and time-sliced and MIG-backed types do not mix on one "
            "GPU\nhint: turn MIG mode off (`vgpuadm mig disable --gpu 0000:18:00.0`, once its MIG-backed vGPUs are "
            "gone) to get time-sliced types, or ask for a MIG-backed type (`vgpuadm types` lists them)\n",
        )
