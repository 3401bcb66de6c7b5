"""Without libvirt-python: read commands go on with ownership unknown and say why; commands that change the host
refuse before any change with one line naming the package to install — never an internal error.

The CLI runs in a subprocess whose PYTHONPATH starts with a directory holding a `libvirt.py` that raises
ModuleNotFoundError, exactly as `import libvirt` does where libvirt-python is not installed (the real package of
the test venv stays out of reach behind it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from vgpuadm.sim.treestate import tree_state

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
WARNING = (
    "warning: owners unknown: libvirt-python is not installed; "
    "install python3-libvirt (apt) or libvirt-python (pip, in vgpuadm's venv)"
)
REFUSAL = [
    "error: libvirt-python is not installed",
    "hint: install python3-libvirt (apt) or libvirt-python (pip, in vgpuadm's venv)",
]


@pytest.fixture
def no_libvirt(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    shim = tmp_path / "no-libvirt"
    shim.mkdir()
    (shim / "libvirt.py").write_text('raise ModuleNotFoundError("No module named \'libvirt\'", name="libvirt")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(REPO)])}
    env.pop("LIBVIRT_DEFAULT_URI", None)

    def vgpuadm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "vgpuadm", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120, check=False)  # fmt: skip

    return vgpuadm


def test_the_shim_hides_libvirt(no_libvirt: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    r = no_libvirt("--version")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args", [["inventory"], ["devices"]])
def test_read_commands_report_owners_unknown(
    args: list[str], sim_host: Callable[[str], Path], no_libvirt: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    root = sim_host("p4")
    r = no_libvirt("--root", str(root), *args)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        WARNING if args == ["inventory"] else "warning: owners unknown: libvirt-python is not installed"
    ]


def test_inventory_json_carries_the_warning(
    sim_host: Callable[[str], Path], no_libvirt: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    root = sim_host("p4")
    r = no_libvirt("--root", str(root), "inventory", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert WARNING.removeprefix("warning: ") in doc["warnings"]
    assert doc["ownership_source"] == "none"


@pytest.mark.parametrize(
    "args",
    [
        ["vms"],
        ["show", "--vm", "web01"],
        ["create", "--vm", "web01", "--type", "nvidia-63", "--dry-run"],
        ["create", "--vm", "web01", "--type", "nvidia-63"],
        ["destroy", "--vm", "web01"],
        ["restore"],
    ],
)
def test_libvirt_commands_refuse_with_the_package_to_install(
    args: list[str], sim_host: Callable[[str], Path], no_libvirt: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    root = sim_host("p4")
    before = tree_state(root)
    r = no_libvirt("--root", str(root), *args)
    assert (r.returncode, r.stderr.splitlines(), r.stdout) == (8, REFUSAL, "")
    assert tree_state(root) == before


def test_restore_json_refusal_is_the_error_document(
    sim_host: Callable[[str], Path], no_libvirt: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    root = sim_host("p4")
    r = no_libvirt("--root", str(root), "restore", "--json")
    assert r.returncode == 8
    assert json.loads(r.stdout) == {"error": REFUSAL[0].removeprefix("error: "),
                                    "hint": REFUSAL[1].removeprefix("hint: "), "exit_code": 8}  # fmt: skip


def test_doctor_names_the_package_not_libvirtd(
    sim_host: Callable[[str], Path], no_libvirt: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    root = sim_host("p4")
    r = no_libvirt("--root", str(root), "doctor", "--json")
    check = next(c for c in json.loads(r.stdout)["checks"] if c["check"] == "libvirt")
    assert check == {
        "check": "libvirt",
        "status": "fail",
        "detail": f"libvirt at qemu:///embed?root={root}/var/lib/vgpuadm/libvirt is unreachable: "
        "libvirt-python is not installed",
        "hint": REFUSAL[1].removeprefix("hint: "),
    }
