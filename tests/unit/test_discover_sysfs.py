"""Sysfs reading primitives discovery relies on: newline stripping, long files, relative reads, link following."""

from __future__ import annotations

import errno
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


def test_the_same_short_attribute_text_is_one_str_on_both_roots(tree):
    """Every VF of a GPU lists the same types: identical short texts come back as one str (the later hashing of
    discovery's type cache and of the JSON writer then reuses it); long and undecodable texts read as they always
    did, whatever was read before."""
    types = tree / "sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types"
    (types / "nvidia-64").mkdir()
    for t in ("nvidia-63", "nvidia-64"):
        (types / t / "name").write_text("GRID P4-1Q\n")
        (types / t / "description").write_bytes(b"x" * 300 + b"\n")
        (types / t / "device_api").write_bytes(b"vfio\xff-pci\n")
    (types / "nvidia-64/available_instances").write_text("8")
    for s in (Sysfs(str(tree)), Sysfs("/")):
        prefix = "" if s.root != "/" else str(tree)
        got = s.read_subdirs(prefix + "/sys/devices/pci0000:00/0000:01:00.0/mdev_supported_types",
                             ("name", "available_instances", "description", "device_api"))  # fmt: skip
        a, b = got["nvidia-63"], got["nvidia-64"]
        assert a == b == {"name": "GRID P4-1Q", "available_instances": "8", "description": "x" * 300,
                          "device_api": "vfio\ufffd-pci"}  # fmt: skip
        assert a["name"] is b["name"] and a["device_api"] is b["device_api"]


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


def _answers(call, *args):  # type: ignore[no-untyped-def]
    try:
        return _shown(call(*args))
    except HostIOError as exc:
        return ("error", exc.message, exc.errno)


def _shown(value):  # type: ignore[no-untyped-def]
    """HostIOErrors as their message and errno (two raised separately are distinct objects)."""
    if isinstance(value, dict):
        return {k: (v.message, v.errno) if isinstance(v, HostIOError) else v for k, v in value.items()}
    return value


def _same_as_one_path_at_a_time(s: Sysfs, host: str, links: list[str], attrs: tuple[str, ...]) -> None:
    one = _answers(s.entries, host)
    scan = s.scan(host)
    assert _answers(lambda: scan.__enter__().entries()) == one
    scan.__exit__(None, None, None)
    if isinstance(one, tuple):
        return
    with s.scan(host) as dir_:
        got = [_answers(dir_.entries), _answers(dir_.link_names, links), _answers(dir_.read_attrs, attrs)]
    assert got == [one, _answers(s.link_names, host, links), _answers(s.read_attrs, host, attrs)]
    assert _answers(s.read_subdirs, host, attrs) == _answers(
        lambda: s.read_tree(host, dict.fromkeys(s.listdir(host), attrs))
    )


def test_one_scan_answers_as_the_reads_one_path_at_a_time(tree, tmp_path_factory):
    """Sysfs.scan (one descriptor for a directory's entries, links, attributes and bus entries) and read_subdirs
    (one for a listing and its reads) answer exactly as entries, link_names, read_attrs, resolve_link, listdir and
    read_tree do on a root: links inside and out of the root, dangling ones, missing and unreadable attributes,
    missing directories and a file where a directory is asked for."""
    d = tree / "sys/devices/pci0000:00/0000:01:00.0"
    (tree / "sys/kernel/iommu_groups/7").mkdir(parents=True)
    os.symlink("../../../kernel/iommu_groups/7", d / "iommu_group")
    outside = os.path.realpath(tmp_path_factory.mktemp("outside"))
    os.symlink(outside, d / "driver")  # out of the root
    os.symlink("../gone", d / "physfn")  # dangling
    (d / "device_api").mkdir()  # reading it fails: EISDIR
    (d / "mdev_supported_types/nvidia-64").mkdir()
    s = Sysfs(str(tree))
    host = "/sys/devices/pci0000:00/0000:01:00.0"
    links = ["iommu_group", "driver", "physfn", "nothing"]
    for h in [host, f"{host}/gone", f"{host}/vendor", f"{host}/mdev_supported_types"]:
        for attrs in [("vendor", "missing", "big"), ("device_api",), ("name", "available_instances")]:
            _same_as_one_path_at_a_time(s, h, links, attrs)
    bus = tree / "sys/bus/pci/devices"
    os.symlink("/etc", bus / "0000:02:00.0")  # out of /sys
    os.symlink("../../../../outside", bus / "0000:03:00.0")
    (bus / "0000:04:00.0").mkdir()  # no link
    names = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"]
    for h in ["/sys/bus/pci/devices", "/sys/bus/gone"]:
        with s.scan(h) as dir_:
            assert [_answers(dir_.resolve_link, n) for n in names] == [
                _answers(s.resolve_link, f"{h}/{n}") for n in names
            ]
    with s.scan(host) as dir_:
        assert _answers(dir_.link_names, ["driver", "iommu_group"]) == {
            "driver": (f"refusing {host}/driver: it leads outside the host root's /sys (to {outside})", errno.EXDEV),
            "iommu_group": "7",
        }


@pytest.mark.skipif(not os.path.isdir("/sys/devices/virtual/net/lo"), reason="no /sys/devices/virtual/net/lo here")
def test_one_scan_answers_as_the_reads_one_path_at_a_time_on_slash():
    """The same on `/` (no confinement: paths as they are), on this machine's own loopback device."""
    s = Sysfs("/")
    for attrs in [("mtu", "address", "missing"), ("uevent",)]:
        _same_as_one_path_at_a_time(s, "/sys/devices/virtual/net/lo", ["subsystem", "nothing"], attrs)
        _same_as_one_path_at_a_time(s, "/sys/devices/virtual/net/gone", ["subsystem"], attrs)
    with s.scan("/sys/class/net") as dir_:
        assert _answers(dir_.resolve_link, "lo") == _answers(s.resolve_link, "/sys/class/net/lo")
