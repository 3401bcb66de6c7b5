"""`mdevctl export` writes /etc/mdevctl.d through the executor (one Plan of managed-file steps: lock,
journal, undo), and a definition's parent and UUID are checked before any path is built; the path stays under
<root>/etc/mdevctl.d."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import vgpuadm.io.mdevctl as mdevctl_io
from tests.conftest import Result
from vgpuadm.errors import HostIOError, UsageError, VgpuadmError
from vgpuadm.executor import JOURNAL, read_journal
from vgpuadm.io.mdevctl import Definition, definition, write_definition
from vgpuadm.steps import MDEVCTL_DEFINITION, Plan, WriteManagedFile

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
PARENT = "0000:01:00.0"


def _create(cli: Callable[..., Result], root: Path, uuid: str) -> None:
    res = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--uuid", uuid)
    assert res.code == 0, res.err


def test_export_output_is_unchanged(sim_host: Callable[[str], Path], cli: Callable[..., Result]) -> None:
    root = sim_host("p4")
    _create(cli, root, U1)
    _create(cli, root, U2)
    res = cli("--root", str(root), "mdevctl", "export", "--from-host")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"wrote {root}/etc/mdevctl.d/{PARENT}/{U1} (nvidia-63, start=auto)",
        f"wrote {root}/etc/mdevctl.d/{PARENT}/{U2} (nvidia-63, start=auto)",
    ]
    (root / f"etc/mdevctl.d/{PARENT}/{U2}").unlink()
    assert cli("--root", str(root), "mdevctl", "export", "--from-host").out.splitlines() == [
        f"unchanged {root}/etc/mdevctl.d/{PARENT}/{U1} (nvidia-63, start=auto)",
        f"wrote {root}/etc/mdevctl.d/{PARENT}/{U2} (nvidia-63, start=auto)",
    ]
    assert not (root / JOURNAL).exists()


def test_export_is_one_journaled_plan_rolled_back_on_failure(
    sim_host: Callable[[str], Path], cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = sim_host("p4")
    _create(cli, root, U1)
    _create(cli, root, U2)
    journals: list[object] = []
    real_write = mdevctl_io.write_file

    def write(r: str, parent: str, uuid: str, text: str) -> None:
        journals.append(read_journal(r))
        if uuid == U2:
            raise HostIOError(f"writing /etc/mdevctl.d/{parent}/{uuid} failed: No space left on device")
        real_write(r, parent, uuid, text)

    monkeypatch.setattr(mdevctl_io, "write_file", write)
    res = cli("--root", str(root), "mdevctl", "export", "--from-host")
    assert res.code != 0
    assert f"step 2/2 write mdevctl definition /etc/mdevctl.d/{PARENT}/{U2} failed" in res.err
    assert all(j is not None for j in journals)  # each write ran under the journal
    assert not (root / f"etc/mdevctl.d/{PARENT}/{U1}").exists()  # step 1 undone
    assert not (root / JOURNAL).exists()


def test_step_round_trips_through_the_journal() -> None:
    plan = Plan.of([WriteManagedFile(MDEVCTL_DEFINITION, f"/etc/mdevctl.d/{PARENT}/{U1}", "{}", None),
                    WriteManagedFile(MDEVCTL_DEFINITION, f"/etc/mdevctl.d/{PARENT}/{U2}", "{}", "x")], "")  # fmt: skip
    assert Plan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    ("parent", "uuid"),
    [("../../etc", U1), ("..", U1), (".hidden", U1), ("a/b", U1), (PARENT, "../../../passwd"), (PARENT, "x")],
)
def test_parent_and_uuid_grammar_is_checked_first(tmp_path: Path, parent: str, uuid: str) -> None:
    with pytest.raises(UsageError):
        write_definition(str(tmp_path), Definition(parent, uuid, "nvidia-63"))
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_symlinks_out_of_mdevctl_d_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "etc/mdevctl.d"
    base.mkdir(parents=True)
    (base / PARENT).symlink_to(outside)
    with pytest.raises(
        HostIOError,
        match=rf"^refusing to read /etc/mdevctl.d/{PARENT}/{U1}: /etc/mdevctl.d/{PARENT} is a symlink, not a directory$",
    ):
        write_definition(str(tmp_path), definition(PARENT, U1, "nvidia-63"))
    assert list(outside.iterdir()) == []
    (base / "mtty").mkdir()
    (base / "mtty" / U1).symlink_to(outside / "victim")
    with pytest.raises(VgpuadmError, match="symlink"):
        write_definition(str(tmp_path), definition("mtty", U1, "mtty-2"))
    assert list(outside.iterdir()) == []
