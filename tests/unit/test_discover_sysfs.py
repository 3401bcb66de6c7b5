"""Sysfs reading primitives discovery relies on: newline stripping, long files, relative reads, link following."""

from __future__ import annotations

import os

import pytest

from vgpuadm.errors import HostIOError
from vgpuadm.host.sysfs import Sysfs


@pytest.fixture
def tree(tmp_path):
    d = tmp_path / "sys/devices/pci0000:00/0000:01:00.0"
    (d / "mdev_supported_types/nvidia-63").mkdir(parents=True)
    (d / "vendor").write_text("0x10de\n")
    (d / "big").write_bytes(b"x" * 200_000 + b"\n")
    (d / "mdev_supported_types/nvidia-63/name").write_text("GRID P4-1Q\n")
    (d / "mdev_supported_types/nvidia-63/available_instances").write_text("8\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:01:00.0", tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    return tmp_path


def test_read_strips_one_newline_and_reads_long_files(tree):
    s = Sysfs(str(tree))
    assert s.read("/sys/bus/pci/devices/0000:01:00.0/vendor") == "0x10de"
    assert s.read("/sys/bus/pci/devices/0000:01:00.0/big") == "x" * 200_000
    assert s.read_opt("/sys/bus/pci/devices/0000:01:00.0/nothing") is None


def test_read_tree_reads_relative_to_one_directory(tree):
    s = Sysfs(str(tree))
    got = s.read_tree("/sys/devices/pci0000:00/0000:01:00.0", {
        "mdev_supported_types/nvidia-63": ("name", "available_instances", "description"), "": ("big",),
    })  # fmt: skip
    assert got["mdev_supported_types/nvidia-63"] == {"name": "GRID P4-1Q", "available_instances": "8",
                                                     "description": None}  # fmt: skip
    assert got[""] == {"big": "x" * 200_000}
    assert s.read_attrs("/sys/devices/gone", ("name",)) == {"name": None}


def test_read_tree_error_names_the_host_path(tree):
    (tree / "sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types/nvidia-63/device_api").mkdir()
    s = Sysfs(str(tree))
    with pytest.raises(HostIOError) as exc:
        s.read_attrs("/sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types/nvidia-63", ("device_api",))
    assert exc.value.message == (
        "reading /sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types/nvidia-63/device_api failed: "
        "Is a directory (EISDIR)"
    )
    assert exc.value.path == "/sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types/nvidia-63/device_api"


def test_resolve_link_matches_realpath(tree):
    s = Sysfs(str(tree))
    link = "/sys/bus/pci/devices/0000:01:00.0"
    assert s.resolve_link(link) == s.resolve(link) == "/sys/devices/pci0000:00/0000:01:00.0"
    assert s.resolve_link("/sys/devices/pci0000:00") == "/sys/devices/pci0000:00"


def test_writer_is_made_on_first_write_only(tree):
    made = []

    class Recorder:
        def write(self, host_path: str, data: str) -> None:
            made.append((host_path, data))

    s = Sysfs(str(tree), writer_factory=lambda: made.append("made") or Recorder())
    s.read("/sys/bus/pci/devices/0000:01:00.0/vendor")
    assert made == []
    s.write("/sys/bus/pci/drivers_probe", "0000:01:00.0")
    assert made == ["made", ("/sys/bus/pci/drivers_probe", "0000:01:00.0")]
