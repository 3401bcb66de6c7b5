"""#35's udev rule: `vgpuadm udev install|uninstall|status` writes /etc/udev/rules.d/61-vgpuadm.rules (0644, the
text of templates/udev/ with each RUN naming the vgpuadm being run) through the executor, idempotent, and removes
only its own file; udev is told to reload when the root is this host's. `udev run` debounces: the first event for a
GPU or mdev parent hands one run off, the others while it is pending are dropped; the run restores and logs its
outcome to the system log, as `restore --syslog` does.

Stand-ins, each because nothing real can run here: the system log (this machine has no syslog daemon; `syslog.syslog`
is recorded — the kernel lane reads the real /dev/log), the hand-off (a real one starts a detached process; the kernel
lane's udevd does it for real) and udevadm (no udevd here: a script that records its arguments)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import syslog
import time
from pathlib import Path

import pytest

from vgpuadm.cli import udevrun as cli_udevrun
from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.errors import UsageError
from vgpuadm.host.root import HostRoot
from vgpuadm.io import udevfile
from vgpuadm.ops import udev, udevrun
from vgpuadm.ops.unit import vgpuadm_command
from vgpuadm.sim.profiles import build

RULE = "etc/udev/rules.d/61-vgpuadm.rules"
REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Console(out=out, err=err))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """What goes to the system log: (priority, message)."""
    lines: list[tuple[int, str]] = []
    monkeypatch.setattr(syslog, "syslog", lambda priority, message: lines.append((priority, message)))
    monkeypatch.setattr(syslog, "openlog", lambda *args: None)
    return lines


def test_install_writes_the_rule_once_then_nothing_to_do(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    code, out, err = cli("--root", str(root), "udev", "install", "--dry-run")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "would install /etc/udev/rules.d/61-vgpuadm.rules:",
        "  step 1/1 write udev rule /etc/udev/rules.d/61-vgpuadm.rules",
    ]
    assert not (root / RULE).exists()

    code, out, err = cli("--root", str(root), "udev", "install")
    command = " ".join([*vgpuadm_command(), "--root", str(root)])
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"wrote {root}/{RULE}",
        f"it runs: {command} udev run --parent NAME | --gpu ADDR",
        f"udev not reloaded: the root is {root}, not this host's /",
    ]
    path = root / RULE
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    template = (REPO / "templates/udev/61-vgpuadm.rules").read_text()
    assert path.read_text() == template.replace("@VGPUADM@", command)
    assert [line for line in path.read_text().splitlines() if not line.startswith("#")] == [
        f'ACTION=="change", ENV{{MDEV_STATE}}=="registered", RUN+="{command} udev run --parent $kernel"',
        f'ACTION=="bind", SUBSYSTEM=="pci", ENV{{DRIVER}}!="vfio-pci", TEST=="sriov_totalvfs", '
        f'RUN+="{command} udev run --gpu $kernel"',
        f'ACTION=="bind", SUBSYSTEM=="pci", ENV{{DRIVER}}=="nvidia", TEST=="physfn", '
        f'RUN+="{command} udev run --gpu $kernel"',
    ]
    assert not (root / "var/lib/vgpuadm/journal.json").exists()

    text = path.read_text()
    assert cli("--root", str(root), "udev", "install") == (
        0,
        f"nothing to do: {root}/{RULE} is installed and current\n",
        "",
    )
    assert path.read_text() == text
    code, out, _ = cli("--root", str(root), "udev", "install", "--json")
    doc = json.loads(out)
    assert (code, doc["changed"], doc["installed"], doc["current"], doc["steps"], doc["reload"]) == (
        0, False, True, True, [], "")  # fmt: skip
    assert cli("--root", str(root), "udev", "status") == (0, f"{root}/{RULE}: installed, runs {command} udev run\n", "")

    assert cli("--root", str(root), "udev", "uninstall") == (
        0, f"removed {root}/{RULE}\nudev not reloaded: the root is {root}, not this host's /\n", "")  # fmt: skip
    assert not path.exists()
    assert cli("--root", str(root), "udev", "uninstall") == (0, f"nothing to do: {root}/{RULE} is not installed\n", "")
    assert cli("--root", str(root), "udev", "status") == (
        0, f"{root}/{RULE}: not installed (vgpuadm udev install writes it)\n", "")  # fmt: skip


def test_a_rule_file_vgpuadm_did_not_write_is_never_overwritten_or_removed(tmp_path: Path) -> None:
    path = tmp_path / RULE
    path.parent.mkdir(parents=True)
    path.write_text('ACTION=="add", RUN+="/usr/local/bin/mine"\n')
    code, out, err = cli("--root", str(tmp_path), "udev", "install")
    assert (code, out) == (5, "")
    assert err.splitlines() == [
        "error: /etc/udev/rules.d/61-vgpuadm.rules is not vgpuadm's (it does not start with '# vgpuadm udev rule:')",
        "hint: move it away (or merge it by hand), then run `vgpuadm udev install` again",
    ]
    assert cli("--root", str(tmp_path), "udev", "uninstall") == (
        0, f"nothing to do: {path} is not vgpuadm's: left alone\n", "")  # fmt: skip
    assert cli("--root", str(tmp_path), "udev", "status") == (
        0, f"{path}: not vgpuadm's (vgpuadm udev install refuses to overwrite it)\n", "")  # fmt: skip
    assert path.read_text() == 'ACTION=="add", RUN+="/usr/local/bin/mine"\n'


def test_the_rule_names_only_commands_udev_runs_as_written() -> None:
    """udev splits RUN at spaces and substitutes $ and %: such a path is refused, not written broken."""
    with pytest.raises(UsageError) as e:
        udevfile.render(["/opt/my tools/vgpuadm"])
    assert e.value.message == "'/opt/my tools/vgpuadm' cannot be written into a udev rule's RUN"
    with pytest.raises(UsageError) as e:
        udevfile.render(["/opt/$HOME/vgpuadm"])
    assert e.value.message == "'/opt/$HOME/vgpuadm' cannot be written into a udev rule's RUN"
    with pytest.raises(UsageError) as e:
        udevfile.render(["vgpuadm"])
    assert (e.value.message, e.value.hint) == ("vgpuadm is not an absolute path", "udev runs programs without a PATH")


@pytest.mark.process
def test_install_on_this_host_reloads_udev_or_says_why_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reload on `/` itself (only reload_rules: the rule is not written to this machine's /etc)."""
    calls = tmp_path / "calls"
    udevadm = tmp_path / "udevadm"
    udevadm.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    udevadm.chmod(0o755)
    monkeypatch.setattr(udev, "UDEVADM", (str(tmp_path / "absent"), str(udevadm)))
    assert udev.reload_rules(HostRoot("/")) == f"udev reloaded its rules ({udevadm} control --reload)"
    assert calls.read_text() == "control --reload\n"
    udevadm.write_text("#!/bin/sh\necho 'Failed to send reload request: No such file or directory' >&2\nexit 1\n")
    assert udev.reload_rules(HostRoot("/")) == (
        f"udev not reloaded: {udevadm} control --reload: Failed to send reload request: No such file or directory "
        "(udevd reads the rule when it starts)"
    )
    monkeypatch.setattr(udev, "UDEVADM", (str(tmp_path / "absent"),))
    assert udev.reload_rules(HostRoot("/")) == (
        "udev not reloaded: udevadm is not installed (udevd reads the rule when it starts)"
    )


