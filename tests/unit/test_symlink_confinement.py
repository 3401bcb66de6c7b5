"""Symlinks out of the root (issue #20): on a root other than /, a link planted in the tree never makes vgpuadm read,
list or write a file outside `<root>/sys` (or, for its state, outside the root). Every scenario plants links to a
canary directory next to the root and checks that the canary is neither read (its marker text never shows up) nor
changed, and that the command says why in one line. Writes run on a plain root (a simulated tree without its
marker: plain file writes, as on a host) and on the simulated root (the simulated kernel behind the same checks)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.domains import WEB01, device, domain, save, vgpuadm
from vgpuadm.host.sysfs import SIM_MARKER

CANARY_TEXT = "CANARY-OUTSIDE-THE-ROOT"
P4 = "0000:01:00.0"
P4_DEV = f"sys/devices/pci0000:00/0000:00:01.0/{P4}"
H200_PF = "0000:18:00.0"
H200_VF = "0000:18:00.4"
UUID = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"


def tree(path: Path) -> dict[str, str]:
    """Every file under `path` with its text (links as `-> target`)."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_text() if p.is_file() else "/"
    return out


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    c = tmp_path / "canary"
    c.mkdir()
    return c


@pytest.fixture
def host(sim_host: Callable[[str], Path]) -> Callable[[str, bool], Path]:
    def make(profile: str, plain: bool = False) -> Path:
        root = sim_host(profile)
        if plain:
            os.remove(root / SIM_MARKER)
        return root

    return make


def device_dir(root: Path, address: str) -> Path:
    return (root / "sys/bus/pci/devices" / address).resolve()


def plant(link: Path, target: Path) -> None:
    """Replace `link` (file, directory or link) by a symlink to `target`."""
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        for p in sorted(link.rglob("*"), reverse=True):
            p.unlink() if p.is_symlink() or p.is_file() else p.rmdir()
        link.rmdir()
    link.symlink_to(target)


def fake_device(canary: Path, name: str) -> Path:
    """A PCI device directory outside the root whose attributes carry the canary's text."""
    d = canary / name
    d.mkdir()
    for attr, value in (("class", "0x030000"), ("vendor", "0x10de"), ("device", "0x1bb3"), ("numa_node", "0")):
        (d / attr).write_text(value + "\n")
    (d / "subsystem_vendor").write_text(CANARY_TEXT + "\n")
    return d


def error_line(res) -> str:  # type: ignore[no-untyped-def]
    assert res.code != 0, (res.out, res.err)
    lines = res.err.splitlines()
    assert lines[0].startswith("error: ") and all(line.startswith("hint: ") for line in lines[1:]), res.err
    assert "internal error" not in res.err and "Traceback" not in res.err
    return lines[0]


# --- reads: discovery refuses or skips what leads out, with a warning naming the link --------------------------------


