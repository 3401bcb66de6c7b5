"""Fuzz targets for the link and FIFO surfaces (#31): snapshot archives and umockdev recordings whose members are
chains of relative links, FIFOs, hard links and files under them, imported with `sim import`; and host roots with
FIFOs or links out of the root planted where vgpuadm reads or writes its state and configuration files, under
the commands that read or write them.

Properties of every input: the import or command ends cleanly (success, or one `error:` line and an optional
`hint:` line; no traceback), within HANG seconds (a SIGALRM interrupts a blocked open(): a hang is a violation);
nothing outside the destination or root changes (a canary directory beside it keeps its tree hash, and nothing
else appears beside it); after a successful import every link in the destination resolves inside it; a refused
import leaves no destination behind."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import Tally, examples
from tests.fuzz.props import clean_error, clean_run, tree_hash
from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.errors import VgpuadmError
from vgpuadm.ops.snapshot import import_
from vgpuadm.sim.profiles import build

HANG = 20  # seconds; every import or command here takes well under one
NO_LIBVIRT = "qemu+unix:///system?socket=/nonexistent/vgpuadm-fuzz.sock"


class Hung(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: int = HANG) -> Iterator[None]:
    """Raise Hung in this thread after `seconds` (a blocked open() of a FIFO is interrupted by the signal)."""

    def alarm(_sig: int, _frame: Any) -> None:
        raise Hung

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def area(tmp_path: Path) -> Path:
    (tmp_path / "canary" / "d").mkdir(parents=True)
    (tmp_path / "canary" / "d" / "f").write_text("keep\n")
    (tmp_path / "canary" / "usr" / "bin").mkdir(parents=True)
    return tmp_path


def _links_inside(tally: Tally, top: Path, what: str) -> None:
    real_top = os.path.realpath(top)
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(here, name)
            if os.path.islink(path):
                resolved = os.path.realpath(path)
                if resolved != real_top and not resolved.startswith(real_top + os.sep):
                    raise tally.violation(f"{what} made a link out of its destination: {path} -> {resolved}")


def _check_import(tally: Tally, area: Path, source: Path, what: str) -> None:
    canary = tree_hash(str(area / "canary"))
    dest = area / "work" / "dest"
    try:
        with bounded():
            import_(str(source), str(dest))
        accepted = True
    except Hung:
        raise tally.violation(f"importing {what} hung") from None
    except VgpuadmError as exc:
        problem = clean_error(exc)
        if problem:
            raise tally.violation(f"importing {what}: {problem}") from exc
        accepted = False
    except Exception as exc:
        raise tally.violation(f"importing {what} raised {type(exc).__name__}: {exc}") from exc
    if tree_hash(str(area / "canary")) != canary or sorted(os.listdir(area)) != ["canary", "work"]:
        raise tally.violation(f"importing {what} wrote outside its destination")
    if sorted(os.listdir(area / "work")) != sorted([source.name] + (["dest"] if accepted else [])):
        raise tally.violation(f"importing {what} left {sorted(os.listdir(area / 'work'))}")
    if accepted:
        _links_inside(tally, dest, f"importing {what}")
        tally.ok()
    else:
        tally.error()


# -- snapshot archives -------------------------------------------------------------------------------------------

NAMES = ["sys", "sys/a", "sys/a/b", "sys/x", "sys/x/l1", "sys/l2", "usr", "usr/bin", "usr/bin/nvidia-smi", "usr/lib",
         "usr/lib/nvidia", "usr/lib/nvidia/sriov-manage", "usr/share", "usr/share/misc", "usr/share/misc/pci.ids",
         "etc", "etc/machine-id", "proc", "vgpuadm-snapshot", "vgpuadm-snapshot/nvidia-smi",
         "vgpuadm-snapshot/nvidia-smi/vgpu-s-v.txt", "vgpuadm-snapshot/nvidia-smi/q.txt",
         "vgpuadm-simulated-host.json", "sys/a/../..", "../canary/d/f", "/etc/x", "sys/./a"]  # fmt: skip
TARGETS = ["..", "../..", "../../..", ".", "a", "a/..", "a/../..", "x/l1/..", "l2/..", "sys", "sys/l2", "sys/x/l1/..",
           "/", "/etc", "b/../../..", "usr/bin", "../usr", "../sys/l2/..", "../../canary/d/f", "l1", "x/l1"]  # fmt: skip
KINDS = ["dir", "file", "file", "link", "link", "link", "fifo", "hardlink", "chardev"]


@pytest.fixture(scope="module")
def marker() -> bytes:
    """A simulated host's marker (its hardware model), so that some archives install the simulated tools."""
    with contextlib.ExitStack() as stack:
        top = Path(stack.enter_context(__import__("tempfile").TemporaryDirectory()))
        build("a100-mdev-vf", str(top / "h"))
        return (top / "h" / "vgpuadm-simulated-host.json").read_bytes()


