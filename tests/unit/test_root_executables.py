"""Tools a host root brings (issue #20): on a root other than /, vgpuadm runs `<root>/usr/bin/nvidia-smi` and
`<root>/usr/lib/nvidia/sriov-manage` only when they resolve inside the root to a regular file owned by root (or by
the user running vgpuadm) that group and others cannot write; anything else is one error line (exit 6), and the
planted program never runs. The roots are plain (a simulated tree without its marker: the verbs treat it as a host
captured on disk), so nothing but the root's own files decides what runs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vgpuadm.host.root import HostRoot
from vgpuadm.host.sysfs import SIM_MARKER

PF = "0000:18:00.0"
SMI = "usr/bin/nvidia-smi"
SRIOV = "usr/lib/nvidia/sriov-manage"


@pytest.fixture
def plain(sim_host: Callable[[str], Path], tmp_path: Path) -> tuple[Path, Path]:
    """(a plain h200-vendor-vfio root, a canary directory beside it holding `tool`, which records that it ran)."""
    root = sim_host("h200-vendor-vfio")
    os.remove(root / SIM_MARKER)
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "tool").write_text(f"#!/bin/sh\necho ran >> {canary / 'ran'}\nexit 0\n")
    os.chmod(canary / "tool", 0o755)
    return root, canary


def refused(tool: str, root: Path, problem: str) -> str:
    name = os.path.basename(tool)
    return (
        f"error: refusing to run /{tool} of host root {root}: it {problem}\n"
        f"hint: install {name} as a regular root-owned file inside the root (not a link out of it)\n"
    )


def link_out(root: Path, tool: str, target: Path) -> None:
    os.remove(root / tool)
    os.symlink(target, root / tool)


SMI_RUN = ["mig", "status"]  # reads nvidia-smi
SRIOV_RUN = ["-c", "test:///default", "sriov", "disable", PF]  # runs sriov-manage -d


@pytest.mark.process
@pytest.mark.parametrize(("tool", "argv"), [(SMI, SMI_RUN), (SRIOV, SRIOV_RUN)], ids=["nvidia-smi", "sriov-manage"])
def test_a_tool_linked_out_of_the_root_is_not_run(
    plain: tuple[Path, Path], cli: Callable[..., Any], tool: str, argv: list[str]
) -> None:
    root, canary = plain
    link_out(root, tool, canary / "tool")
    r = cli("--root", str(root), *argv)
    assert (r.code, r.out, r.err) == (
        6,
        "",
        refused(tool, root, f"resolves to {canary / 'tool'}, outside the host root"),
    )
    assert not (canary / "ran").exists()


def test_a_tool_in_a_directory_linked_out_of_the_root_is_not_run(
    plain: tuple[Path, Path], cli: Callable[..., Any]
) -> None:
    root, canary = plain
    os.rename(canary / "tool", canary / "nvidia-smi")
    os.remove(root / SMI)
    os.rmdir(root / "usr/bin")
    os.symlink(canary, root / "usr/bin")
    r = cli("--root", str(root), *SMI_RUN)
    assert (r.code, r.err) == (6, refused(SMI, root, f"resolves to {canary / 'nvidia-smi'}, outside the host root"))
    assert not (canary / "ran").exists()


@pytest.mark.process
@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda p: os.chown(p, 4242, 0), "is owned by uid 4242, not by root"),
        (lambda p: os.chmod(p, 0o775), "is writable by group or others"),
        (lambda p: os.chmod(p, 0o757), "is writable by group or others"),
    ],
    ids=["other-owner", "group-writable", "world-writable"],
)
@pytest.mark.parametrize(("tool", "argv"), [(SMI, SMI_RUN), (SRIOV, SRIOV_RUN)], ids=["nvidia-smi", "sriov-manage"])
def test_a_tool_another_user_could_change_is_not_run(
    plain: tuple[Path, Path], cli: Callable[..., Any], tool: str, argv: list[str], change: Any, problem: str
) -> None:
    root, canary = plain
    os.remove(root / tool)
    os.rename(canary / "tool", root / tool)
    change(root / tool)
    r = cli("--root", str(root), *argv)
    assert (r.code, r.out, r.err) == (6, "", refused(tool, root, problem))
    assert not (canary / "ran").exists()


def test_a_tool_that_is_not_a_regular_file_is_not_run(plain: tuple[Path, Path], cli: Callable[..., Any]) -> None:
    root, _ = plain
    os.remove(root / SMI)
    os.mkfifo(root / SMI, 0o755)
    r = cli("--root", str(root), *SMI_RUN)
    assert (r.code, r.out, r.err) == (6, "", refused(SMI, root, "is not a regular file"))


def test_a_link_that_stays_inside_the_root_is_used(plain: tuple[Path, Path]) -> None:
    root, _ = plain
    (root / "usr/sbin").mkdir(exist_ok=True)
    os.rename(root / SMI, root / "usr/sbin/nvidia-smi")
    os.symlink("../sbin/nvidia-smi", root / SMI)
    assert HostRoot(str(root)).executable("/" + SMI) == str(root / "usr/sbin/nvidia-smi")
    assert HostRoot(str(root)).executable("/usr/bin/none") is None
