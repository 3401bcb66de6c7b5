"""Type errors as an operator meets them (the CLI in-process on simulated hosts): a GPU bound to vfio-pci says why
it offers no types, a type name no driver lists is "Unknown" (not a false "No room"), and GPU model names from
pci.ids (under the root first) next to the addresses."""

from __future__ import annotations

import re

import pytest

P4 = "0000:03:00.0"  # the mixed profile's Tesla P4 (layout A)


def _mixed_with_p4_passed_through(cli, sim_host):
    root = sim_host("mixed")
    assert cli("--root", str(root), "vf", "set-type", "--type", "H200X-141C").code == 0  # an H200 VF in use
    assert cli("--root", str(root), "vfio", "bind", P4).code == 0
    return root


@pytest.mark.process
def test_a_gpu_bound_to_vfio_pci_says_why_it_offers_no_types(cli, sim_host):
    root = _mixed_with_p4_passed_through(cli, sim_host)
    why = "it is bound to vfio-pci (whole-GPU passthrough)"
    back = f"`vgpuadm release --gpu {P4}` (when a VM has it) or `vgpuadm vfio unbind {P4}` gives it back to its driver"
    listed = cli("--root", str(root), "types", "--gpu", "03:00.0", "--json")
    assert (listed.code, listed.out) == (0, "[]\n")
    assert listed.err == f"warning: GPU {P4} (Tesla P4) offers no vGPU types: {why}; {back}\n"
    made = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--gpu", "03:00.0")
    assert (made.code, made.err) == (3, f"error: GPU {P4} (Tesla P4) offers no vGPU types: {why}\nhint: {back}\n")


@pytest.mark.process
def test_an_unknown_type_names_the_gpus_bound_to_vfio_pci_not_a_false_no_room(cli, sim_host):
    root = _mixed_with_p4_passed_through(cli, sim_host)
    r = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63")
    assert r.code == 3
    first, hint = r.err.splitlines()
    assert first.startswith('error: Unknown type "nvidia-63" on this host; did you mean ')
    assert first.endswith(f"? ({P4} (Tesla P4) is bound to vfio-pci, so its types are not offered now)")
    assert hint == (f"hint: `vgpuadm release --gpu {P4}` or `vgpuadm vfio unbind {P4}` gives it back to its driver; "
                    "run `vgpuadm types` to list the types this host offers")  # fmt: skip
    full = cli("--root", str(root), "mdev", "create", "--type", "H200X-4C")  # known to the driver, no room now
    assert (full.code, full.err) == (4, "error: No room for 1 × H200X-4C: 0000:18:00.0: 1 vGPU of 144384 MiB runs on it "
                                        "(NVIDIA H200X-141C) and NVIDIA H200X-4C is 4096 MiB; one framebuffer size per "
                                        "GPU, and it is full\nhint: free what is in the way: no VM owns 0000:18:00.4 "
                                        "(`vgpuadm vf clear 0000:18:00.4`); or pick another GPU\n")  # fmt: skip


def test_gpu_models_from_the_roots_pci_ids_in_tables(cli, sim_host):
    root = sim_host("mixed")
    table = cli("--root", str(root), "gpus").out
    models = {m[1]: m[2] for m in re.finditer(r"(0000:[0-9a-f:.]+) +│ [0-9a-f:]+ +│ ([^│]+?) +│", table)}
    assert models == {"0000:01:00.0": "GeForce RTX 2080 Ti", P4: "Tesla P4", "0000:65:00.0": "GeForce RTX 3090",
                      "0000:41:00.0": "A100 PCIe 40GB", "0000:18:00.0": "H200 SXM 141GB",
                      **{k: v for k, v in models.items() if k[-4:] != "00.0"}}  # fmt: skip
    own = root / "usr/share/misc/pci.ids"
    own.write_text("10de  NVIDIA Corporation\n\t1bb3  GP104GL [Tesla P4 (this root)]\n\t\t10de 11d8  a subsystem\n")
    types = cli("--root", str(root), "types", "--gpu", P4).out
    assert all("Tesla P4 (this root)" in line for line in types.splitlines() if "nvidia-" in line)


@pytest.mark.process
def test_mdev_create_explain_lists_every_gpu_with_why(cli, sim_host):
    root = sim_host("mixed")
    assert cli("--root", str(root), "vfio", "bind", "0000:65:00.0").code == 0
    r = cli("--root", str(root), "mdev", "create", "--type", "nvidia-468", "--count", "2", "--explain", "--dry-run")
    assert r.code == 0, r.err
    no_vgpu = "the nvidia driver lists none on it (a board without vGPU support, or the vGPU manager is not running)"
    assert r.out.splitlines()[:6] == [
        "placement of 2 × nvidia-468, policy pack (fill the busiest GPU first):",
        "  0000:41:00.0 (A100 PCIe 40GB): chosen for 2 on 0000:41:00.4, 0000:41:00.5 (0 vGPU(s) ran on it)",
        f"  0000:01:00.0 (GeForce RTX 2080 Ti): not chosen: it offers no vGPU types: {no_vgpu}",
        f"  {P4} (Tesla P4): not chosen: it does not offer nvidia-468",
        "  0000:18:00.0 (H200 SXM 141GB): not chosen: it does not offer nvidia-468",
        "  0000:65:00.0 (GeForce RTX 3090): not chosen: it offers no vGPU types: it is bound to vfio-pci (whole-GPU "
        "passthrough)",
    ]


def test_explain_says_why_an_open_gpu_was_passed_over(cli, sim_host):
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "P4-1Q", "--gpu", "02:00.0").code == 0
    r = cli("--root", str(root), "mdev", "create", "--type", "P4-1Q", "--explain", "--dry-run")
    assert r.out.splitlines()[:3] == [
        "placement of 1 × nvidia-63, policy pack (fill the busiest GPU first):",
        "  0000:02:00.0 (Tesla P4): chosen for 1 (1 vGPU(s) ran on it)",
        "  0000:01:00.0 (Tesla P4): not chosen: it has room, but pack fills the busiest GPU first (0 vGPU(s) run on it)",
    ]


@pytest.mark.process
def test_sriov_enable_as_its_help_example_says(cli, sim_host, capsys):
    root = sim_host("a100-mdev-vf")
    assert cli("--root", str(root), "sriov", "disable", "0000:41:00.0").code == 0
    capsys.readouterr()
    cli("sriov", "enable", "--help")
    example = " ".join(capsys.readouterr().out.split()).split("Example: vgpuadm ", 1)[1].split("   (")[0].split(" (")[0]
    assert example == "sriov enable 0000:41:00.0"
    r = cli("--root", str(root), *example.split())
    assert (r.code, r.out) == (0, "done: step 1/1 run /usr/lib/nvidia/sriov-manage -e 0000:41:00.0\n")