def _read_scenarios() -> list[tuple[str, str, Callable[[Path, Path], None], str]]:
    """(id, profile, plant(root, canary), the warning discovery prints)."""

    def attribute_file(root: Path, canary: Path) -> None:
        (canary / "name").write_text(CANARY_TEXT + "\n")
        plant(device_dir(root, P4) / "mdev_supported_types/nvidia-63/name", canary / "name")

    def device_directory(root: Path, canary: Path) -> None:
        plant(root / "sys/bus/pci/devices" / P4, fake_device(canary, P4))

    def types_directory(root: Path, canary: Path) -> None:
        (canary / "types/nvidia-63").mkdir(parents=True)
        for attr, value in (("name", CANARY_TEXT), ("available_instances", "99"), ("device_api", "vfio-pci")):
            (canary / "types/nvidia-63" / attr).write_text(value + "\n")
        plant(device_dir(root, P4) / "mdev_supported_types", canary / "types")

    def type_directory(root: Path, canary: Path) -> None:
        (canary / "t").mkdir()
        (canary / "t/name").write_text(CANARY_TEXT + "\n")
        (canary / "t/available_instances").write_text("99\n")
        plant(device_dir(root, P4) / "mdev_supported_types/nvidia-63", canary / "t")

    def iommu_group(root: Path, canary: Path) -> None:
        (canary / "13/devices").mkdir(parents=True)
        plant(device_dir(root, P4) / "iommu_group", canary / "13")

    def virtfn(root: Path, canary: Path) -> None:
        plant(device_dir(root, H200_PF) / "virtfn0", fake_device(canary, H200_VF))

    def physfn(root: Path, canary: Path) -> None:
        plant(device_dir(root, H200_VF) / "physfn", fake_device(canary, H200_PF))

    def nvidia_directory(root: Path, canary: Path) -> None:
        (canary / "nvidia").mkdir()
        (canary / "nvidia/creatable_vgpu_types").write_text(f"ID    : vGPU Name\n1420  : {CANARY_TEXT}\n")
        (canary / "nvidia/current_vgpu_type").write_text("0\n")
        plant(device_dir(root, H200_VF) / "nvidia", canary / "nvidia")

    mdev_parent = f"skipped mdev parent {P4}: refusing /sys/devices/pci0000:00/0000:00:01.0/{P4}/mdev_supported_types"
    return [
        ("attribute-file", "p4", attribute_file,
         f"{mdev_parent}/nvidia-63/name: it is a symlink (to {{canary}}/name), not a kernel attribute"),
        ("device-directory", "p4", device_directory,
         f"skipped PCI function {P4}: refusing /sys/bus/pci/devices/{P4}: it leads outside the host root's "
         f"/sys (to {{canary}}/{P4})"),
        ("mdev_supported_types-directory", "p4", types_directory,
         f"{mdev_parent}: it leads outside the host root's /sys (to {{canary}}/types)"),
        ("type-directory", "p4", type_directory,
         f"{mdev_parent}/nvidia-63: it is a symlink (to {{canary}}/t), not a kernel attribute"),
        ("iommu_group", "p4", iommu_group,
         f"PCI function {P4}: refusing /{P4_DEV}/iommu_group: it leads outside the host root's /sys "
         "(to {canary}/13)"),
        ("virtfn", "h200-vendor-vfio", virtfn,
         f"skipped PCI function {H200_PF}: refusing /sys/devices/pci0000:17/0000:17:01.0/{H200_PF}/virtfn0: it leads "
         f"outside the host root's /sys (to {{canary}}/{H200_VF})"),
        ("physfn", "h200-vendor-vfio", physfn,
         f"skipped PCI function {H200_VF}: refusing /sys/devices/pci0000:17/0000:17:01.0/{H200_VF}/physfn: "
         f"it leads outside the host root's /sys (to {{canary}}/{H200_PF})"),
        ("nvidia-directory", "h200-vendor-vfio", nvidia_directory,
         f"skipped vendor-VFIO VF {H200_VF}: refusing /sys/bus/pci/devices/{H200_VF}/nvidia: it "
         "leads outside the host root's /sys (to {canary}/nvidia)"),
    ]  # fmt: skip


READS = _read_scenarios()


@pytest.mark.process
@pytest.mark.parametrize(("profile", "scenario", "warning"), [r[1:] for r in READS], ids=[r[0] for r in READS])
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "sim"])
def test_discovery_never_reads_through_a_link_out_of_the_root(
    host: Callable[..., Path], canary: Path, cli: Callable[..., Any], profile: str, scenario, warning: str, plain: bool
) -> None:
    root = host(profile, plain)
    scenario(root, canary)
    before = tree(canary)
    res = cli("--root", str(root), "inventory", "--json", "--no-libvirt")
    assert res.code == 0, res.err
    assert CANARY_TEXT not in res.out + res.err
    assert warning.format(canary=canary) in json.loads(res.out)["warnings"]
    assert tree(canary) == before