# --- udev run: the debounce and the run -------------------------------------------------------------------------


def test_two_events_for_one_device_hand_off_one_run(tmp_path: Path) -> None:
    started: list[list[str]] = []

    def spawn(argv):
        started.append(list(argv))
        return "detached"

    t = udevrun.target(str(tmp_path), "parent", "mtty")
    assert udevrun.trigger(str(tmp_path), t, ["run", "1"], spawn) == (
        "udev: mdev parent mtty appeared again: re-converging it in 2 s (detached)"
    )
    assert udevrun.trigger(str(tmp_path), t, ["run", "2"], spawn) == (
        "udev: mdev parent mtty: a run is already pending; this event is dropped"
    )
    assert started == [["run", "1"]]
    pending = tmp_path / "run/vgpuadm/udev"
    assert [p.name for p in pending.iterdir()] == ["mtty"]
    assert stat.S_IMODE(pending.stat().st_mode) == 0o700
    assert stat.S_IMODE((pending / "mtty").stat().st_mode) == 0o600
    other = udevrun.target(str(tmp_path), "gpu", "0000:65:00.0")  # another device: its own run
    assert udevrun.trigger(str(tmp_path), other, ["run", "3"], spawn).startswith("udev: GPU 0000:65:00.0 appeared")
    udevrun.release(str(tmp_path), t)  # the run is over: the next event hands off a run again
    assert udevrun.trigger(str(tmp_path), t, ["run", "4"], spawn).endswith("re-converging it in 2 s (detached)")
    assert started == [["run", "1"], ["run", "3"], ["run", "4"]]


