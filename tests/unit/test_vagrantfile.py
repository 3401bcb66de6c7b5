"""The lab Vagrantfile passes `vagrant validate` with Debian's vagrant and vagrant-libvirt packages (installed by
scripts/install.sh): the provider's own config checks run, so a misspelt libvirt option fails — shown by
validating a copy with one. Nothing is skipped: without vagrant the test fails and says what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "Vagrantfile"


def _validate(directory: Path, home: Path) -> subprocess.CompletedProcess[str]:
    vagrant = shutil.which("vagrant")
    assert vagrant, "vagrant is missing: apt-get install vagrant vagrant-libvirt (scripts/install.sh does)"
    env = {**os.environ, "VAGRANT_HOME": str(home), "VAGRANT_DOTFILE_PATH": str(home / "dot"),
           "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_NO_COLOR": "1"}  # fmt: skip
    return subprocess.run([vagrant, "validate"], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.mark.process
def test_vagrant_validate_accepts_the_lab(tmp_path: Path) -> None:
    r = _validate(REPO, tmp_path / "home")
    assert (r.returncode, r.stdout.strip()) == (0, "Vagrantfile validated successfully."), r.stderr


@pytest.mark.process
def test_vagrant_validate_checks_the_libvirt_provider_for_real(tmp_path: Path) -> None:
    text = VAGRANTFILE.read_text()
    assert "v.cpus = 2\n" in text
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy/Vagrantfile").write_text(text.replace("v.cpus = 2\n", "v.cpus = 2\n      v.nested_virt = true\n"))
    r = _validate(tmp_path / "copy", tmp_path / "home")
    assert r.returncode == 1
    assert "Libvirt Provider:\n* The following settings shouldn't exist: nested_virt" in r.stderr


def test_the_lab_is_what_the_readme_promises() -> None:
    text = VAGRANTFILE.read_text()
    for needle in (
        'v.machine_type = "q35"',
        "v.nested = true",
        "<iommu model='intel'><driver intremap='on' caching_mode='on'/></iommu>",
        "intel_iommu=on",
        "vfio-pci mtty mdpy mbochs",
        "./scripts/install.sh",
    ):
        assert needle in text, needle
