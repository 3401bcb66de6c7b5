"""`--dry-run` and `--json` on every changing verb, as the README says: apply (`--dry-run` is `--check`), restore,
recover, reconcile, mdevctl export and import. A dry run changes nothing (the simulated tree, the journal and the
files stay byte for byte) and, where it only reads, needs no root."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result
from tests.domains import domain, save
from vgpuadm import api
from vgpuadm.executor import JOURNAL
from vgpuadm.model import Allocation
from vgpuadm.schemas import validate
from vgpuadm.sim.treestate import tree_state
from vgpuadm.virt.xml import metadata_xml

VERBS = [["apply"], ["restore"], ["recover"], ["reconcile"], ["mdevctl", "export"], ["mdevctl", "import"], ["adopt"]]


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_every_changing_verb_takes_dry_run_and_json(verb: list[str]) -> None:
    """Read from the command tree `vgpuadm --help` renders."""
    import typer.main

    from vgpuadm.cli.app import build_app

    command = typer.main.get_command(build_app())
    for word in verb:
        command = command.commands[word]
    options = {o for p in command.params for o in p.opts}
    assert {"--dry-run", "--json"} <= options


def _crashed(cli: Callable[..., Result], root: Path) -> str:
    """A `mdev create --count 2` that died after its first step: a journal and one mdev are left."""
    os.environ["VGPUADM_TEST_CRASH_AFTER_STEP"] = "1"
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child dies in the executor's crash hook
            cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", "--count", "2")
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    finally:
        del os.environ["VGPUADM_TEST_CRASH_AFTER_STEP"]
    assert os.waitstatus_to_exitcode(status) == 99
    (uuid,) = os.listdir(root / "sys/bus/mdev/devices")
    return uuid


def _subprocess(root: Path, *args: str) -> Result:
    """A CLI process of its own: reconcile opens libvirt's embedded driver, one root per process."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), *args], capture_output=True, text=True,
                       timeout=120, check=False, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    return Result(r.returncode, r.stdout, r.stderr)


@pytest.mark.process
def test_recover_and_reconcile_dry_run_change_nothing(
    sim_host: Callable[[str], Path], cli: Callable[..., Result]
) -> None:
    root = sim_host("p4")
    uuid = _crashed(cli, root)
    before, journal = tree_state(root), (root / JOURNAL).read_bytes()
    undo = f"would roll back: create mdev {uuid} of type nvidia-63 on 0000:01:00.0"
    r = cli("--root", str(root), "recover", "--dry-run")
    assert (r.code, r.out, r.err) == (0, undo + "\n", "")
    r = cli("--root", str(root), "recover", "--dry-run", "--json")
    doc = json.loads(r.out)
    validate("change", doc)
    assert doc == {"changed": False, "dry_run": True, "summary": "recover an interrupted change",
                   "steps": [f"step 1/1 {undo}"], "devices": []}  # fmt: skip
    r = _subprocess(root, "reconcile", "--fix", "--dry-run")
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [
        f"journal: {undo}",
        f"would remove: mdev {uuid} (nvidia-63 on 0000:01:00.0) is owned by no domain",
    ]
    r = _subprocess(root, "reconcile", "--fix", "--dry-run", "--json")
    doc = json.loads(r.out)
    validate("reconcile", doc)
    assert (doc["dry_run"], doc["recovered"], doc["fixed"]) == (
        True, [undo], [f"step 1/1 remove mdev {uuid} from 0000:01:00.0"])  # fmt: skip
    assert tree_state(root) == before and (root / JOURNAL).read_bytes() == journal
    r = cli("--root", str(root), "recover")
    assert r.out == f"rolled back: create mdev {uuid} of type nvidia-63 on 0000:01:00.0\n"


def test_mdevctl_export_and_import_dry_run(sim_host: Callable[[str], Path], cli: Callable[..., Result]) -> None:
    root = sim_host("p4")
    assert cli("--root", str(root), "mdev", "create", "--type", "nvidia-63").code == 0
    (uuid,) = os.listdir(root / "sys/bus/mdev/devices")
    path = f"/etc/mdevctl.d/0000:01:00.0/{uuid}"
    r = cli("--root", str(root), "mdevctl", "export", "--from-host", "--dry-run")
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [  # under a --root, the file itself is named (the JSON keeps the host path)
        f"would write {root}{path} (nvidia-63, start=auto)",
        "nothing was changed (--dry-run)",
    ]
    assert not (root / "etc/mdevctl.d").exists()
    r = cli("--root", str(root), "mdevctl", "export", "--from-host", "--json")
    doc = json.loads(r.out)
    validate("change", doc)
    assert doc == {"changed": True, "dry_run": False, "summary": "write mdevctl definitions",
                   "steps": [f"step 1/1 write mdevctl definition {path}"], "devices": [uuid]}  # fmt: skip
    assert cli("--root", str(root), "mdev", "remove", uuid).code == 0
    before = tree_state(root)
    create = f"step 1/1 create mdev {uuid} of type nvidia-63 on 0000:01:00.0"
    r = cli("--root", str(root), "mdevctl", "import", "--dry-run")
    assert (r.code, r.out.splitlines()) == (0, [create, "nothing was changed (--check)"])
    r = cli("--root", str(root), "mdevctl", "import", "--dry-run", "--json")
    doc = json.loads(r.out)
    validate("change", doc)
    assert doc == {"changed": False, "dry_run": True, "summary": "create mdevs from mdevctl definitions",
                   "steps": [create], "devices": []}  # fmt: skip
    assert tree_state(root) == before
    doc = json.loads(cli("--root", str(root), "mdevctl", "import", "--json").out)
    assert (doc["changed"], doc["devices"]) == (True, [uuid])


def test_restore_dry_run_after_a_reboot(sim_host: Callable[[str], Path], tmp_path: Path,
                                        cli: Callable[..., Result]) -> None:  # fmt: skip
    """Saved domain XML records one mdev per P4; after a reboot `restore --dry-run` names the mdevs it would
    make and changes nothing."""
    root = sim_host("p4")
    snap = api.discover(str(root))
    saved = tmp_path / "saved"
    saved.mkdir()
    parents = sorted(snap.mdev_parents)
    for n, parent in enumerate(parents):
        name, duuid, u = f"vm{n}", f"00000000-0000-4000-8000-{n:012d}", f"11111111-0000-4000-8000-{n:012d}"
        a = Allocation(name, "mdev", "nvidia-63", parent, u, domain_uuid=duuid, slot=0, extra={"display": "off"})
        save(saved, domain(name, duuid, metadata=metadata_xml([a], snap.host_key)))
    before = tree_state(root)
    args = ("--root", str(root), "restore", "--domain-xml-dir", str(saved), "--dry-run")
    r = cli(*args, "--json")
    assert (r.code, r.err) == (0, "")
    doc = json.loads(r.out)
    validate("restore", doc)
    planned = [f"vgpu: create mdev 11111111-0000-4000-8000-{n:012d} of type nvidia-63 on {p}"
               for n, p in enumerate(parents)]  # fmt: skip
    assert doc == {"devices": len(parents), "dry_run": True, "planned": planned, "done": [], "skipped": [],
                   "problems": [], "held": []}  # fmt: skip
    r = cli(*args)
    assert r.out.splitlines() == [
        *(f"vgpu: would {line.removeprefix('vgpu: ')}" for line in planned),
        "params: planned once the steps above are done",
        "vfio: planned once the steps above are done",
        f"would run {len(parents)} step(s) first for {len(parents)} recorded device(s); nothing was changed (--dry-run)",
    ]
    assert tree_state(root) == before and not (root / JOURNAL).exists()
