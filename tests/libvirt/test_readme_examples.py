"""Every fenced example of README.md, run as written: each ```sh block by bash (`set -e`: any failing command fails
the test), each ```yaml block as what it is (the plan is applied; the host_vars snippet is the lab's own file), on a
fresh simulated `mixed` host (VGPUADM_ROOT) whose embedded libvirt has the domains the examples name, defined by
the README's own commands (the `for vm in …; done` loop of "Give a VM a GPU"), so its plan runs on the VMs the
README shows how to define. The "Give a VM a GPU" block itself builds its own host and defines them, as a new user
does, right after the two first commands. `vgpuadm` on PATH is this tree's CLI; `.venv`, `bench/`, `ansible/`, `inventory/` are
the repository's, in a scratch working directory.

What does not run here is listed in NOT_HERE with where it does run; a block that is neither run nor listed fails
the test, so a new README example cannot go unchecked. The only stand-in is `systemctl` (no systemd in the test
container): a stub on PATH that records its arguments, which the test then checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.libvirt.embedded_host import _env

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAIN_JOB = "## Give a VM a GPU\n"
# Commands of README blocks that do not run inside this test, and where they run instead.
NOT_HERE = {
    "./scripts/install.sh": "CI's install job runs it on a fresh Debian 12 (it uses apt-get)",
    "./scripts/test.sh": "is the suite this test belongs to",
    "sudo cp -rT cockpit /usr/share/cockpit/vgpuadm": "tests/cockpit/test_cockpit_page.py makes the same copy into the "
    "data directory of the cockpit-bridge it starts (not this machine's /usr/share)",
}
# Whole blocks that do not run here (by their first command), and where they run instead.
BLOCKS_ELSEWHERE = {
    "# install the collection where Ansible finds it": "tests/ansible/test_playbooks.py runs these playbooks with "
    "real ansible-core against the shared libvirtd (its lab roots and domains would collide with other tests here)",
    "sudo cp -rT cockpit": "tests/cockpit/test_cockpit_page.py installs the page the same way and drives it",
    "vgpuadm hook install": "tests/libvirt/test_on_demand_embedded.py runs every line of it",
    "vgpuadm sim build mixed lab": "tests/unit/test_readme_ops.py runs it as written",
    "vagrant validate": "tests/unit/test_readme_ops.py runs it in the repository",
}


def blocks() -> list[tuple[int, str, str]]:
    """(line, language, text) of every fenced block."""
    out = []
    for m in re.finditer(r"^```(\w+)\n(.*?)^```$", README.read_text(), re.M | re.S):
        out.append((README.read_text()[: m.start()].count("\n") + 1, m[1], m[2]))
    return out


def _elsewhere(text: str) -> bool:
    return any(text.splitlines()[0].startswith(k) for k in BLOCKS_ELSEWHERE)


def here() -> list[tuple[int, str, str]]:
    """The blocks this test runs: all but those BLOCKS_ELSEWHERE names (not collected at all, so never "skipped")."""
    return [b for b in blocks() if not _elsewhere(b[2])]


def _ids() -> list[str]:
    return [f"line{line}-{lang}" for line, lang, _ in here()]


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "host"
    work = tmp_path / "work"
    work.mkdir()
    for name in ("bench", "ansible", "inventory", "scripts", "Vagrantfile"):
        (work / name).symlink_to(REPO / name)
    (work / ".venv").symlink_to(sys.prefix)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vgpuadm").write_text(f'#!/bin/sh\nexec {sys.executable} -m vgpuadm "$@"\n')
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/systemctl.calls\n')
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    made = {"root": root, "work": work, "bin": bin_dir, "tmp": tmp_path}
    defined = _run(made, f"vgpuadm sim build mixed {root} >/dev/null\n{define_loop()}")
    assert defined.returncode == 0, defined.stderr
    return made


def main_job() -> str:
    """The one ```sh block of "Give a VM a GPU"."""
    body = README.read_text().split(MAIN_JOB, 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", body, re.S)
    return block


def define_loop() -> str:
    """The README's commands that define its VMs: the `for vm in …` loop through its `done`."""
    lines = main_job().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("for vm in "))
    return "\n".join(lines[start : lines.index("done", start) + 1])


def _run(host: dict[str, Path], script: str) -> subprocess.CompletedProcess[str]:
    env = _env({"VGPUADM_ROOT": str(host["root"]), "PATH": f"{host['bin']}:{os.environ['PATH']}",
                "HOME": str(host["tmp"])})  # fmt: skip
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=host["work"], capture_output=True,
                          text=True, env=env, timeout=900, check=False)  # fmt: skip


def _runnable(text: str) -> str:
    lines = []
    for line in text.splitlines():
        for command in NOT_HERE:
            line = line.replace(f"{command} && ", "").replace(command, "true")
        lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize(("line", "lang", "text"), here(), ids=_ids())
def test_readme_example_runs_as_written(line: int, lang: str, text: str, host: dict[str, Path]) -> None:
    if lang == "sh":
        r = _run(host, _runnable(text))
        assert r.returncode == 0, f"README.md:{line}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        if "systemctl" in text:  # the stub saw exactly the block's systemctl commands
            calls = [seg.strip().removeprefix("systemctl ") for line in text.splitlines()
                     for seg in line.split("#")[0].split("&&") if seg.strip().startswith("systemctl ")]  # fmt: skip
            assert (host["tmp"] / "systemctl.calls").read_text() == "".join(f"{c}\n" for c in calls)
        return
    assert lang == "yaml", f"README.md:{line}: a ```{lang} block: teach this test how to run it"
    doc = YAML(typ="safe", pure=True).load(text)
    if "vms" in doc:  # the plan: apply it, then it is idempotent
        (host["work"] / "plan.yaml").write_text(text)
        done = _run(host, "vgpuadm apply -f plan.yaml")
        assert done.returncode == 0, f"README.md:{line}: {done.stderr}"
        again = _run(host, "vgpuadm apply -f plan.yaml")
        assert again.stdout == "nothing to do: the host matches the plan\n", again.stderr
        return
    assert list(doc) == ["vgpu_allocations"], f"README.md:{line}: an unknown kind of YAML example"
    lab = [a for f in sorted((REPO / "inventory/host_vars").glob("*.yml"))
           for a in YAML(typ="safe", pure=True).load(f.read_text()).get("vgpu_allocations", [])]  # fmt: skip
    assert all(a in lab for a in doc["vgpu_allocations"]), f"README.md:{line}: not the lab's host_vars"