def test_a_bus_entry_pointing_outside_is_refused_even_when_the_target_is_a_fifo(
    host: Callable[..., Path], canary: Path, cli: Callable[..., Any]
) -> None:
    """A planted FIFO outside the root would block an open for reading forever: it is never opened."""
    root = host("p4", True)
    d = fake_device(canary, P4)
    (d / "class").unlink()
    os.mkfifo(d / "class")
    plant(root / "sys/bus/pci/devices" / P4, d)
    res = cli("--root", str(root), "gpus", "--json")
    assert res.code == 0, res.err
    assert [g["address"] for g in json.loads(res.out)] == ["0000:02:00.0"]


# --- writes: no verb writes through a link out of the root --------------------------------------------------------


def _write_scenarios() -> list[tuple[str, str, Callable[[Path, Path], None], tuple[str, ...], str]]:
    """(id, profile, plant(root, canary), command, the refusal its error or hint holds). A link that discovery
    reads already hides the device (the hint says why); one that only a write opens is refused at the write."""

    def vf_type_file(root: Path, canary: Path) -> None:
        (canary / "t").write_text("0\n")
        plant(device_dir(root, H200_VF) / "nvidia/current_vgpu_type", canary / "t")

    def create_file(root: Path, canary: Path) -> None:
        (canary / "create").write_text("")
        plant(device_dir(root, P4) / "mdev_supported_types/nvidia-63/create", canary / "create")

    def numvfs_file(root: Path, canary: Path) -> None:
        (canary / "n").write_text("0\n")
        plant(device_dir(root, "0000:01:00.0") / "sriov_numvfs", canary / "n")

    def probe_file(root: Path, canary: Path) -> None:
        (canary / "p").write_text("")
        plant(root / "sys/bus/pci/drivers_probe", canary / "p")

    def override_file(root: Path, canary: Path) -> None:
        (canary / "o").write_text("(null)\n")
        plant(device_dir(root, "0000:00:10.0") / "driver_override", canary / "o")

    return [
        ("vf-set-type", "h200-vendor-vfio", vf_type_file, ("vf", "set-type", "--type", "1420", "--vf", H200_VF),
         f"refusing /sys/bus/pci/devices/{H200_VF}/nvidia/current_vgpu_type: it is a symlink (to "
         "{canary}/t), not a kernel attribute"),
        ("mdev-create", "p4", create_file, ("mdev", "create", "--type", "nvidia-63", "--gpu", P4, "--uuid", UUID),
         f"refusing /sys/class/mdev_bus/{P4}/mdev_supported_types/nvidia-63/create: it is a symlink (to "
         "{canary}/create), not a kernel attribute"),
        ("sriov-enable", "kernel-samples", numvfs_file, ("sriov", "enable", "0000:01:00.0"),
         "refusing /sys/bus/pci/devices/0000:01:00.0/sriov_numvfs: it is a symlink (to {canary}/n), not a "
         "kernel attribute"),
        ("vfio-bind-drivers_probe", "kernel-samples", probe_file, ("vfio", "bind", "0000:00:10.0", "--force"),
         "refusing /sys/bus/pci/drivers_probe: it is a symlink (to {canary}/p), not a kernel attribute"),
        ("vfio-bind-override", "kernel-samples", override_file, ("vfio", "bind", "0000:00:10.0", "--force"),
         "refusing /sys/bus/pci/devices/0000:00:10.0/driver_override: it is a symlink (to {canary}/o), not "
         "a kernel attribute"),
    ]  # fmt: skip


WRITES = _write_scenarios()


