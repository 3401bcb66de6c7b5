"""`vgpuadm unit install`: the restore unit written to <root>/etc/systemd/system with ExecStart naming the vgpuadm
being run (a pip/pipx install has no /usr/bin/vgpuadm), through the executor; idempotent; --dry-run and --json;
`systemd-analyze verify` accepts the file. The verify tests skip when /usr/bin/systemd-analyze is absent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.io import unitfile
from vgpuadm.ops.unit import vgpuadm_command

ANALYZE = "/usr/bin/systemd-analyze"
needs_analyze = pytest.mark.skipif(not os.access(ANALYZE, os.X_OK), reason="systemd-analyze is not installed")
UNIT = "etc/systemd/system/vgpuadm-restore.service"
REPO = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Console(out=out, err=err))
    return code, out.getvalue(), err.getvalue()


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ANALYZE, "verify", str(path)], capture_output=True, text=True, timeout=120, check=False)


def test_install_writes_the_unit_once_then_nothing_to_do(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    code, out, err = cli("--root", str(root), "unit", "install", "--dry-run")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "would install vgpuadm-restore.service:",
        "  step 1/1 write systemd unit /etc/systemd/system/vgpuadm-restore.service",
    ]
    assert not (root / UNIT).exists()
    code, out, err = cli("--root", str(root), "unit", "install")
    assert code == 0, err
    command = vgpuadm_command()
    line = f"ExecStart={' '.join(command)} restore --domain-xml-dir /etc/libvirt/qemu --timeout 120"
    assert out.splitlines() == [  # the file itself (under --root) and the unit's real ExecStart line
        f"wrote {root}/etc/systemd/system/vgpuadm-restore.service",
        f"the unit runs: {line}",
        "next: systemctl daemon-reload && systemctl enable vgpuadm-restore.service",
    ]
    path = root / UNIT
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert os.path.isabs(command[0]) and os.access(command[0], os.X_OK)
    exec_start = [x for x in path.read_text().splitlines() if x.startswith("ExecStart=")]
    assert exec_start == [line]
    [docs] = [x for x in path.read_text().splitlines() if x.startswith("Documentation=")]
    assert docs == f"Documentation=file://{REPO}/README.md"  # the README this vgpuadm has, not a made-up web page
    assert (REPO / "README.md").is_file()
    assert "ExecStart=/usr/bin/vgpuadm" not in path.read_text()
    assert not (root / "var/lib/vgpuadm/journal.json").exists()
    text = path.read_text()
    code, out, _ = cli("--root", str(root), "unit", "install", "--json")
    doc = json.loads(out)
    assert (code, doc["changed"], doc["installed"], doc["current"], doc["steps"]) == (0, False, True, True, [])
    assert path.read_text() == text
    code, out, _ = cli("--root", str(root), "unit", "status")
    assert (code, out) == (
        0,
        f"{root}/etc/systemd/system/vgpuadm-restore.service: installed, {line}\n",
    )
    assert cli("--root", str(root), "unit", "uninstall")[0] == 0
    assert not path.exists()
    code, out, _ = cli("--root", str(root), "unit", "uninstall")
    assert out.splitlines()[0] == f"nothing to do: {root}/etc/systemd/system/vgpuadm-restore.service is not installed"


def test_command_is_the_console_script_or_this_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "vgpuadm"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert vgpuadm_command(str(script)) == [str(script)]
    assert vgpuadm_command(str(tmp_path / "vgpuadm" / "__main__.py")) == [os.path.abspath(sys.executable), "-m",
                                                                           "vgpuadm"]  # fmt: skip
    assert unitfile.render(["/opt/my tools/vgpuadm"]).count('ExecStart="/opt/my tools/vgpuadm" restore') == 1


@pytest.mark.process
@needs_analyze
def test_installed_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """After= on units this machine lacks (nvidia-vgpud…) is fine for verify: it only refuses a missing command."""
    assert cli("--root", str(tmp_path), "unit", "install")[0] == 0
    r = verify(tmp_path / UNIT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is not executable" not in r.stderr


@pytest.mark.process
@needs_analyze
@pytest.mark.skipif(os.path.exists("/usr/bin/vgpuadm"), reason="this machine has a /usr/bin/vgpuadm")
def test_the_old_fixed_usr_bin_unit_fails_verify_without_usr_bin_vgpuadm(tmp_path: Path) -> None:
    """The unit as shipped before (ExecStart=/usr/bin/vgpuadm), on a pip/pipx install: verify refuses it."""
    path = tmp_path / "vgpuadm-restore.service"
    path.write_text(unitfile.render(["/usr/bin/vgpuadm"]))
    r = verify(path)
    assert r.returncode != 0
    assert "Command /usr/bin/vgpuadm is not executable" in r.stderr


EXPORTER_UNIT = "etc/systemd/system/vgpuadm-exporter.service"


def test_exporter_install_writes_its_unit_with_the_listen_address_then_nothing_to_do(tmp_path: Path) -> None:
    """`vgpuadm exporter install` writes vgpuadm-exporter.service the way `unit install` writes the restore unit
    (the same step, executor and template machinery), ExecStart running this vgpuadm's exporter on --listen."""
    root = tmp_path / "root"
    root.mkdir()
    code, out, err = cli("--root", str(root), "exporter", "install", "--listen", "127.0.0.1:9100")
    assert (code, err) == (0, "")
    line = f"ExecStart={' '.join(vgpuadm_command())} exporter --listen 127.0.0.1:9100"
    assert out.splitlines() == [
        f"wrote {root}/{EXPORTER_UNIT}",
        f"the unit runs: {line}",
        "next: systemctl daemon-reload && systemctl enable --now vgpuadm-exporter.service",
    ]
    path = root / EXPORTER_UNIT
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [x for x in path.read_text().splitlines() if x.startswith("ExecStart=")] == [line]
    assert not (root / UNIT).exists()  # the restore unit is another file
    code, out, _ = cli("--root", str(root), "exporter", "install", "--listen", "127.0.0.1:9100")
    assert (code, out.splitlines()[0]) == (0, f"nothing to do: {root}/{EXPORTER_UNIT} is installed and current")
    code, out, err = cli("--root", str(root), "exporter", "install", "--listen", "localhost:9100")
    assert (code, out) == (2, "")
    assert err == ('error: --listen "localhost:9100" is not ADDR:PORT\n'
                   "hint: e.g. --listen 127.0.0.1:9847 (an IP address)\n")  # fmt: skip
    assert cli("--root", str(root), "exporter", "uninstall")[0] == 0
    assert not path.exists()


@pytest.mark.process
@needs_analyze
def test_installed_exporter_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    assert cli("--root", str(tmp_path), "exporter", "install")[0] == 0
    r = verify(tmp_path / EXPORTER_UNIT)
    assert r.returncode == 0, r.stdout + r.stderr
