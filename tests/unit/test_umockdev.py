"""The umockdev-record loader: escapes, derived bus/class/IOMMU/mdev_bus entries, malformed files, and the
`vgpuadm sim import-umockdev` command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vgpuadm.errors import UsageError
from vgpuadm.host.umockdev import load, parse, unescape

REPO = Path(__file__).resolve().parents[2]

RECORD = """P: /devices/pci0000:00/0000:00:03.0/0000:08:00.0
E: SUBSYSTEM=pci
E: DRIVER=nvidia
A: class=0x030200\\n
A: vendor=0x10de\\n
A: device=0x25b6\\n
A: sriov_totalvfs=1\\n
A: sriov_numvfs=1\\n
A: label=a\\tb\\\\c\\x41\\101\\n
H: config=DE10B625
L: driver=../../../../bus/pci/drivers/nvidia
L: iommu_group=../../../../kernel/iommu_groups/38
L: virtfn0=../0000:08:00.4
N: nvidia0

P: /devices/pci0000:00/0000:00:03.0/0000:08:00.4
E: SUBSYSTEM=pci
A: class=0x030200\\n
A: vendor=0x10de\\n
A: device=0x25b6\\n
L: driver=../../../../bus/pci/drivers/nvidia
L: iommu_group=../../../../kernel/iommu_groups/90
L: physfn=../0000:08:00.0

P: /devices/pci0000:00/0000:00:03.0/0000:08:00.4/f715f63c-0d00-4007-9c5a-b07b0c6c05de
E: SUBSYSTEM=mdev
L: iommu_group=../../../../../kernel/iommu_groups/106
L: mdev_type=../mdev_supported_types/nvidia-754
A: nvidia/vgpu_params=\\n
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "host.umockdev"
    path.write_text(text)
    return str(path)


def test_unescape_c_escapes():
    assert unescape(r"a\tb\\c\x41\101\n") == b"a\tb\\cAA\n"


def test_parse_blocks():
    devs = parse(RECORD)
    assert [d.name for d in devs] == ["0000:08:00.0", "0000:08:00.4", "f715f63c-0d00-4007-9c5a-b07b0c6c05de"]
    pf = devs[0]
    assert (pf.subsystem, pf.props["DRIVER"], pf.attrs["config"], pf.links["virtfn0"]) == (
        "pci", "nvidia", bytes.fromhex("DE10B625"), "../0000:08:00.4"
    )  # fmt: skip


def test_load_derives_bus_class_group_and_mdev_entries(tmp_path):
    root = tmp_path / "root"
    loaded = load(write(tmp_path, RECORD), str(root))
    assert (loaded.devices, loaded.mdev_parents, loaded.mdevs) == (
        3, ["0000:08:00.4"], ["f715f63c-0d00-4007-9c5a-b07b0c6c05de"]
    )  # fmt: skip
    sys = root / "sys"
    dev = "devices/pci0000:00/0000:00:03.0/0000:08:00.0"
    assert (sys / dev / "label").read_bytes() == b"a\tb\\cAA\n"
    assert (sys / dev / "class").read_bytes() == b"0x030200\n"
    assert os.readlink(sys / "bus/pci/devices/0000:08:00.0") == f"../../../{dev}"
    assert os.readlink(sys / "bus/pci/drivers/nvidia/0000:08:00.0") == f"../../../../{dev}"
    assert (sys / "kernel/iommu_groups/38/devices/0000:08:00.0").resolve() == (sys / dev).resolve()
    vf = "devices/pci0000:00/0000:00:03.0/0000:08:00.4"
    assert os.readlink(sys / "class/mdev_bus/0000:08:00.4") == f"../../{vf}"
    uuid = "f715f63c-0d00-4007-9c5a-b07b0c6c05de"
    assert os.readlink(sys / "bus/mdev/devices" / uuid) == f"../../../{vf}/{uuid}"
    assert (sys / vf / "mdev_supported_types/nvidia-754/devices" / uuid).resolve() == (sys / vf / uuid).resolve()
    assert (sys / vf / uuid / "nvidia/vgpu_params").read_bytes() == b"\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A: class=0x0300\n", "host.umockdev line 1: A: line before any P: line"),
        ("P: /sys/devices/x\n", "host.umockdev line 1: device path '/sys/devices/x' is not under /devices"),
        ("P: /devices/../../etc\n", "host.umockdev line 1: device path '/devices/../../etc' is not under /devices"),
        ("P: /devices/x\nA class\n", "host.umockdev line 2: 'A class' is not a umockdev record line"),
        ("P: /devices/x\nA: ../../etc=1\n", "host.umockdev line 2: 'A: ../../etc=1' has no name=value"),
        ("P: /devices/x\nH: config=zz\n", "host.umockdev line 2: H: config is not hex"),
    ],
)
def test_malformed_record_names_file_and_line(tmp_path, text, message):
    with pytest.raises(UsageError) as exc:
        load(write(tmp_path, text), str(tmp_path / "root"))
    assert exc.value.message == message


def test_import_command(tmp_path, cli):
    root = tmp_path / "root"
    r = cli("sim", "import-umockdev", write(tmp_path, RECORD), str(root))
    assert (r.code, r.err) == (0, "")
    assert r.out == f"imported 3 devices, 1 mdev parents, 1 mdevs into {root} (use --root {root})\n"
    r = cli("--root", str(root), "devices", "--json")
    assert r.code == 0 and '"type_id": "nvidia-754"' in r.out


def test_import_command_errors(tmp_path, cli):
    r = cli("sim", "import-umockdev", str(tmp_path / "missing.umockdev"), str(tmp_path / "root"))
    assert (r.code, r.err.splitlines()) == (3, [
        f"error: cannot read {tmp_path / 'missing.umockdev'}: No such file or directory",
        "hint: give the path of a umockdev-record file",
    ])  # fmt: skip
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    r = cli("sim", "import-umockdev", write(tmp_path, RECORD), str(tmp_path / "full"))
    assert (r.code, r.err.splitlines()[0]) == (2, f"error: {tmp_path / 'full'} is not empty")


def test_import_help_has_example(cli, capsys):
    r = cli("sim", "import-umockdev", "--help")
    assert r.code == 0 and "Example: vgpuadm sim import-umockdev" in capsys.readouterr().out


def test_import_names_vfs_whose_types_were_not_recorded(tmp_path, cli):
    """umockdev records no vGPU types: the A2's VFs without an mdev would show as plain passthrough functions with
    nothing said. The import says so and what to do; with --types-from every VF is an mdev parent, and nothing is said."""
    recording = str(REPO / "tests/data/harvester-a2/vgpu-node.umockdev")
    bare = cli("sim", "import-umockdev", recording, str(tmp_path / "bare"))
    assert (bare.code, bare.err) == (0, "warning: 13 NVIDIA VF(s) (0000:08:00.5 …): types not recorded (use "
                                        "--types-from a captured sys/ tree); until then they show as layout "
                                        "passthrough\n")  # fmt: skip
    typed = cli("sim", "import-umockdev", recording, str(tmp_path / "typed"), "--types-from",
                str(REPO / "tests/data/harvester-a2/testdata-sys"))  # fmt: skip
    assert (typed.code, typed.err) == (0, "")
    assert typed.out.startswith("imported 1188 devices, 16 mdev parents, 3 mdevs")