@pytest.mark.process
@pytest.mark.parametrize(
    ("profile", "scenario", "command", "error"), [w[1:] for w in WRITES], ids=[w[0] for w in WRITES]
)
@pytest.mark.parametrize("plain", [True, False], ids=["plain", "sim"])
def test_no_verb_writes_through_a_link_out_of_the_root(
    host: Callable[..., Path],
    canary: Path,
    cli: Callable[..., Any],
    profile: str,
    scenario,
    command: tuple[str, ...],
    error: str,
    plain: bool,
) -> None:
    root = host(profile, plain)
    scenario(root, canary)
    before = tree(canary)
    res = cli("--root", str(root), *command)
    error_line(res)
    assert error.format(canary=canary) in res.err
    assert tree(canary) == before


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "sim"])
def test_restore_never_writes_through_a_link_out_of_the_root(
    host, canary: Path, tmp_path: Path, cli, plain: bool
) -> None:
    root = host("p4", plain)
    (canary / "create").write_text("")
    plant(device_dir(root, P4) / "mdev_supported_types/nvidia-63/create", canary / "create")
    saved = tmp_path / "domains"
    saved.mkdir()
    save(
        saved, domain(uuid=WEB01, metadata=vgpuadm(device(slot=0, mode="mdev", type="nvidia-63", parent=P4, uuid=UUID)))
    )
    before = tree(canary)
    res = cli("--root", str(root), "restore", "--domain-xml-dir", str(saved))
    assert res.code != 0
    assert (
        f"refusing /sys/class/mdev_bus/{P4}/mdev_supported_types/nvidia-63/create: it is a symlink (to "
        f"{canary}/create), not a kernel attribute"
    ) in res.err
    assert "Traceback" not in res.err and "internal error" not in res.err
    assert tree(canary) == before


# --- state: the lock, the journal and drivers.json never go through a link --------------------------------------


@pytest.mark.parametrize("state_dir", ["run", "var/lib/vgpuadm", "var/lib", "var"])
def test_state_directories_reached_through_a_link_are_refused(
    host: Callable[..., Path], canary: Path, cli: Callable[..., Any], state_dir: str
) -> None:
    root = host("p4", True)
    target = canary / "state"
    target.mkdir()
    if (root / state_dir).exists():
        (root / state_dir).rename(target / "moved")
    (root / state_dir).parent.mkdir(parents=True, exist_ok=True)
    (root / state_dir).symlink_to(target)
    before = tree(canary)
    res = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--gpu", P4, "--uuid", UUID)
    assert error_line(res) == f"error: refusing to follow the symlink at /{state_dir}"
    assert tree(canary) == before


def test_files_read_from_etc_never_follow_a_link_out_of_the_root(
    host: Callable[..., Path], canary: Path, cli: Callable[..., Any]
) -> None:
    root = host("p4", True)
    (canary / "id").write_text(CANARY_TEXT + "\n")
    (root / "etc").mkdir(exist_ok=True)
    for name in ("machine-id", "hostname"):
        plant(root / "etc" / name, canary / "id")
    res = cli("--root", str(root), "inventory", "--json", "--no-libvirt")
    assert res.code == 0, res.err
    assert CANARY_TEXT not in res.out + res.err


def test_drivers_record_reached_through_a_link_is_refused(
    host: Callable[..., Path], canary: Path, cli: Callable[..., Any]
) -> None:
    root = host("kernel-samples", True)
    (root / "var/lib/vgpuadm").mkdir(parents=True)
    os.chmod(root / "var/lib/vgpuadm", 0o700)
    (canary / "drivers.json").write_text(json.dumps({"0000:00:10.0": "evil"}))
    (root / "var/lib/vgpuadm/drivers.json").symlink_to(canary / "drivers.json")
    before = tree(canary)
    res = cli("--root", str(root), "vfio", "bind", "0000:00:10.0", "--force")
    assert error_line(res).endswith("failed: refusing to follow the symlink at /var/lib/vgpuadm/drivers.json")
    assert tree(canary) == before


def test_a_drivers_record_naming_a_path_is_refused(host: Callable[..., Path], cli: Callable[..., Any]) -> None:
    root = host("kernel-samples", False)
    (root / "var/lib/vgpuadm").mkdir(parents=True, mode=0o700)
    (root / "var/lib/vgpuadm/drivers.json").write_text(json.dumps({"0000:00:10.0": "../../../../canary"}))
    res = cli("--root", str(root), "vfio", "unbind", "0000:00:10.0")
    assert error_line(res) == (
        "error: refusing /var/lib/vgpuadm/drivers.json: entry '0000:00:10.0': '../../../../canary' is not a PCI "
        "address and a driver"
    )