def test_a_pending_file_a_dead_run_left_holds_events_back_only_for_a_while(tmp_path: Path) -> None:
    t = udevrun.target(str(tmp_path), "parent", "mdpy")
    assert udevrun.claim(str(tmp_path), t)
    old = time.time() - udevrun.STALE_S - 1
    os.utime(tmp_path / "run/vgpuadm/udev/mdpy", (old, old))
    assert udevrun.claim(str(tmp_path), t, now=time.time())
    assert not udevrun.claim(str(tmp_path), t)


def test_under_systemd_the_run_is_a_transient_service_after_libvirt() -> None:
    env = {"PYTHONPATH": "/src/vgpuadm", "HOME": "/root", "PATH": "/usr/bin"}
    run_ = ["/usr/bin/vgpuadm", "udev", "run", "--gpu", "0000:65:00.0", "--worker"]
    ordering = ["--property=After=vgpuadm-restore.service", "--property=After=libvirtd.service",
                "--property=After=virtqemud.service"]  # fmt: skip
    assert udevrun.systemd_run_argv("/usr/bin/systemd-run", run_, env) == [
        "/usr/bin/systemd-run", "--no-block", "--quiet", "--collect",
        "--description=vgpuadm: restore after a udev event", *ordering, "--setenv=PYTHONPATH=/src/vgpuadm", *run_,
    ]  # fmt: skip


def test_a_vf_names_its_gpu_and_bad_names_are_refused(tmp_path: Path) -> None:
    devices = tmp_path / "sys/bus/pci/devices"
    (devices / "0000:65:00.4").mkdir(parents=True)
    (devices / "0000:65:00.4/physfn").symlink_to("../0000:65:00.0")
    assert udevrun.target(str(tmp_path), "gpu", "0000:65:00.4") == udevrun.Target("gpu", "0000:65:00.0")
    assert udevrun.target(str(tmp_path), "gpu", "0000:66:00.0") == udevrun.Target("gpu", "0000:66:00.0")
    for kind, name, message in (("gpu", "65:00.0", "'65:00.0' is not a PCI address"),
                                ("parent", "../etc", "'../etc' is not an mdev parent name"),
                                ("parent", "", "'' is not an mdev parent name")):  # fmt: skip
        with pytest.raises(UsageError) as e:
            udevrun.target(str(tmp_path), kind, name)
        assert e.value.message == message


