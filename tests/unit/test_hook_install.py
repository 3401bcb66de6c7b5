"""`vgpuadm hook install|uninstall|status`: the qemu hook written under <root>/etc/libvirt/hooks through the executor
(0755, root-owned, atomic), as qemu.d/vgpuadm or — with --single-script — as the qemu script chaining the one that
was there (kept as qemu.vgpuadm-chained, put back by uninstall); idempotent; a file vgpuadm did not write is never
overwritten or removed. The scripts are run here with /bin/sh exactly as libvirt runs them (arguments, XML on
stdin)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vgpuadm import api
from vgpuadm.io import hookfile
from vgpuadm.virt.conn import library_version

HOOKS = "etc/libvirt/hooks"
REPO = Path(__file__).resolve().parent.parent.parent
LIBVIRT = ".".join(map(str, library_version()))  # Debian 12's is 9.0.0


def test_install_writes_qemu_d_once_0755_then_nothing_to_do(tmp_path: Path, cli) -> None:
    root = tmp_path / "root"
    root.mkdir()
    r = cli("--root", str(root), "hook", "install", "--dry-run")
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [
        "would install the vgpuadm qemu hook /etc/libvirt/hooks/qemu.d/vgpuadm:",
        "  step 1/1 write libvirt hook /etc/libvirt/hooks/qemu.d/vgpuadm",
    ]
    assert not (root / "etc").exists()
    r = cli("--root", str(root), "hook", "install")
    assert r.code == 0, r.err
    path = root / HOOKS / "qemu.d" / "vgpuadm"
    st = path.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o755, 0)
    assert stat.S_IMODE((root / HOOKS / "qemu.d").stat().st_mode) == 0o755
    command = f"{sys.executable} -m vgpuadm --root {root}"
    assert r.out.splitlines() == [
        f"wrote {root}/etc/libvirt/hooks/qemu.d/vgpuadm",
        f"why there: libvirt {LIBVIRT} runs every script in hooks/qemu.d/ (since 6.5.0)",
        f"it runs: {command} hook run DOMAIN OPERATION SUB-OPERATION -",
        "next: systemctl reload libvirtd (or virtqemud): libvirt looks for hook scripts when it starts and on reload",
    ]
    assert f'        printf \'%s\\n\' "$xml" | {command} hook run "$1" "$2" "$3" -\n' in path.read_text()
    r = cli("--root", str(root), "hook", "install")
    assert r.out == f"nothing to do: {root}/etc/libvirt/hooks/qemu.d/vgpuadm is installed and current\n"
    r = cli("--root", str(root), "hook", "status", "--json")
    doc = json.loads(r.out)
    assert (doc["installed"], doc["current"], doc["path"], doc["chained"]) == (
        True, True, "/etc/libvirt/hooks/qemu.d/vgpuadm", None)  # fmt: skip
    path.chmod(0o700)
    assert cli("--root", str(root), "hook", "status").out.endswith("differs from what this vgpuadm writes "
                                                                   "(vgpuadm hook install)\n")  # fmt: skip
    assert cli("--root", str(root), "hook", "install").out.startswith("wrote ")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    r = cli("--root", str(root), "hook", "uninstall")
    assert r.out.splitlines()[0] == f"removed {root}/etc/libvirt/hooks/qemu.d/vgpuadm" and not path.exists()
    r = cli("--root", str(root), "hook", "uninstall")
    assert r.out == f"nothing to do: {root}/etc/libvirt/hooks/qemu.d/vgpuadm is not installed\n"


def test_a_libvirt_older_than_6_5_gets_the_single_script_and_qemu_d_can_still_be_asked_for(tmp_path: Path, cli) -> None:
    """libvirt before 6.5.0 runs only hooks/qemu (libvirt.org/hooks.html): the form is chosen by the version found.
    An old libvirt cannot be installed here, so that version is passed to the Python API; the CLI runs the rest."""
    root = tmp_path / "root"
    root.mkdir()
    old = api.hook_install(str(root), dry_run=True, libvirt_version=(6, 0, 0))
    assert (old.path, old.why) == ("/etc/libvirt/hooks/qemu",
                                   "libvirt 6.0.0 predates hooks/qemu.d/ (6.5.0): the single hooks/qemu script, chaining "
                                   "one there")  # fmt: skip
    assert (
        api.hook_install(str(root), dry_run=True, libvirt_version=(6, 5, 0)).path == "/etc/libvirt/hooks/qemu.d/vgpuadm"
    )
    r = cli("--root", str(root), "hook", "install", "--qemu-d", "--json")
    doc = json.loads(r.out)
    assert (r.code, doc["path"], doc["why"]) == (0, "/etc/libvirt/hooks/qemu.d/vgpuadm", "")
    assert (root / HOOKS / "qemu.d" / "vgpuadm").is_file() and not (root / HOOKS / "qemu").exists()


def run_script(path: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(["/bin/sh", "-c", 'exec "$0" "$@"', str(path), *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120, check=False)  # fmt: skip


@pytest.mark.process
def test_single_script_chains_the_existing_qemu_hook_and_uninstall_puts_it_back(tmp_path: Path, cli) -> None:
    root = tmp_path / "root"
    hooks = root / HOOKS
    hooks.mkdir(parents=True)
    theirs = f'#!/bin/sh\necho "$@" >> {tmp_path}/log\ncat >> {tmp_path}/log\nexit 3\n'
    (hooks / "qemu").write_text(theirs)
    (hooks / "qemu").chmod(0o755)
    r = cli("--root", str(root), "hook", "install", "--single-script")
    assert r.code == 0, r.err
    assert r.out.splitlines()[:1] + r.out.splitlines()[2:3] == [
        f"wrote {root}/etc/libvirt/hooks/qemu",
        f"and then the script that was there before, kept as {root}/etc/libvirt/hooks/qemu.vgpuadm-chained",
    ]
    assert (hooks / "qemu.vgpuadm-chained").read_text() == theirs
    assert stat.S_IMODE((hooks / "qemu.vgpuadm-chained").stat().st_mode) == 0o755
    assert hookfile.is_ours((hooks / "qemu").read_text())
    # an operation vgpuadm leaves alone reaches the chained script with the same arguments and the same XML
    done = run_script(hooks / "qemu", "web01", "started", "begin", "-", stdin="<domain><name>web01</name></domain>")
    assert done.returncode == 3
    assert (tmp_path / "log").read_text() == "web01 started begin -\n<domain><name>web01</name></domain>\n"
    assert cli("--root", str(root), "hook", "install", "--single-script").out.startswith("nothing to do")
    status = json.loads(cli("--root", str(root), "hook", "status", "--json").out)
    assert (status["path"], status["chained"]) == ("/etc/libvirt/hooks/qemu",
                                                   "/etc/libvirt/hooks/qemu.vgpuadm-chained")  # fmt: skip
    r = cli("--root", str(root), "hook", "uninstall")
    assert r.code == 0, r.err
    assert r.out.splitlines()[:2] == [
        f"removed {root}/etc/libvirt/hooks/qemu",
        f"and put back the script it chained ({root}/etc/libvirt/hooks/qemu.vgpuadm-chained) as {root}/etc/libvirt/hooks/qemu",
    ]
    assert sorted(os.listdir(hooks)) == ["qemu"] and (hooks / "qemu").read_text() == theirs


CYCLE = (("prepare", "begin"), ("start", "begin"), ("started", "begin"), ("stopped", "end"), ("release", "end"))
PLAIN = "<domain><name>web01</name><devices/></domain>"
ON_DEMAND = (
    "<domain><name>web01</name><metadata><vgpuadm:vgpuadm xmlns:vgpuadm='x'><vgpuadm:device slot='0'>"
    '<vgpuadm:option name="on_demand" value="yes"/></vgpuadm:device></vgpuadm:vgpuadm></metadata></domain>'
)


@pytest.mark.process
@pytest.mark.parametrize("name", [hookfile.DIR_HOOK, hookfile.SCRIPT])
def test_the_hook_runs_vgpuadm_only_for_a_domain_with_on_demand_devices(tmp_path: Path, name: str) -> None:
    """A whole start and stop of a domain without on-demand devices costs the shell alone (vgpuadm, a Python
    interpreter, is never started); a domain whose XML records one gets vgpuadm at prepare/begin and release/end,
    with its arguments, the XML on stdin, and its exit code (a refused start stays refused)."""
    log = tmp_path / "log"
    fake = tmp_path / "vgpuadm"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\ncat >> {log}\nexit 4\n')
    fake.chmod(0o755)
    script = tmp_path / "hook"
    script.write_text(hookfile.render([str(fake)], name))
    script.chmod(0o755)
    for op, sub in CYCLE:
        assert run_script(script, "web01", op, sub, "-", stdin=PLAIN).returncode == 0
    assert not log.exists()
    codes = [run_script(script, "web01", op, sub, "-", stdin=ON_DEMAND).returncode for op, sub in CYCLE]
    assert codes == [4, 0, 0, 0, 4 if name == hookfile.DIR_HOOK else 0]  # the single script ignores a stop's failure
    assert (
        log.read_text() == f"hook run web01 prepare begin -\n{ON_DEMAND}\nhook run web01 release end -\n{ON_DEMAND}\n"
    )


def test_a_foreign_file_is_never_overwritten_or_removed(tmp_path: Path, cli) -> None:
    root = tmp_path / "root"
    hooks = root / HOOKS
    (hooks / "qemu.d").mkdir(parents=True)
    (hooks / "qemu.d" / "vgpuadm").write_text("#!/bin/sh\n# someone else's\n")
    (hooks / "qemu").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "qemu.vgpuadm-chained").write_text("#!/bin/sh\nexit 0\n")
    r = cli("--root", str(root), "hook", "install", "--single-script")
    assert r.code == 5 and r.err.splitlines()[0] == (
        "error: /etc/libvirt/hooks/qemu is not vgpuadm's and /etc/libvirt/hooks/qemu.vgpuadm-chained exists already"
    )
    r = cli("--root", str(root), "hook", "uninstall")
    assert r.out == f"nothing to do: {root}/etc/libvirt/hooks/qemu.d/vgpuadm is not installed\n"
    assert (hooks / "qemu.d" / "vgpuadm").read_text() == "#!/bin/sh\n# someone else's\n"


def test_a_symlinked_hooks_directory_is_refused(tmp_path: Path, cli) -> None:
    root = tmp_path / "root"
    (root / "etc" / "libvirt").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / HOOKS).symlink_to(tmp_path / "elsewhere")
    r = cli("--root", str(root), "hook", "install")
    assert r.code != 0 and "symlink" in r.err and os.listdir(tmp_path / "elsewhere") == []


def test_a_journal_naming_another_hook_file_is_refused(tmp_path: Path, cli, sim_host) -> None:
    """The journal is untrusted: a libvirt-hook managed-file step may only name vgpuadm's own three hook files."""
    root = sim_host("p4")
    path = root / "var/lib/vgpuadm/journal.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    step = {"kind": "write-managed-file", "file": "libvirt-hook", "path": "/etc/libvirt/hooks/../../../etc/shadow",
            "text": "x", "previous": None}  # fmt: skip
    path.write_text(json.dumps({"version": 1, "pid": 1, "state": "applying", "current": 0, "done": 0,
                                "plan": {"summary": "x", "steps": [step]}}))  # fmt: skip
    path.chmod(0o600)
    r = cli("--root", str(root), "recover")
    assert r.code == 6 and r.err.splitlines()[0] == (
        "error: refusing the journal /var/lib/vgpuadm/journal.json: step write-managed-file field path holds "
        "'/etc/libvirt/hooks/../../../etc/shadow', not a valid value")  # fmt: skip


