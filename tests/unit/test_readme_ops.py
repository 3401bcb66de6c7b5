"""The README section "Checking, capturing and documenting a host" runs as written: its first shell block in a
fresh directory (the `vgpuadm` of this tree first on PATH, HOME in that directory so that --install-completion
writes there), its `vagrant validate` block in the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Checking, capturing and documenting a host\n"


def _blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    assert SECTION in text
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", body, re.S)


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "VAGRANT_HOME": str(home / "vagrant"),
            "VAGRANT_DOTFILE_PATH": str(home / "dot"), "VAGRANT_CHECKPOINT_DISABLE": "1",
            "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}  # fmt: skip


def test_readme_section_runs_as_written(tmp_path: Path) -> None:
    commands, vagrant = _blocks()
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "pass  iommu " in r.stdout and "passed, " in r.stdout
    assert "imported a snapshot (" in r.stdout and "as a simulated host" in r.stdout
    assert "VGPUADM(8)" in r.stdout
    assert (tmp_path / ".bash_completions/vgpuadm.sh").exists()
    assert (tmp_path / "lab-copy/vgpuadm-simulated-host.json").exists()
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", vagrant], cwd=REPO, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert (r.returncode, r.stdout.strip()) == (0, "Vagrantfile validated successfully."), r.stderr
