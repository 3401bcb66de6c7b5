"""Hardening: every hostile or mistaken input ends in one `error: …` line plus a `hint: …` line with a non-zero
exit, never a traceback or an internal error; nothing is created or written outside what the command owns."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.sim.profiles import build

NOBODY = 65534


def one_error(r, code: int | None = None) -> str:
    """The error line of a failed run (asserting the shape: error + optional hint, nothing else)."""
    assert r.code != 0, (r.out, r.err)
    if code is not None:
        assert r.code == code, r.err
    lines = r.err.splitlines()
    assert lines and lines[0].startswith("error: "), r.err
    assert len(lines) <= 2 and all(line.startswith("hint: ") for line in lines[1:]), r.err
    assert "internal error" not in r.err and "Traceback" not in r.err
    return lines[0]


# --- 1. a changing command run without root -----------------------------------------------------------------------


@pytest.fixture
def public_root() -> Iterator[Path]:
    """A simulated host owned by root in a directory every user can traverse (tmp_path is 0700)."""
    top = tempfile.mkdtemp(prefix="vgpuadm-nobody-", dir="/tmp")
    os.chmod(top, 0o755)
    try:
        build("p4", f"{top}/h")
        yield Path(top) / "h"
    finally:
        shutil.rmtree(top)


def run_as_nobody(*args: str) -> tuple[int, str, str]:
    """Run the CLI in a forked child that dropped to uid/gid nobody; returns (code, out, err). The same command is
    run first as root on a throwaway copy of the host, so that every module it imports is loaded (nobody cannot
    read this interpreter's library directory)."""
    i = args.index("--root")
    with tempfile.TemporaryDirectory() as warm:
        build("p4", f"{warm}/h")
        run([*args[: i + 1], f"{warm}/h", *args[i + 2 :]], Console(io.StringIO(), io.StringIO()))
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out, err = io.StringIO(), io.StringIO()
            code = run(list(args), Console(out, err))
            os.write(wfd, json.dumps([code, out.getvalue(), err.getvalue()]).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        data = f.read()
    os.waitpid(pid, 0)
    code, out, err = json.loads(data)
    return code, out, err


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_changing_command_without_root_needs_root(public_root):
    code, _out, err = run_as_nobody("--root", str(public_root), "mdev", "create", "--type", "P4-1Q")
    assert code == 77, err
    assert err.splitlines() == [
        f"error: changing the host needs root (or write access to /) (host root {public_root})",
        "hint: rerun as root, e.g. with sudo; read-only commands and --dry-run need no root",
    ]
    assert not (public_root / "run").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_udev_install_without_root_needs_root(public_root):
    for verb in ("install", "uninstall"):
        code, out, err = run_as_nobody("--root", str(public_root), "udev", verb)
        assert (code, out) == (77, ""), err
        assert err.splitlines() == [
            f"error: changing the host needs root (or write access to /) (host root {public_root})",
            "hint: rerun as root, e.g. with sudo; read-only commands and --dry-run need no root",
        ]
    assert not (public_root / "etc/udev").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_read_command_and_dry_run_without_root_work(public_root):
    assert run_as_nobody("--root", str(public_root), "gpus", "--json")[0] == 0
    code, _out, err = run_as_nobody("--root", str(public_root), "mdev", "create", "--type", "P4-1Q", "--dry-run")
    assert code == 0, err


@pytest.mark.libvirt
@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_guest_dry_run_without_root_works(public_root):
    """`create --dry-run` only reads: no root needed, as the needs-root hint says (libvirt's in-process test
    driver, test:///default, stands in for a libvirtd the user may read)."""
    code, out, err = run_as_nobody("--root", str(public_root), "-c", "test:///default", "create", "--vm", "test",
                                   "--type", "P4-1Q", "--dry-run")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == "would give domain test 1 × nvidia-63:"
    assert not (public_root / "run").exists() and not (public_root / "var/lib/vgpuadm").exists()


@pytest.mark.process
@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_dry_runs_of_every_changing_verb_without_root_work(public_root):
    """apply/restore/reconcile/recover/mdevctl/hook/unit --dry-run only read: no root (test:///default stands in for
    libvirt)."""
    plan = public_root.parent / "plan.yaml"
    plan.write_text("version: 1\nvms:\n  test:\n    type: P4-1Q\n    count: 1\n")
    plan.chmod(0o644)
    c = ("-c", "test:///default")
    for args in (
        (*c, "apply", "-f", str(plan), "--dry-run"),
        (*c, "restore", "--dry-run"),
        (*c, "reconcile", "--dry-run"),
        ("recover", "--dry-run"),
        (*c, "mdevctl", "export", "--dry-run"),
        ("mdevctl", "import", "--dry-run"),
        ("hook", "install", "--qemu-d", "--dry-run"),
        ("hook", "uninstall", "--dry-run"),
        ("unit", "install", "--dry-run"),
        ("unit", "uninstall", "--dry-run"),
    ):
        code, _out, err = run_as_nobody("--root", str(public_root), *args)
        assert (code, err) == (0, ""), args
    assert not (public_root / "run").exists() and not (public_root / "var/lib/vgpuadm").exists()


@pytest.mark.process
@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_libvirt_permission_problem_is_not_answered_start_libvirtd(public_root, tmp_path):
    """A socket this user may not reach (EACCES: tmp_path is 0700 root) is a permission problem, not a daemon
    that is not running."""
    sock = f"{tmp_path}/libvirt-sock"
    uri = f"qemu:///system?socket={sock}"
    code, _out, err = run_as_nobody("--root", str(public_root), "-c", uri, "vms")
    assert code == 8
    assert err.splitlines() == [
        f"error: cannot connect to {uri}: Failed to connect socket to '{sock}': Permission denied",
        f"hint: this user may not use {uri}: rerun as root (sudo), or add the user to the libvirt group "
        "(polkit's org.libvirt.unix.manage)",
    ]


@pytest.mark.process
def test_libvirt_not_running_is_answered_start_libvirtd(tmp_path):
    """No daemon behind the socket: start it. libvirt's own error printing stays off stderr (the subprocess's
    real stderr holds vgpuadm's two lines and nothing else)."""
    import subprocess
    import sys

    build("p4", f"{tmp_path}/h")
    sock = f"{tmp_path}/no-daemon/libvirt-sock"
    uri = f"qemu:///system?socket={sock}"
    r = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", f"{tmp_path}/h", "-c", uri, "vms"],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert (r.returncode, r.stdout) == (8, "")
    assert r.stderr.splitlines() == [
        f"error: cannot connect to {uri}: Failed to connect socket to '{sock}': No such file or directory",
        "hint: start libvirtd (systemctl start libvirtd) or pick another URI with --connect",
    ]


@pytest.mark.process
def test_embedded_libvirt_that_cannot_start_says_why_in_two_lines(tmp_path):
    """libvirt's embedded driver failing at start (here `<embedded root>/lib` is a file, as a directory this user
    may not write would be) logs its own lines to stderr unless told not to; vgpuadm's error is the only output,
    and its hint is not "start libvirtd" (there is no daemon)."""
    import subprocess
    import sys

    root = tmp_path / "h"
    build("p4", str(root))
    embed = root / "var/lib/vgpuadm/libvirt"
    embed.mkdir(parents=True)
    (embed / "lib").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBVIRT_")}
    r = subprocess.run([sys.executable, "-m", "vgpuadm", "--root", str(root), "vms"], capture_output=True,
                       text=True, timeout=120, check=False, env=env)  # fmt: skip
    uri = f"qemu:///embed?root={embed}"
    assert (r.returncode, r.stdout) == (8, "")
    assert r.stderr.splitlines() == [
        f"error: cannot connect to {uri}: Failed to create lib dir {embed}/lib/qemu: Not a directory",
        f"hint: libvirt's embedded driver (no daemon) could not start under {embed}: this user must be able to "
        "create its directories there and in ~/.cache (or run as root); or pick a running libvirt with --connect",
    ]


# --- 2. --root validated before anything is created under it ------------------------------------------------------


def test_missing_root_of_a_changing_command_creates_nothing(cli, tmp_path):
    missing = tmp_path / "no" / "such" / "root"
    r = cli("--root", str(missing), "mdev", "create", "--type", "P4-1Q")
    assert one_error(r, 3) == f"error: host root {missing} does not exist"
    assert not (tmp_path / "no").exists()


def test_root_without_sys_of_a_changing_command_creates_no_lock(cli, tmp_path):
    r = cli("--root", str(tmp_path), "mdev", "create", "--type", "P4-1Q")
    assert one_error(r, 3) == f"error: host root {tmp_path} has no sys/ directory"
    assert list(tmp_path.iterdir()) == []


def test_a_changing_verb_checks_its_root_once(cli, sim_host, monkeypatch):
    """Preflight runs once per verb: `mdev create` checks that it can write the root when it takes the lock, not
    again when it executes its plan under that hold (it checked three times: the session, the lock, the lock again)."""
    import vgpuadm.executor as executor_mod
    import vgpuadm.ops.session as session_mod

    checked: list[str] = []
    real = executor_mod.check_writable
    for module in (executor_mod, session_mod):
        monkeypatch.setattr(module, "check_writable", lambda r: (checked.append(r), real(r))[1], raising=False)
    root = sim_host("p4")
    r = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63")
    assert r.code == 0, r.err
    assert checked == [str(root)]


@pytest.mark.parametrize("command", [("mdev", "create", "--type", "P4-1Q"), ("recover",), ("gpus",)])
def test_root_is_a_file(cli, tmp_path, command):
    (tmp_path / "file").write_text("")
    r = cli("--root", str(tmp_path / "file"), *command)
    assert one_error(r, 3) == f"error: host root {tmp_path / 'file'} is not a directory"


@pytest.mark.parametrize("command", [("mdev", "create", "--type", "P4-1Q"), ("gpus",), ("gpus", "--json")])
def test_empty_root_is_refused(cli, command):
    r = cli("--root", "", *command)
    assert one_error(r, 2) == "error: --root is empty"


@pytest.mark.parametrize("command", [("mdev", "create", "--type", "P4-1Q"), ("gpus",), ("gpus", "--json")])
def test_empty_vgpuadm_root_is_refused(cli, monkeypatch, command):
    monkeypatch.setenv("VGPUADM_ROOT", "")
    r = cli(*command)
    assert one_error(r, 2) == "error: VGPUADM_ROOT is set but empty"
    assert r.err.splitlines()[1] == "hint: unset it for this host (/), or set it to a host root"


def _bad_model(root: Path) -> None:
    marker = root / "vgpuadm-simulated-host.json"
    model = json.loads(marker.read_text())
    model["mdev_parents"]["0000:01:00.0"]["types"] = None
    marker.write_text(json.dumps(model))


USAGE_NOT_70 = {  # each ended in "internal error" (exit 70): now one usage error (exit 2) with a hint
    "snapshot-into-missing-directory": (
        lambda root, tmp: ("--root", str(root), "snapshot", f"{tmp}/missing/host.tar.gz"),
        "error: {tmp}/missing/host.tar.gz: directory {tmp}/missing does not exist",
    ),
    "non-utf8-argument": (
        lambda root, tmp: ("--root", str(root), "create", "--vm", "web\udcff01", "--type", "nvidia-63"),
        "error: argument b'web\\xff01' is not UTF-8 text",
    ),
    "sim-build-empty-directory": (
        lambda root, tmp: ("sim", "build", "p4", ""),
        "error: the directory for the simulated host is empty",
    ),
    "100000-digit-count-in-a-plan": (
        lambda root, tmp: (
            "--root",
            str(root),
            "apply",
            "--check",
            "-f",
            _write(tmp / "plan.yaml", "vms:\n  web01:\n    type: nvidia-63\n    count: " + "9" * 100_000 + "\n"),
        ),
        "error: plan.yaml:4: a number of 100000 characters",
    ),
    "malformed-simulated-host-model": (
        lambda root, tmp: (_bad_model(root), "--root", str(root), "mdev", "create", "--type", "nvidia-63")[1:],
        "error: step 1/1 create mdev {uuid} of type nvidia-63 on 0000:01:00.0 failed: {root}/vgpuadm-simulated-host"
        ".json: an mdev parent has no path or types",
    ),
}


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", USAGE_NOT_70)
def test_odd_input_is_a_usage_error_not_an_internal_one(cli, sim_host, tmp_path, name):
    root = sim_host("p4")
    make, expected = USAGE_NOT_70[name]
    r = cli(*make(root, tmp_path))
    error = one_error(r, 2)
    uuid = error.split("create mdev ")[-1].split(" ")[0]
    assert error == expected.format(tmp=tmp_path, root=root, uuid=uuid)


# --- 3. limits: counts, input files, timeouts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [("mdev", "create", "--type", "P4-1Q"), ("create", "--vm", "web01", "--type", "P4-1Q")]
)
def test_huge_count_is_refused_at_once(cli, sim_host, command):
    r = cli("--root", str(sim_host("p4")), *command, "--count", "10000000", "--dry-run")
    assert one_error(r, 2) == "error: --count 10000000 is more than vgpuadm places in one command (4096)"


def big_file(path: Path) -> str:
    with open(path, "wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse: 200 MB that costs no disk
    return str(path)


def fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


INPUTS = {
    "dev-zero": lambda _tmp: "/dev/zero",
    "fifo": lambda tmp: fifo(tmp / "in.fifo"),
    "directory": lambda tmp: str(tmp),
    "200MB": lambda tmp: big_file(tmp / "big.in"),
}


def refused(path: str) -> tuple[str, ...]:
    return (f"{path} is not a regular file", f"{path} is 209715200 bytes, over the")


@pytest.mark.parametrize("kind", INPUTS)
def test_apply_refuses_odd_plan_files(cli, sim_host, tmp_path, kind):
    path = INPUTS[kind](tmp_path)
    r = cli("--root", str(sim_host("p4")), "apply", "-f", path, "--check")
    line = one_error(r, 2)
    assert line.startswith(tuple(f"error: plan {m}" for m in refused(path))), line


@pytest.mark.parametrize("kind", INPUTS)
def test_inventory_merge_refuses_odd_inputs(cli, tmp_path, kind):
    path = INPUTS[kind](tmp_path)
    line = one_error(cli("inventory", "merge", path, "--format", "json"), 2)
    assert line.startswith(tuple(f"error: {m}" for m in refused(path))), line


@pytest.mark.parametrize("kind", INPUTS)
def test_import_umockdev_refuses_odd_recordings(cli, tmp_path, kind):
    path = INPUTS[kind](tmp_path)
    line = one_error(cli("sim", "import-umockdev", path, str(tmp_path / "root")), 2)
    assert line.startswith(tuple(f"error: {m}" for m in refused(path))), line
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "3601"])
def test_restore_refuses_odd_timeouts(cli, sim_host, value):
    r = cli("--root", str(sim_host("p4")), "restore", "--timeout", value)
    assert one_error(r, 2).startswith(f"error: --timeout {float(value):g} is not a number of seconds in (0, 3600]")


