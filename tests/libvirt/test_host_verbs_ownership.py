"""The low-level verbs that take a device away (`mdev remove`, `vf clear`, `vfio unbind`) refuse a device a domain
owns, naming the domain; with --force the device goes and leaves the domain's record in the same plan (hostdev
detached, vgpuadm metadata rewritten). Real CLI processes, the root's embedded libvirt, the simulated kernel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from embedded_host import allocations, attr, define, define_xml, hostdev_keys, mdevs, vgpuadm

from tests.domains import QEMU_MACHINE, VNC, domain

pytestmark = pytest.mark.libvirt


def _hint(vm: str, dev: str) -> str:
    return (f"hint: take it back with `vgpuadm destroy --vm {vm} --uuid {dev}`, or pass --force to remove it anyway "
            f"(it is also dropped from {vm}'s record)\n")  # fmt: skip


def test_mdev_remove_refuses_an_owned_mdev_and_force_takes_it_from_the_domain(
    sim_host: Callable[[str], Path],
) -> None:
    root = sim_host("p4")
    define(root, "ownmdev01")
    res = vgpuadm(root, "create", "--type", "nvidia-63", "--count", "2", "--vm", "ownmdev01")
    assert res.code == 0, res.err
    first, second = hostdev_keys(root, "ownmdev01")
    res = vgpuadm(root, "mdev", "remove", first)
    assert (res.code, res.out) == (5, "")
    assert res.err == f"error: {first} is given to domain ownmdev01\n" + _hint("ownmdev01", first)
    assert mdevs(root) == sorted([first, second]) and len(allocations(root, "ownmdev01")) == 2

    dry = vgpuadm(root, "mdev", "remove", first, "--force", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines()[0] == (
        f"would run: step 1/2 detach mdev {first} (nvidia-63) from domain ownmdev01, and record 1 vgpuadm device(s) "
        "in its metadata"
    )
    assert mdevs(root) == sorted([first, second]) and len(allocations(root, "ownmdev01")) == 2

    res = vgpuadm(root, "mdev", "remove", first, "--force")
    assert res.code == 0, res.err
    assert mdevs(root) == [second]
    assert hostdev_keys(root, "ownmdev01") == [second]
    assert [a.uuid for a in allocations(root, "ownmdev01")] == [second]


def test_mdev_remove_of_an_unowned_mdev_needs_no_force(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("p4")
    uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-63", "--uuid", uuid).code == 0
    res = vgpuadm(root, "mdev", "remove", uuid)
    assert res.code == 0, res.err
    assert mdevs(root) == []


def test_vf_clear_refuses_an_owned_vf_and_force_takes_it_from_the_domain(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("h200-vendor-vfio")
    define(root, "ownvf01")
    res = vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "ownvf01")
    assert res.code == 0, res.err
    [vf] = hostdev_keys(root, "ownvf01")
    res = vgpuadm(root, "vf", "clear", vf)
    assert (res.code, res.err) == (5, f"error: {vf} is given to domain ownvf01\n" + _hint("ownvf01", vf))
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1420\n"
    res = vgpuadm(root, "vf", "clear", vf, "--force")
    assert res.code == 0, res.err
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "0\n"
    assert hostdev_keys(root, "ownvf01") == [] and allocations(root, "ownvf01") == []


def test_vfio_unbind_refuses_an_owned_gpu_and_force_takes_it_from_the_domain(sim_host: Callable[[str], Path]) -> None:
    root = sim_host("passthrough")
    gpu = "0000:65:00.0"
    define(root, "ownpt01")
    res = vgpuadm(root, "passthrough", "--gpu", gpu, "--vm", "ownpt01")
    assert res.code == 0, res.err
    assert hostdev_keys(root, "ownpt01") == [gpu, "0000:65:00.1"]
    res = vgpuadm(root, "vfio", "unbind", gpu)
    assert (res.code, res.err) == (5, f"error: {gpu} is given to domain ownpt01\n" + _hint("ownpt01", gpu))
    assert (root / f"sys/bus/pci/devices/{gpu}/driver").resolve().name == "vfio-pci"
    res = vgpuadm(root, "vfio", "unbind", gpu, "--force")
    assert res.code == 0, res.err
    assert (root / f"sys/bus/pci/devices/{gpu}/driver").resolve().name == "nvidia"
    assert (root / "sys/bus/pci/devices/0000:65:00.1/driver").resolve().name == "snd_hda_intel"
    assert hostdev_keys(root, "ownpt01") == [] and allocations(root, "ownpt01") == []


def test_a_short_or_upper_case_address_meets_the_same_ownership_guard(sim_host: Callable[[str], Path]) -> None:
    """The README says the 0000: may be left out everywhere: `vf clear 18:00.4` on a VF a domain owns is refused as
    `vf clear 0000:18:00.4` is (it used to clear the VF, rc 0, leaving the domain's device MISSING), and
    `vfio unbind 65:00.0` finds the GPU `vfio bind 65:00.0` bound (it used to say "No PCI function 65:00.0")."""
    root = sim_host("h200-vendor-vfio")
    define(root, "shortvf01")
    assert vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "shortvf01").code == 0
    [vf] = hostdev_keys(root, "shortvf01")
    for typed in (vf.removeprefix("0000:"), vf.upper(), vf.removeprefix("0000:").upper()):
        res = vgpuadm(root, "vf", "clear", typed)
        assert (res.code, res.err) == (5, f"error: {vf} is given to domain shortvf01\n" + _hint("shortvf01", vf))
    assert attr(root, f"/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type") == "1420\n"

    root = sim_host("passthrough")
    assert vgpuadm(root, "vfio", "bind", "65:00.0").code == 0
    assert attr(root, "/sys/bus/pci/devices/0000:65:00.0/driver_override") == "vfio-pci\n"
    res = vgpuadm(root, "vfio", "unbind", "65:00.0")
    assert res.code == 0, res.err
    assert attr(root, "/sys/bus/pci/devices/0000:65:00.0/driver_override") == "(null)\n"  # as the kernel shows it


def test_a_malformed_address_is_refused_where_it_enters(sim_host: Callable[[str], Path]) -> None:
    res = vgpuadm(sim_host("h200-vendor-vfio"), "vf", "clear", "18:00")
    assert (res.code, res.out) == (2, "")
    assert res.err.splitlines()[0] == "error: '18:00' is not a PCI address"


# "PCI addresses may omit the `0000:` domain everywhere" (README): every command-line parameter that takes a PCI
# address, and a run of it (profile, commands with {A} where the address goes, the long and the short address).
# Plan files (`apply -f`, keys `gpu` and `passthrough`) take them too. A domain vm1 with a fixed UUID is defined
# first, so that both runs derive the same mdev UUIDs.
U1, U2 = "11111111-2222-4333-8444-555555555501", "11111111-2222-4333-8444-555555555502"
ADDRESS_CASES: dict[str, tuple[str, list[list[str]], str, str]] = {
    "types --gpu": ("p4", [["types", "--gpu", "{A}"], ["types", "--json", "--gpu", "{A}"]], "0000:01:00.0", "01:00.0"),
    "devices --gpu": ("p4", [["mdev", "create", "--type", "nvidia-63", "--gpu", "{A}", "--uuid", U1], ["devices", "--gpu", "{A}"]],
                      "0000:02:00.0", "02:00.0"),
    "devices --uuid": ("h200-vendor-vfio", [["vf", "set-type", "--type", "H200X-4C", "--vf", "{A}"],
                                            ["devices", "--uuid", "{A}"]], "0000:18:00.4", "18:00.4"),
    "mdev create --gpu": ("p4", [["mdev", "create", "--type", "nvidia-64", "--gpu", "{A}", "--count", "2", "--uuid", U1, "--uuid", U2]],
                          "0000:02:00.0", "02:00.0"),
    "vf set-type --vf": ("h200-vendor-vfio", [["vf", "set-type", "--type", "H200X-4C", "--vf", "{A}"]],
                         "0000:18:00.5", "18:00.5"),
    "vf clear VF": ("h200-vendor-vfio", [["vf", "set-type", "--type", "H200X-4C", "--vf", "{A}"], ["vf", "clear", "{A}"]],
                    "0000:18:00.4", "18:00.4"),
    "sriov disable PF": ("a100-mdev-vf", [["sriov", "disable", "{A}"]], "0000:41:00.0", "41:00.0"),
    "sriov enable PF": ("a100-mdev-vf", [["sriov", "disable", "{A}"], ["sriov", "enable", "{A}"]],
                        "0000:41:00.0", "41:00.0"),
    "vfio bind GPU": ("passthrough", [["vfio", "bind", "{A}"]], "0000:65:00.0", "65:00.0"),
    "vfio unbind GPU": ("passthrough", [["vfio", "bind", "{A}"], ["vfio", "unbind", "{A}"]], "0000:65:00.0", "65:00.0"),
    "create --gpu": ("p4", [["create", "--type", "nvidia-63", "--vm", "vm1", "--gpu", "{A}"]],
                     "0000:02:00.0", "02:00.0"),
    "destroy --uuid": ("h200-vendor-vfio", [["create", "--type", "H200X-4C", "--vm", "vm1", "--gpu", "{A}"],
                                            ["destroy", "--vm", "vm1", "--uuid", "{A}", "--dry-run"],
                                            ["destroy", "--vm", "vm1", "--uuid", "{A}"]], "0000:18:00.4", "18:00.4"),
    "passthrough --gpu": ("passthrough", [["passthrough", "--gpu", "{A}", "--vm", "vm1"]],
                          "0000:65:00.0", "65:00.0"),
    "release --gpu": ("passthrough", [["passthrough", "--gpu", "{A}", "--vm", "vm1"], ["release", "--gpu", "{A}"]],
                      "0000:65:00.0", "65:00.0"),
    "mig profiles --gpu": ("h200-mig", [["mig", "profiles", "--gpu", "{A}"]], "0000:18:00.0", "18:00.0"),
    "mig enable --gpu": ("h200-mig", [["mig", "enable", "--gpu", "{A}"]], "0000:18:00.0", "18:00.0"),
    "mig create --gpu": ("h200-mig", [["mig", "enable", "--gpu", "{A}"],
                                      ["mig", "create", "--gpu", "{A}", "--profile", "1g.18gb", "--count", "2"]],
                         "0000:18:00.0", "18:00.0"),
    "mig destroy --gpu": ("h200-mig", [["mig", "enable", "--gpu", "{A}"],
                                       ["mig", "create", "--gpu", "{A}", "--profile", "1g.18gb"],
                                       ["mig", "destroy", "--gpu", "{A}", "--all"]], "0000:18:00.0", "18:00.0"),
    "mig disable --gpu": ("h200-mig", [["mig", "enable", "--gpu", "{A}"], ["mig", "disable", "--gpu", "{A}"]],
                          "0000:18:00.0", "18:00.0"),
    "apply -f (gpu)": ("p4", [["apply", "-f", "plan-gpu.yaml", "--check"], ["apply", "-f", "plan-gpu.yaml"]],
                       "0000:02:00.0", "02:00.0"),
    "apply -f (passthrough)": ("passthrough", [["apply", "-f", "plan-pt.yaml"], ["apply", "-f", "plan-pt.yaml"]],
                               "0000:65:00.0", "65:00.0"),
}  # fmt: skip
ALIASES = {"give-back": "destroy", "remove": "destroy"}  # the same command under other names
ADDRESS_CALLBACKS = {
    ("vgpuadm.cli.console", "as_bdf"),
    ("vgpuadm.cli.console", "as_device"),
}  # cli/console.py: addresses, device ids
PLANS = {
    "plan-gpu.yaml": 'version: 1\nvms:\n  vm1:\n    type: nvidia-63\n    gpu: "{A}"\n',
    "plan-pt.yaml": 'version: 1\nvms:\n  vm1:\n    passthrough: "{A}"\n',
}


def test_every_parameter_that_takes_a_pci_address_has_a_short_form_case() -> None:
    """Read from the command tree `vgpuadm --help` renders: a new address parameter without a case fails here."""
    import typer.main

    from vgpuadm.cli.app import build_app

    found, todo = set(), [([], typer.main.get_command(build_app()))]
    while todo:
        path, command = todo.pop()
        if hasattr(command, "commands"):  # a group
            todo += [([*path, ALIASES.get(name, name)], sub) for name, sub in command.commands.items()]
            continue
        for p in command.params:
            wrapped = getattr(p.callback, "__wrapped__", None)  # typer wraps the callback
            if wrapped is not None and (wrapped.__module__, wrapped.__name__) in ADDRESS_CALLBACKS:
                found.add(" ".join([*path, p.opts[0] if p.param_type_name == "option" else str(p.name).upper()]))
    assert found == {k for k in ADDRESS_CASES if not k.startswith("apply")}


@pytest.mark.parametrize("case", sorted(ADDRESS_CASES))
def test_a_short_address_behaves_exactly_as_the_long_one(case: str, tmp_path: Path) -> None:
    """The same commands with `0000:18:00.4` and with `18:00.4`, each on a fresh host of the same profile: the same
    exit codes and output (the root's path aside), the same kernel state and the same domain afterwards."""
    from vgpuadm.sim.profiles import build
    from vgpuadm.sim.treestate import tree_state

    profile, commands, long, short = ADDRESS_CASES[case]
    seen = {}
    for form, address in (("long", long), ("short", short)):
        root = tmp_path / form
        build(profile, str(root))
        vm1 = domain(
            "vm1", "6c3e8a6e-0000-4000-8000-000000000001", hypervisor="qemu", machine=QEMU_MACHINE, devices=VNC
        )
        define_xml(root, vm1)
        for name, text in PLANS.items():
            (root / name).write_text(text.replace("{A}", address))
        runs = []
        for argv in commands:
            argv = [str(root / a) if a in PLANS else a.replace("{A}", address) for a in argv]
            res = vgpuadm(root, *argv)
            runs.append((res.code, res.out.replace(str(root), "ROOT"), res.err.replace(str(root), "ROOT")))
        seen[form] = (runs, tree_state(root), allocations(root, "vm1"), hostdev_keys(root, "vm1"))
    assert seen["short"] == seen["long"]
    assert all(code == 0 for code, _, _ in seen["long"][0]), seen["long"][0]


# -- hints that send the user to a command that would refuse (#30.8) ------------------------------------------------


def test_no_room_names_the_vm_that_owns_the_blocking_devices(sim_host: Callable[[str], Path]) -> None:
    """ "No room" used to send the user to `mdev remove` for devices a VM owns (which refuses them, rc 5): the hint
    names the owner and `vgpuadm destroy --vm`, and `mdev remove` only for the device no VM owns. The same through
    `create --vm` (the domains already read) and `mdev create` (read for the hint)."""
    root = sim_host("t4")
    define(root, "holder01", "other01")
    assert vgpuadm(root, "create", "--type", "nvidia-227", "--count", "2", "--vm", "holder01").code == 0
    owned = sorted(hostdev_keys(root, "holder01"))
    loose = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-227", "--uuid", loose).code == 0
    err = (
        "error: No room for 1 × nvidia-222: 0000:3b:00.0: GPU runs nvidia-227 (GRID T4-4A); one vGPU type per GPU\n"
        f"hint: free what is in the way: holder01 owns {owned[0]}, {owned[1]} (`vgpuadm destroy --vm holder01 "
        f"--uuid ID`); no VM owns {loose} (`vgpuadm mdev remove {loose}`); or pick another type or GPU; `vgpuadm types "
        "--available` lists what fits now\n"
    )
    for args in (["mdev", "create", "--type", "nvidia-222"], ["create", "--type", "nvidia-222", "--vm", "other01"],
                 ["mdev", "create", "--type", "nvidia-222", "--dry-run"]):  # fmt: skip
        res = vgpuadm(root, *args)
        assert (res.code, res.out, res.err) == (4, "", err), args
    # what the hint says works: the unowned one goes with `mdev remove`, the owned ones with `destroy --vm`
    assert vgpuadm(root, "mdev", "remove", loose).code == 0
    assert vgpuadm(root, "mdev", "remove", owned[0]).code == 5
    assert vgpuadm(root, "destroy", "--vm", "holder01", "--uuid", owned[0]).code == 0
    assert vgpuadm(root, "destroy", "--vm", "holder01", "--uuid", owned[1]).code == 0
    assert vgpuadm(root, "mdev", "create", "--type", "nvidia-222").code == 0


def test_sriov_disable_names_the_vm_that_owns_a_vf_vgpu(sim_host: Callable[[str], Path]) -> None:
    """`sriov disable` refused with "remove their vGPUs (`vgpuadm mdev remove`, `vgpuadm vf clear`)", commands that
    refuse the VM's devices: it names the owner and `destroy --vm`, and `mdev remove` for the unowned one."""
    root = sim_host("a100-mdev-vf")
    define(root, "sriovvm01")
    assert vgpuadm(root, "create", "--type", "A100-10C", "--vm", "sriovvm01").code == 0
    [owned] = hostdev_keys(root, "sriovvm01")
    loose = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    assert vgpuadm(root, "mdev", "create", "--type", "A100-10C", "--uuid", loose).code == 0
    res = vgpuadm(root, "sriov", "disable", "0000:41:00.0")
    assert (res.code, res.out) == (5, "")
    first, second = sorted([owned, loose])
    assert res.err == (
        f"error: VFs of 0000:41:00.0 are in use ({first}, {second})\n"
        f"hint: free what is in the way: sriovvm01 owns {owned} (`vgpuadm destroy --vm sriovvm01 --uuid {owned}`); "
        f"no VM owns {loose} (`vgpuadm mdev remove {loose}`); then run this again\n"
    )


def test_vf_set_type_on_an_owned_vf_names_its_vm(sim_host: Callable[[str], Path]) -> None:
    """`vf set-type --vf V` on a VF a VM owns said "clear it first with `vgpuadm vf clear V`", which refuses (rc 5)."""
    root = sim_host("h200-vendor-vfio")
    define(root, "settype01")
    assert vgpuadm(root, "create", "--type", "H200X-4C", "--vm", "settype01").code == 0
    [vf] = hostdev_keys(root, "settype01")
    res = vgpuadm(root, "vf", "set-type", "--type", "H200X-8C", "--vf", vf)
    assert (res.code, res.out, res.err) == (
        5,
        "",
        f"error: VF {vf} already runs nvidia-1420\n"
        f"hint: free what is in the way: settype01 owns {vf} (`vgpuadm destroy --vm settype01 --uuid {vf}`); or pick "
        "another VF\n",
    )