def test_udev_run_answers_through_the_system_log_only(tmp_path: Path, logged: list[tuple[int, str]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The trigger as udevd runs it (the fast path), twice: one hand-off of the run, nothing on stdout or stderr."""
    started: list[list[str]] = []
    monkeypatch.setattr(udevrun, "hand_off", lambda argv: started.append(list(argv)) or "detached")
    for _ in range(2):
        assert cli("--root", str(tmp_path), "udev", "run", "--parent", "mtty") == (0, "", "")
    assert started == [[*cli_udevrun._self_command(), "--root", str(tmp_path), "udev", "run", "--parent", "mtty",
                        "--worker"]]  # fmt: skip
    assert logged == [
        (syslog.LOG_INFO, "udev: mdev parent mtty appeared again: re-converging it in 2 s (detached)"),
        (syslog.LOG_INFO, "udev: mdev parent mtty: a run is already pending; this event is dropped"),
    ]
    logged.clear()
    assert cli("--root", str(tmp_path), "udev", "run", "--parent", "a/b") == (
        2,
        "",
        "error: 'a/b' is not an mdev parent name\nhint: the udev rule passes $kernel, e.g. mtty\n",
    )  # and stderr
    assert logged == [(syslog.LOG_ERR, "error: 'a/b' is not an mdev parent name (hint: the udev rule passes $kernel, "
                                       "e.g. mtty)")]  # fmt: skip


SYSLOG_SHIM = """import json, os, syslog
def _log(*args):
    priority, message = args if len(args) == 2 else (syslog.LOG_INFO, args[0])
    with open(os.environ["VGPUADM_TEST_SYSLOG"], "a") as f:
        f.write(json.dumps([priority, message]) + "\\n")
syslog.syslog, syslog.openlog = _log, lambda *args, **kwargs: None
"""


@pytest.mark.libvirt
def test_the_run_restores_logs_nothing_to_restore_and_frees_the_device(tmp_path: Path) -> None:
    """The worker in its own process, as the hand-off starts it (libvirt's embedded driver serves one root per
    process: in this test process another test's root may hold it). The process's system log is recorded by a
    sitecustomize that replaces syslog.syslog (the same stand-in as the `logged` fixture's)."""
    root = tmp_path / "h"
    build("kernel-samples", str(root))
    t = udevrun.target(str(root), "parent", "mtty")
    assert udevrun.claim(str(root), t)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SYSLOG_SHIM)
    log = tmp_path / "syslog.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{shim}:{REPO}", "VGPUADM_TEST_SYSLOG": str(log)}
    r = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "udev", "run", "--parent", "mtty",
                        "--worker"], capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert cli_udevrun.scope("parent", "mtty") == {"parents": ("mtty",)}
    assert [tuple(json.loads(line)) for line in log.read_text().splitlines()] == [
        (syslog.LOG_INFO, "udev: mdev parent mtty: restoring its recorded devices"),
        (syslog.LOG_INFO, "nothing to restore: all 0 recorded device(s) on parent mtty are in place"),
    ]
    assert list((root / "run/vgpuadm/udev").iterdir()) == []  # the next event hands off a run again


def test_restore_syslog_prints_nothing_and_logs_the_outcome(tmp_path: Path, logged: list[tuple[int, str]]) -> None:
    root = tmp_path / "h"
    build("kernel-samples", str(root))
    (tmp_path / "domains").mkdir()
    assert cli("--root", str(root), "restore", "--syslog", "--domain-xml-dir", str(tmp_path / "domains")) == (0, "", "")
    assert logged == [(syslog.LOG_INFO, "nothing to restore: all 0 recorded device(s) are in place")]
    logged.clear()
    code, out, err = cli("--root", str(root), "restore", "--syslog", "--timeout=-1")
    assert (code, out) == (2, "") and err.startswith("error: --timeout -1 is not")  # an error: on stderr too
    assert [p for p, _ in logged] == [syslog.LOG_ERR] and logged[0][1].startswith("error: ")


@pytest.mark.process
def test_udev_run_takes_the_fast_path(tmp_path: Path) -> None:
    """udevd waits for it: it never loads typer (a process, to see its own imports)."""
    code = (
        "import sys, syslog\n"
        "syslog.syslog = lambda *a: None\n"
        "from vgpuadm.cli.app import run\n"
        "from vgpuadm.ops import udevrun\n"
        "udevrun.hand_off = lambda argv: 'detached'\n"
        f"assert run(['--root', {str(tmp_path)!r}, 'udev', 'run', '--gpu', '0000:01:00.0']) == 0\n"
        "print(sorted(m for m in ('typer', 'click', 'rich', 'libvirt', 'vgpuadm.ops.declarative') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "[]\n", "")


@pytest.mark.process
def test_restore_syslog_tells_a_wait_for_the_lock_in_the_log_too(tmp_path: Path, logged: list[tuple[int, str]]) -> None:
    """Another vgpuadm (a process of its own) holds the host lock for a moment: the wait is logged, not printed."""
    root = tmp_path / "h"
    build("kernel-samples", str(root))
    (tmp_path / "domains").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom vgpuadm import api\n"
         f"with api.host_lock({str(root)!r}):\n    print('held', flush=True)\n    time.sleep(2)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        args = (
            "--root",
            str(root),
            "--wait",
            "60",
            "restore",
            "--syslog",
            "--domain-xml-dir",
            str(tmp_path / "domains"),
        )
        assert cli(*args) == (0, "", "")
    finally:
        holder.wait(30)
    assert [p for p, _ in logged] == [syslog.LOG_WARNING, syslog.LOG_INFO]
    assert logged[0][1].startswith(f"warning: waiting for pid {holder.pid} ") and logged[0][1].endswith(
        "(up to 60 s; --no-wait fails at once)"
    )
    assert logged[1][1] == "nothing to restore: all 0 recorded device(s) are in place"