# --- 4. hostile plan files ----------------------------------------------------------------------------------------

BAD_PLANS = {
    "deep": ("vms: " + "[" * 5000 + "]" * 5000 + "\n", "deep.yaml:1: nested more than 32 levels deep"),
    "self-map": ("vms: &a\n  web01: *a\n", "self-map.yaml:2: alias *a refers to a node that contains it"),
    "self-seq": ("vms: &a [*a]\n", "self-seq.yaml:1: alias *a refers to a node that contains it"),
    "aliases": (
        "x: &x [1]\n" + "".join(f"y{i}: *x\n" for i in range(100)) + "vms: {}\n",
        "aliases.yaml:66: more than 64 aliases",
    ),
    "python-tag": (
        "vms:\n  web01: !!python/object/apply:os.system [id]\n",
        "python-tag.yaml:2: YAML tag !!python/object/apply:os.system is not allowed in a plan",
    ),
    "local-tag": ("vms: !mine {}\n", "local-tag.yaml:1: YAML tag !mine is not allowed in a plan"),
    "latin-1": ("vms:\n  caf\xe9: {type: nvidia-63}\n", "latin-1.yaml:2: not UTF-8 (byte 0xe9 at offset 10)"),
}


def _doubling(levels: int) -> str:
    """2^levels values from 2 × levels aliases (under the alias limit): each list holds the previous one twice."""
    return "x0: &a0 [1, 1]\n" + "".join(f"x{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, levels + 1))


EXPENSIVE_PLANS = {  # each took over 60 s even with --check; refused now, the work bounded (not only the counts)
    "doubling": (
        _doubling(30) + "vms: {web01: {type: nvidia-63}}\n",
        "doubling.yaml:14: the plan expands to more than 50000 values",
    ),
    "merge-keys": (
        "b: &b {"
        + ", ".join(f"k{i}: {i}" for i in range(2000))
        + "}\nvms:\n"
        + "".join(f"  vm{i}: {{<<: *b, type: nvidia-63}}\n" for i in range(60)),
        "merge-keys.yaml:14: the plan expands to more than 50000 values",
    ),
    "nested-merge-keys": (
        "m0: &m0 {a: 1, b: 2}\n"
        + "".join(f"m{i}: &m{i} {{<<: [*m{i - 1}], k: [*m{i - 1}, *m{i - 1}]}}\n" for i in range(1, 21))
        + "vms: {}\n",
        "nested-merge-keys.yaml:9: the plan expands to more than 50000 values",
    ),
    "100000-vms": (
        "vms:\n" + "".join(f"  vm{i}: {{type: nvidia-63}}\n" for i in range(100_000)),
        "100000-vms.yaml:12501: the plan expands to more than 50000 values",
    ),
    "1025-vms": (
        "vms:\n" + "".join(f"  vm{i}: {{type: nvidia-63}}\n" for i in range(1025)),
        "1025-vms.yaml:1: vms: 1025 VMs, more than 1024",
    ),
}


@pytest.mark.parametrize("name", EXPENSIVE_PLANS)
def test_expensive_plan_is_refused_within_seconds(cli, sim_host, tmp_path, name):
    text, message = EXPENSIVE_PLANS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    root = sim_host("p4")

    def too_slow(*_args):
        raise TimeoutError(f"apply -f {name}.yaml --check still runs after 15 s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(15)
    try:
        r = cli("--root", str(root), "apply", "-f", str(path), "--check")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert one_error(r, 2) == f"error: {message}"


@pytest.mark.parametrize("name", BAD_PLANS)
def test_hostile_plan_is_one_error_naming_the_file(cli, sim_host, tmp_path, name):
    text, message = BAD_PLANS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(text.encode("latin-1"))
    r = cli("--root", str(sim_host("p4")), "apply", "-f", str(path), "--check")
    assert one_error(r, 2).startswith(f"error: {message}"), r.err


# --- 5. user data in tables is text, never rich markup ------------------------------------------------------------


@pytest.mark.libvirt
def test_host_name_with_markup_prints_as_text(cli, sim_host):
    r = cli("--root", str(sim_host("p4")), "inventory", "--host", "[/x] [bold]b :smile:")
    assert r.code == 0, r.err
    assert "GPUs on [/x] [bold]b :smile:" in r.out


def test_terminal_escapes_in_host_data_print_escaped(cli, sim_host):
    """A sysfs type name (host data) holding ESC sequences that would retitle and recolor the terminal: the table
    shows them escaped, JSON as JSON escapes; no raw control character reaches stdout."""
    root = sim_host("p4")
    [name] = root.glob("sys/devices/pci0000:00/*/0000:01:00.0/mdev_supported_types/nvidia-63/name")
    name.write_bytes(b"GRID P4-1Q\x1b]0;pwned\x07\x1b[31m\n")
    r = cli("--root", str(root), "types")
    assert r.code == 0, r.err
    assert "GRID P4-1Q\\x1b]0;pwned\\x07\\x1b[31m" in r.out
    assert not any(c in r.out for c in "\x1b\x07")
    r = cli("--root", str(root), "types", "--json")
    assert "GRID P4-1Q\\u001b]0;pwned\\u0007\\u001b[31m" in r.out and "\x1b" not in r.out


def test_console_lines_keep_breaks_and_tabs_and_escape_other_controls():
    out = io.StringIO()
    Console(out=out).line("a\x1b[2Jb\nc\td\re\x9bf")
    assert out.getvalue() == "a\\x1b[2Jb\nc\td\\re\\x9bf\n"


@pytest.mark.libvirt
def test_vgpu_param_with_markup_prints_as_text(cli, sim_host):
    root = str(sim_host("p4"))
    r = cli("--root", root, "mdev", "create", "--type", "P4-1Q", "--param", "frame_rate_limiter=[/x]")
    assert r.code == 0, r.err
    r = cli("--root", root, "devices")
    assert r.code == 0, r.err
    assert "frame_rate_limiter=[/x]" in r.out, r.out


# --- 6. sim import-umockdev stays inside the target ---------------------------------------------------------------

DEV = "P: /devices/pci0000:00/0000:00:03.0/0000:08:00.0\nA: vendor=0x10de\\n\n"


def escapes(outside: Path) -> dict[str, tuple[str, str]]:
    dev = "/sys/devices/pci0000:00/0000:00:03.0/0000:08:00.0"
    return {
        "absolute-link": (
            f"L: esc={outside}\nA: esc/x=owned\n",
            f"link {dev}/esc -> {str(outside)!r} points outside /sys",
        ),
        "climbing-link": (
            "L: esc=../../../../../../../../../../../../..\nA: esc/x=owned\n",
            f"link {dev}/esc -> '../../../../../../../../../../../../..' points outside /sys",
        ),
        "subsystem": (
            "E: SUBSYSTEM=../../../outside\n",  # /sys/class/<it>/<name>: <target>/../outside/0000:08:00.0
            f"device {dev} has SUBSYSTEM '../../../outside', not a subsystem name",
        ),
        "driver-link": (
            "L: driver=../../../../../../../../../..\n",
            f"link {dev}/driver -> '../../../../../../../../../..' points outside /sys",
        ),
    }


@pytest.mark.parametrize("kind", ["absolute-link", "climbing-link", "subsystem", "driver-link"])
def test_import_umockdev_refuses_paths_leaving_the_target(cli, tmp_path, kind):
    outside = tmp_path / "outside"
    outside.mkdir()
    lines, message = escapes(outside)[kind]
    recording = tmp_path / "rec.umockdev"
    recording.write_text(DEV.rstrip("\n") + "\n" + lines)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = cli("sim", "import-umockdev", str(recording), str(tmp_path / "root"))
    assert one_error(r, 2) == f"error: rec.umockdev: {message}"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere


# --- 7. the journal is untrusted input ----------------------------------------------------------------------------

DETACH = {"kind": "detach-hostdev", "domain": "web01", "device_xml": "<hostdev/>", "what": "x"}
JOURNAL_ERROR = "error: refusing the journal /var/lib/vgpuadm/journal.json: "


def plant(root: Path, doc: dict, *, uid: int = 0, mode: int = 0o600) -> Path:
    path = root / "var/lib/vgpuadm/journal.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")
    os.chown(path, uid, -1)
    os.chmod(path, mode)
    return path


def journal(*steps: dict) -> dict:
    return {"version": 1, "pid": 1, "state": "applying", "current": 0, "done": 0,
            "plan": {"summary": "x", "steps": list(steps)}}  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="chowns the journal: needs root")
