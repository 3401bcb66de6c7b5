"""The executor's state is private: directories it creates under <root>/run and <root>/var/lib/vgpuadm are 0700,
its files 0600 whatever the umask, and a symlink planted where it writes a file is refused, never followed."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpuadm.errors import UnsafeError, VgpuadmError
from vgpuadm.executor import JOURNAL, ExecContext, execute, write_state
from vgpuadm.host import root as files
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.steps import Plan, RecordDrivers

PLAN = Plan.of([RecordDrivers((("0000:65:00.0", "nvidia"),))], "remember")


@pytest.fixture
def umask0() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _ctx(root: Path) -> ExecContext:
    (root / "sys").mkdir(exist_ok=True)
    return ExecContext(Sysfs(str(root)), str(root))


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_state_is_private_whatever_the_umask(tmp_path: Path, umask0: None) -> None:
    seen: dict[str, int] = {}
    execute(PLAN, _ctx(tmp_path), progress=lambda i, n, d: seen.update(journal=_mode(tmp_path / JOURNAL)))
    assert seen == {"journal": 0o600}
    assert _mode(tmp_path / "run") == 0o700
    assert _mode(tmp_path / "var/lib/vgpuadm") == 0o700
    for name in ("run/vgpuadm/lock", "run/vgpuadm/lock.owner", "var/lib/vgpuadm/drivers.json"):
        assert _mode(tmp_path / name) == 0o600, name
    assert not list((tmp_path / "var/lib/vgpuadm").glob("*.tmp"))


def test_existing_directories_are_left_alone(tmp_path: Path, umask0: None) -> None:
    (tmp_path / "run").mkdir(mode=0o755)
    execute(PLAN, _ctx(tmp_path))
    assert _mode(tmp_path / "run") == 0o755  # a real host's /run


def test_a_link_planted_where_the_temp_file_goes_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp name is unguessable (host/root._temp_name); pinned here so that a link can sit exactly there."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    state = tmp_path / "var/lib/vgpuadm"
    state.mkdir(parents=True)
    monkeypatch.setattr(files, "_temp_name", lambda name: f".{name}.planted.tmp")
    (state / ".journal.json.planted.tmp").symlink_to(victim)
    with pytest.raises(VgpuadmError) as info:
        execute(PLAN, _ctx(tmp_path))
    assert info.value.message == (
        "step 1/1 remember original drivers (0000:65:00.0=nvidia) failed: File exists: .journal.json.planted.tmp"
    )
    assert victim.read_text() == "keep"
    assert (state / ".journal.json.planted.tmp").is_symlink()
    assert not (state / "drivers.json").exists()


def test_planted_lock_owner_symlink_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "run/vgpuadm").mkdir(parents=True, mode=0o700)
    (tmp_path / "run/vgpuadm/lock.owner").symlink_to(victim)
    with pytest.raises(UnsafeError, match=r"^refusing to follow the symlink at /run/vgpuadm/lock.owner$"):
        execute(PLAN, _ctx(tmp_path))
    assert victim.read_text() == "keep"
    assert not (tmp_path / "var/lib/vgpuadm/drivers.json").exists()


def test_temp_files_a_crashed_run_left_stop_nothing(tmp_path: Path, umask0: None) -> None:
    state = tmp_path / "var/lib/vgpuadm"
    state.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (state / f"drivers.json.{os.getpid()}.tmp").write_text("stale")  # an older vgpuadm's temp name
    (state / f"journal.json.{os.getpid()}.tmp").symlink_to(victim)
    (state / ".drivers.json.vgpuadm.0123456789abcdef.tmp").write_text("stale")
    execute(PLAN, _ctx(tmp_path))
    assert (state / "drivers.json").read_text() == '{\n "0000:65:00.0": "nvidia"\n}\n'
    assert _mode(state / "drivers.json") == 0o600
    assert victim.read_text() == "keep"


def test_the_lock_lives_in_a_private_directory_others_cannot_reach(tmp_path: Path) -> None:
    """Issue #20's lock denial of service: flock works on a read-only descriptor, so anyone who can open the lock
    file can hold it. The lock is in run/vgpuadm/ (0700): a user holding an older vgpuadm's 0644 run/vgpuadm.lock
    stalls nothing, a loose run/vgpuadm/ of ours is made 0700, and one owned by another user is refused."""
    (tmp_path / "run").mkdir(mode=0o755)
    old = tmp_path / "run/vgpuadm.lock"
    old.write_text("")
    os.chmod(old, 0o644)
    (tmp_path / "run/vgpuadm").mkdir(mode=0o755)
    os.chmod(tmp_path / "run/vgpuadm", 0o755)
    with open(old) as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another user's hold on the old lock
        execute(PLAN, _ctx(tmp_path))  # does not wait for it
    assert (_mode(tmp_path / "run/vgpuadm"), _mode(tmp_path / "run/vgpuadm/lock")) == (0o700, 0o600)
    os.chown(tmp_path / "run/vgpuadm", 1000, 1000)
    with pytest.raises(UnsafeError, match=r"^/run/vgpuadm is owned by uid 1000, not by this user$"):
        execute(PLAN, _ctx(tmp_path))


def test_state_is_never_written_through_a_link_or_into_a_fifo_above_it(tmp_path: Path) -> None:
    """write_state (the one writer, confined below any root but `/`): whatever the readers checked before, the
    write itself follows no link at any directory component and creates nothing in place of a FIFO."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "var").symlink_to(outside)
    with pytest.raises(UnsafeError, match=r"^refusing to follow the symlink at /var$"):
        write_state(str(root), str(root / "var/lib/vgpuadm/drivers.json"), {})
    (root / "var").unlink()
    (root / "var").mkdir()
    os.mkfifo(root / "var/lib")
    with pytest.raises(UnsafeError, match=r"^refusing /var/lib: it is a FIFO, not a directory$"):
        write_state(str(root), str(root / "var/lib/vgpuadm/drivers.json"), {})
    assert list(outside.iterdir()) == []
    os.unlink(root / "var/lib")
    write_state(str(root), str(root / "var/lib/vgpuadm/drivers.json"), {"0000:65:00.0": "nvidia"})
    assert (root / "var/lib/vgpuadm/drivers.json").read_text() == '{\n "0000:65:00.0": "nvidia"\n}\n'
    assert [_mode(root / p) for p in ("var/lib", "var/lib/vgpuadm", "var/lib/vgpuadm/drivers.json")] == [
        0o700,
        0o700,
        0o600,
    ]
