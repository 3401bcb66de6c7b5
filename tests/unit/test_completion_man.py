"""Shell completion (bash, zsh, fish) as the shells ask for it — the completion environment variables typer's
scripts set, on a real `python -m vgpuadm` process — with type, GPU and VM values from a simulated root; and the
man page generated from the CLI, rendered by man(1)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vgpuadm.sim.profiles import build

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


def _vgpuadm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-m", "vgpuadm", *args], capture_output=True, text=True, env=full,
                          check=False)  # fmt: skip


def _bash(words: str) -> list[str]:
    r = _vgpuadm(_VGPUADM_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
    assert (r.returncode, r.stderr) == (0, "")
    return [v for v in r.stdout.splitlines() if v]  # nothing to offer prints one empty line


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("completion") / "mixed"
    build("mixed", str(root))
    etc = root / "var/lib/vgpuadm/libvirt/etc/qemu"  # where the embedded libvirt keeps defined domains
    etc.mkdir(parents=True)
    for vm in ("web01", "web02", "db01"):
        (etc / f"{vm}.xml").write_text("<domain/>\n")
    return root


def test_bash_completes_types_from_the_root(mixed: Path) -> None:
    assert _bash(f"vgpuadm --root {mixed} types --type nvidia-46") == ["nvidia-468", "nvidia-469"]
    assert _bash(f"vgpuadm --root {mixed} create --vm web01 --type P4-8") == ["P4-8A", "P4-8C", "P4-8Q"]


def test_bash_completes_gpus_and_address_arguments(mixed: Path) -> None:
    assert _bash(f"vgpuadm --root {mixed} devices --gpu 0000:0") == ["0000:01:00.0", "0000:03:00.0"]
    assert _bash(f"vgpuadm --root {mixed} vfio bind 0000:6") == ["0000:65:00.0"]


def test_zsh_and_fish_complete_vm_names(mixed: Path) -> None:
    r = _vgpuadm(_VGPUADM_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS=f"vgpuadm --root {mixed} destroy --vm web")
    assert (r.returncode, r.stdout) == (0, """_arguments '*: :(("web01"\n"web02"))'\n""")
    r = _vgpuadm(_VGPUADM_COMPLETE="complete_fish", _TYPER_COMPLETE_FISH_ACTION="get-args",
                 _TYPER_COMPLETE_ARGS=f"vgpuadm --root {mixed} create --vm ")  # fmt: skip
    assert (r.returncode, r.stdout.split()) == (0, ["db01", "web01", "web02"])


def test_completion_never_fails(tmp_path: Path) -> None:
    """A missing root, a root without libvirt, garbage: nothing offered, no error, exit 0."""
    assert _bash(f"vgpuadm --root {tmp_path}/nope types --type n") == []
    (tmp_path / "sys").mkdir()
    assert _bash(f"vgpuadm --root {tmp_path} create --vm w") == []
    (tmp_path / "sys/bus").write_text("not a directory")
    assert _bash(f"vgpuadm --root {tmp_path} devices --gpu 0") == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_a_script_for_each_shell(shell: str) -> None:
    r = _vgpuadm("--show-completion", shell)
    assert r.returncode == 0 and "_VGPUADM_COMPLETE" in r.stdout, r.stderr
    exe = shutil.which(shell)
    if shell == "bash":
        assert exe, "bash is always there"
        check = subprocess.run([exe, "-n"], input=r.stdout, capture_output=True, text=True, check=False)
        assert (check.returncode, check.stderr) == (0, "")


def test_install_completion_for_bash(tmp_path: Path) -> None:
    r = _vgpuadm("--install-completion", "bash", HOME=str(tmp_path))
    assert r.returncode == 0, r.stderr
    script = tmp_path / ".bash_completions/vgpuadm.sh"
    assert "_VGPUADM_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


def _all_commands() -> list[str]:
    """Every command path of the CLI's click tree, but the hidden ones (`udev run`, what the udev rule runs)."""
    import typer.main

    from vgpuadm.cli.app import build_app

    out, todo = [], [(["vgpuadm"], typer.main.get_command(build_app()))]
    while todo:
        path, command = todo.pop(0)
        for name, sub in getattr(command, "commands", {}).items():
            if getattr(sub, "hidden", False):
                continue
            out.append(" ".join([*path, name]))
            todo.append(([*path, name], sub))
    return out


def test_man_page_holds_every_command_and_option_and_renders() -> None:
    r = _vgpuadm("man")
    assert (r.returncode, r.stderr) == (0, "")
    page = r.stdout
    assert page.startswith(".TH VGPUADM 8 ")
    sections = re.findall(r'^\.SS "(.*)"$', page, re.M)
    assert sorted(s.replace("\\-", "-") for s in sections) == sorted(_all_commands())
    for flag in ("\\-\\-root", "\\-\\-install\\-completion", "\\-\\-json", "\\-\\-type", "\\-\\-vm"):
        assert f"\\fB{flag}" in page or f", {flag}" in page, flag
    man = shutil.which("man")
    if man is None:
        pytest.skip("man is not installed (apt-get install man-db)")
    page_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"vgpuadm-test-{os.getpid()}.8"
    page_file.write_text(page)
    try:
        shown = subprocess.run([man, "--warnings", "-l", str(page_file)], capture_output=True, text=True,
                               env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0"}, check=False)  # fmt: skip
    finally:
        page_file.unlink()
    assert (shown.returncode, shown.stderr) == (0, "")
    text = re.sub(".\x08", "", shown.stdout)  # man's overstrike bold/underline on a pipe
    assert "EXIT STATUS" in text and "   vgpuadm doctor\n" in text and "   vgpuadm sim import\n" in text
    assert max(len(line) for line in text.splitlines()) <= 80