@pytest.mark.parametrize("command", [("recover",), ("reconcile",)])
def test_journal_of_another_user_is_refused(cli, sim_host, command):
    root = sim_host("p4")
    path = plant(root, journal(DETACH), uid=NOBODY)
    r = cli("--root", str(root), *command)
    assert one_error(r, 6) == JOURNAL_ERROR + f"it is owned by uid {NOBODY}, not root or this user"
    assert path.exists()


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        (journal(DETACH | {"domain": "../x"}), "step detach-hostdev field domain holds '../x', not a valid value"),
        (
            journal({"kind": "create-mdev", "parent": "/etc", "type_id": "nvidia-63", "uuid": "x"}),
            "step create-mdev field parent holds '/etc', not a valid value",
        ),
        (journal({"kind": "rm-rf", "path": "/"}), "unknown step kind 'rm-rf'"),
        (journal(DETACH | {"extra": 1}), "step detach-hostdev has unknown fields extra"),
        ({"version": 2, "plan": {"steps": []}}, "it is not a version 1 vgpuadm journal"),
    ],
)
def test_malformed_journal_is_refused_before_recover_acts(cli, sim_host, doc, problem):
    root = sim_host("p4")
    plant(root, doc)
    r = cli("--root", str(root), "recover")
    assert one_error(r, 6) == JOURNAL_ERROR + problem


def test_world_writable_journal_is_refused(cli, sim_host):
    root = sim_host("p4")
    plant(root, journal(DETACH), mode=0o666)
    assert one_error(cli("--root", str(root), "recover"), 6) == JOURNAL_ERROR + "it is writable by others"