def test_every_block_is_run_or_listed() -> None:
    found = blocks()
    assert len(found) >= 9
    for line, lang, text in found:
        assert lang in ("sh", "yaml"), f"README.md:{line}: ```{lang}"
        assert text.strip(), f"README.md:{line}: empty block"
    firsts = [text.splitlines()[0] for _, _, text in found]
    for key in BLOCKS_ELSEWHERE:  # no stale entry: each names a block the README has
        assert any(first.startswith(key) for first in firsts), key


def test_the_main_job_comes_right_after_the_two_first_commands() -> None:
    """The README opens with exactly two commands, then "Give a VM a GPU": define VMs, create, show, destroy,
    passthrough, release."""
    (first, *_), text = blocks(), README.read_text()
    assert first[2] == "./scripts/install.sh && .venv/bin/vgpuadm demo\n./scripts/test.sh\n"
    headings = [line for line in text.split("```", 2)[2].splitlines() if line.startswith("## ")]
    assert headings[0] + "\n" == MAIN_JOB
    verbs = [line.split()[1] for line in main_job().splitlines() if line.startswith("vgpuadm ")]
    assert verbs == ["sim", "create", "show", "destroy", "passthrough", "release"]
    assert 'virsh -c "qemu:///embed?root=$VGPUADM_ROOT/var/lib/vgpuadm/libvirt" define' in define_loop()


def test_the_lab_prefixes_its_vm_names_by_default() -> None:
    """The Ansible lab shares the system libvirtd: its VMs are `lab-<name>` unless vgpuadm_vm_prefix says otherwise,
    and the README's lab defines them under those names and says so."""
    group = YAML(typ="safe", pure=True).load((REPO / "inventory/group_vars/gpu_hosts.yml").read_text())
    assert group["vgpuadm_vm_prefix"] == "lab-"
    (lab,) = [text for _, _, text in blocks() if text.startswith("# install the collection where Ansible")]
    assert "<name>lab-%s</name>" in lab
    assert "`vgpuadm_vm_prefix` (`lab-` by default" in README.read_text()
