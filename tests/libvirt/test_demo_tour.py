"""`vgpuadm demo` as a newcomer types it: the guided tour on a simulated mixed host, exact output (golden file
tests/golden/demo/tour.txt, the root shown as <DIR>; regenerate with VGPUADM_UPDATE_GOLDENS=1), re-runnable into
the same --dir, no temp dir left behind, --keep keeps the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.goldens import golden
from tests.libvirt.embedded_host import _env

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "demo" / "tour.txt"


def _demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", "demo", *args], capture_output=True, text=True,
                          env=_env(env), timeout=600, check=False)  # fmt: skip


def test_demo_tour_output_is_exact_and_reruns_into_the_same_dir(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    first = _demo("--dir", str(root))
    assert (first.returncode, first.stderr) == (0, "")
    text = first.stdout.replace(str(root), "<DIR>")
    assert text == golden(GOLDEN, text)
    assert "GRID P4-1Q) on a Tesla P4 (0000:03:00.0)" in text
    again = _demo("--dir", str(root))
    assert (again.returncode, again.stdout) == (0, first.stdout), again.stderr
    assert (root / "sys").is_dir()  # --dir keeps the host to look around in


def test_demo_leaves_no_temp_dir_unless_keep(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gone = _demo("--json", env={"TMPDIR": str(tmp)})
    assert gone.returncode == 0, gone.stderr
    doc = json.loads(gone.stdout)
    assert (doc["kept"], os.listdir(tmp)) == (False, [])
    assert [s["command"].split(" ", 3)[-1] for s in doc["steps"]][:2] == ["gpus", "create --type nvidia-63 --vm web01"]
    kept = _demo("--keep", env={"TMPDIR": str(tmp)})
    assert kept.returncode == 0, kept.stderr
    [left] = os.listdir(tmp)
    assert left.startswith("vgpuadm-demo-") and (tmp / left / "sys").is_dir()
    assert f"the demo host is {tmp / left}; look around:" in kept.stdout


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me\n")
    r = _demo("--dir", str(tmp_path))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"error: {tmp_path} is not empty\n"
                        "hint: give a new or empty directory, or one a demo made\n")  # fmt: skip
    assert os.listdir(tmp_path) == ["x"]