@st.composite
def archives(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """(name, kind, link target) members; directories above the named ones are usually present too."""
    members = []
    for _ in range(draw(st.integers(1, 10))):
        name = draw(st.sampled_from(NAMES))
        kind = draw(st.sampled_from(KINDS))
        if draw(st.booleans()):
            parts = name.split("/")
            members += [("/".join(parts[:i]), "dir", "") for i in range(1, len(parts))]
        members.append((name, kind, draw(st.sampled_from(TARGETS))))
    return members


def _write_archive(path: Path, members: list[tuple[str, str, str]], marker: bytes) -> None:
    seen = set()
    with tarfile.open(path, "w:gz") as tf:
        for name, kind, target in members:
            if (name, kind) in seen:
                continue
            seen.add((name, kind))
            info = tarfile.TarInfo(name)
            data = b""
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "file":
                data = marker if name == "vgpuadm-simulated-host.json" else b"text\n"
                info.size, info.mode = len(data), 0o644
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, target
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, target
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            else:
                info.type = tarfile.CHRTYPE
            tf.addfile(info, io.BytesIO(data) if data else None)


@examples(60)
@given(members=archives())
def test_snapshot_archives(tally: Tally, area: Path, marker: bytes, members: list[tuple[str, str, str]]) -> None:
    (area / "work").mkdir()
    try:
        archive = area / "work" / "in.tar.gz"
        _write_archive(archive, members, marker)
        _check_import(tally, area, archive, f"the archive {members!r}")
    finally:
        shutil.rmtree(area / "work")


# -- umockdev recordings with chains of links ----------------------------------------------------------------------

DEVS = ["/devices/pci0000:00/0000:00:03.0/0000:08:00.0", "/devices/pci0000:00/0000:00:03.0/0000:08:00.0/c",
        "/devices/pci0000:00/0000:00:03.0/0000:08:00.1", "/devices/pci0000:00/0000:00:03.0"]  # fmt: skip
LINK_NAMES = ["a", "b", "c", "driver", "iommu_group", "mdev_type", "physfn", "x/y"]
LINK_TARGETS = ["../../../..", "a/..", "b/..", "b/../canary", "c/../..", "../0000:08:00.1", "..", ".", "a",
                "../../../../bus/pci/drivers/nvidia", "a/../../canary/d", "b/../../..", "c", "../c/.."]  # fmt: skip
ATTR_NAMES = ["a", "b", "c", "c/x", "b/x", "a/x", "driver/new_id", "vendor", "x/y/z"]


@st.composite
def recordings(draw: st.DrawFn) -> str:
    blocks = []
    for _ in range(draw(st.integers(1, 4))):
        lines = [f"P: {draw(st.sampled_from(DEVS))}"]
        if draw(st.booleans()):
            lines.append(f"E: SUBSYSTEM={draw(st.sampled_from(['pci', 'mdev', 'net']))}")
        for _ in range(draw(st.integers(0, 4))):
            if draw(st.booleans()):
                lines.append(f"L: {draw(st.sampled_from(LINK_NAMES))}={draw(st.sampled_from(LINK_TARGETS))}")
            else:
                lines.append(f"A: {draw(st.sampled_from(ATTR_NAMES))}=owned\\n")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


@examples(60)
@given(text=recordings())
def test_recordings_with_chains_of_links(tally: Tally, area: Path, text: str) -> None:
    (area / "work").mkdir()
    try:
        recording = area / "work" / "in.umockdev"
        recording.write_text(text)
        _check_import(tally, area, recording, f"the recording {text!r}")
    finally:
        shutil.rmtree(area / "work")


# -- FIFOs and links planted in a host root ----------------------------------------------------------------------

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
PLANTS = ["run/vgpuadm/lock.owner", "run/vgpuadm/lock", "run/vgpuadm", "var/lib/vgpuadm/journal.json",
          "var/lib/vgpuadm/drivers.json", "var/lib/vgpuadm", "etc/machine-id", "etc/hostname", "proc/cmdline",
          "etc/libvirt/hooks/qemu.d/vgpuadm", "etc/libvirt/hooks/qemu", "etc/libvirt/hooks/qemu.vgpuadm-chained",
          "etc/libvirt/hooks/qemu.d", "etc/libvirt/hooks", "etc/libvirt", "etc/systemd/system/vgpuadm-restore.service",
          "etc/systemd/system", "etc/systemd", f"etc/mdevctl.d/0000:01:00.0/{U1}", "etc/mdevctl.d/0000:01:00.0",
          "etc/mdevctl.d", "etc"]  # fmt: skip
PLANT_KINDS = ["fifo", "fifo", "link-file", "link-dir"]
COMMANDS = [("hook", "status"), ("hook", "install"), ("hook", "uninstall"), ("unit", "install"), ("unit", "status"),
            ("mdevctl", "import"), ("mdevctl", "export", "--from-host"), ("recover",), ("gpus",), ("snapshot",),
            ("mdev", "create", "--type", "nvidia-63", "--uuid", U1), ("doctor",)]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fifo-pristine") / "host"
    build("p4", str(root))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    return root


def _plant(root: Path, rel: str, kind: str, area: Path) -> None:
    where = root / rel
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_dir() and not where.is_symlink():
        shutil.rmtree(where)
    elif where.exists() or where.is_symlink():
        where.unlink()
    if kind == "fifo":
        os.mkfifo(where, 0o600)
    elif kind == "link-file":
        where.symlink_to(area / "canary" / "d" / "f")
    else:
        where.symlink_to(area / "canary" / "d")


@examples(40)
@given(plants=st.lists(st.tuples(st.sampled_from(PLANTS), st.sampled_from(PLANT_KINDS)), min_size=1, max_size=3),
       command=st.sampled_from(COMMANDS))  # fmt: skip
def test_fifos_and_links_in_a_root(
    tally: Tally, area: Path, pristine: Path, monkeypatch: pytest.MonkeyPatch, plants: list[tuple[str, str]],
    command: tuple[str, ...],
) -> None:  # fmt: skip
    monkeypatch.setenv("LIBVIRT_DEFAULT_URI", NO_LIBVIRT)
    work = area / "work"
    root = work / "host"
    shutil.copytree(pristine, root, symlinks=True)
    try:
        for rel, kind in plants:
            with contextlib.suppress(OSError):  # under an earlier plant (a FIFO or link where a directory was)
                _plant(root, rel, kind, area)
        canary = tree_hash(str(area / "canary"))
        args = [*command, str(work / "s.tar.gz")] if command == ("snapshot",) else list(command)
        out, err = io.StringIO(), io.StringIO()
        try:
            with bounded():
                code = run(["--root", str(root), "--no-wait", *args], Console(out, err))
        except Hung:
            raise tally.violation(f"vgpuadm {' '.join(args)} hung with {plants!r}") from None
        problem = clean_run(code, out.getvalue(), err.getvalue())
        if problem and not (command == ("doctor",) and code == 1 and "Traceback" not in err.getvalue()):
            raise tally.violation(f"vgpuadm {' '.join(args)} with {plants!r}: {problem}")
        if tree_hash(str(area / "canary")) != canary or sorted(os.listdir(area)) != ["canary", "work"]:
            raise tally.violation(f"vgpuadm {' '.join(args)} with {plants!r} wrote outside the root")
        if code == 0:
            tally.ok()
        else:
            tally.error()
    finally:
        shutil.rmtree(work)