def test_an_install_an_older_vgpuadm_left_interrupted_is_rolled_back_by_recover(cli, sim_host) -> None:
    """The journal the crash below leaves, as a vgpuadm before the one managed-file step wrote it (kinds
    write-hook-file, remove-hook-file): after an upgrade, `recover` still reads it and puts the directory back."""
    root = sim_host("p4")
    hooks = root / HOOKS
    hooks.mkdir(parents=True)
    (hooks / "qemu").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "qemu.vgpuadm-chained").write_text("#!/bin/sh\nexit 0\n")
    ours = hookfile.render(["/usr/bin/vgpuadm"], hookfile.SCRIPT)
    theirs = "#!/bin/sh\nexit 0\n"
    steps = [{"kind": "write-hook-file", "hook": "qemu.vgpuadm-chained", "text": theirs, "previous": None},
             {"kind": "write-hook-file", "hook": "qemu", "text": ours, "previous": theirs}]  # fmt: skip
    path = root / "var/lib/vgpuadm/journal.json"
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "pid": 1, "state": "applying", "current": 1, "done": 1,
                                "plan": {"summary": "install the vgpuadm qemu hook", "steps": steps}}))  # fmt: skip
    path.chmod(0o600)
    r = cli("--root", str(root), "recover")
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines()[-2:] == [
        "rolled back: write libvirt hook /etc/libvirt/hooks/qemu",
        "rolled back: write libvirt hook /etc/libvirt/hooks/qemu.vgpuadm-chained",
    ]
    assert sorted(os.listdir(hooks)) == ["qemu"] and (hooks / "qemu").read_text() == "#!/bin/sh\nexit 0\n"
    assert not path.exists()


@pytest.mark.process
def test_an_install_interrupted_is_rolled_back_by_recover(cli, sim_host) -> None:
    """--single-script over an existing qemu script is two steps (keep the old one, write ours): a crash after the
    first leaves a journal, and `recover` puts the directory back as it was."""
    root = sim_host("p4")
    hooks = root / HOOKS
    hooks.mkdir(parents=True)
    (hooks / "qemu").write_text("#!/bin/sh\nexit 0\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "VGPUADM_TEST_CRASH_AFTER_STEP": "1"}
    crashed = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "hook", "install",
                              "--single-script"], env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert crashed.returncode != 0
    assert sorted(os.listdir(hooks)) == ["qemu", "qemu.vgpuadm-chained"]
    r = cli("--root", str(root), "recover")
    assert r.code == 0, r.err
    assert sorted(os.listdir(hooks)) == ["qemu"] and (hooks / "qemu").read_text() == "#!/bin/sh\nexit 0\n"
