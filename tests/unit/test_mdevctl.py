"""mdevctl interop: definitions in mdevctl 1.2's own format, read back by Debian's mdevctl itself (in a private
mount namespace, root only), and `mdevctl import` re-creating the defined mdevs after a reboot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result
from vgpuadm.errors import UsageError
from vgpuadm.io.mdevctl import definition, parse, read_definitions, remove_definition, render, write_definition
from vgpuadm.sim.treestate import tree_state

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
# What `mdevctl define -u U1 -p 0000:01:00.0 -t nvidia-63 --auto` then `mdevctl modify -u U1
# --addattr=nvidia/vgpu_params --value=frame_rate_limiter=0` wrote with mdevctl 1.2.0 (no trailing newline).
MDEVCTL_WROTE = (
    '{\n  "mdev_type": "nvidia-63",\n  "start": "auto",\n  "attrs": [\n    {\n'
    '      "nvidia/vgpu_params": "frame_rate_limiter=0"\n    }\n  ]\n}'
)


def test_render_is_byte_identical_to_mdevctl() -> None:
    d = definition("0000:01:00.0", U1.upper(), "nvidia-63", "frame_rate_limiter=0")
    assert render(d) == MDEVCTL_WROTE
    assert d.host_path == f"/etc/mdevctl.d/0000:01:00.0/{U1}"
    assert parse(MDEVCTL_WROTE, "0000:01:00.0", U1, "x") == d
    assert (
        render(definition("mtty", U2, "mtty-2")) == '{\n  "mdev_type": "mtty-2",\n  "start": "auto",\n  "attrs": []\n}'
    )


def test_write_read_remove(tmp_path: Path) -> None:
    d1 = definition("0000:01:00.0", U1, "nvidia-63", "frame_rate_limiter=0")
    d2 = definition("mtty", U2, "mtty-2", start="manual")
    assert write_definition(str(tmp_path), d1) and write_definition(str(tmp_path), d2)
    assert not write_definition(str(tmp_path), d1)  # same content: untouched
    (tmp_path / "etc/mdevctl.d/scripts.d/callouts").mkdir(parents=True)
    (tmp_path / "etc/mdevctl.d/mtty/notes.txt").write_text("not a definition")
    assert read_definitions(str(tmp_path)) == [d1, d2]
    assert oct((tmp_path / d1.host_path.lstrip("/")).stat().st_mode & 0o777) == "0o644"
    assert remove_definition(str(tmp_path), d1) and not remove_definition(str(tmp_path), d1)
    assert not (tmp_path / "etc/mdevctl.d/0000:01:00.0").exists()
    (tmp_path / f"etc/mdevctl.d/mtty/{U1}").write_text("{broken")
    with pytest.raises(UsageError, match=rf"/etc/mdevctl.d/mtty/{U1} is not an mdevctl definition"):
        read_definitions(str(tmp_path))


def _mdev_create(cli: Callable[..., Result], root: Path, *args: str) -> None:
    res = cli("--root", str(root), "mdev", "create", "--type", "nvidia-63", *args)
    assert res.code == 0, res.err


@pytest.mark.process
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mdevctl") or not shutil.which("unshare"),
                    reason="reading back with mdevctl needs root, mdevctl and unshare")  # fmt: skip
def test_export_is_read_back_by_mdevctl(sim_host: Callable[[str], Path], cli: Callable[..., Result]) -> None:
    root = sim_host("p4")
    _mdev_create(cli, root, "--uuid", U1, "--param", "frame_rate_limiter=0")
    _mdev_create(cli, root, "--uuid", U2)
    res = cli("--root", str(root), "mdevctl", "export", "--from-host")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        f"wrote {root}/etc/mdevctl.d/0000:01:00.0/{U1} (nvidia-63, start=auto)",
        f"wrote {root}/etc/mdevctl.d/0000:01:00.0/{U2} (nvidia-63, start=auto)",
    ]
    assert (root / f"etc/mdevctl.d/0000:01:00.0/{U1}").read_text() == MDEVCTL_WROTE
    assert cli("--root", str(root), "mdevctl", "export", "--from-host").out.startswith("unchanged ")
    # mdevctl refuses to run without its own scripts.d directories, which its package installs on a real host.
    for sub in ("callouts", "notifiers"):
        (root / "etc/mdevctl.d/scripts.d" / sub).mkdir(parents=True, exist_ok=True)
    script = (f"mount --bind {root}/etc/mdevctl.d /etc/mdevctl.d && mount --bind {root}/sys /sys && "
              "mdevctl list --defined --dumpjson")  # fmt: skip
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        {
            "0000:01:00.0": [
                {
                    U1: {
                        "mdev_type": "nvidia-63",
                        "start": "auto",
                        "attrs": [{"nvidia/vgpu_params": "frame_rate_limiter=0"}],
                    }
                },
                {U2: {"mdev_type": "nvidia-63", "start": "auto", "attrs": []}},
            ]
        }
    ]


def test_import_recreates_defined_mdevs_after_reboot(
    sim_host: Callable[[str], Path], cli: Callable[..., Result]
) -> None:
    root = sim_host("p4")
    _mdev_create(cli, root, "--uuid", U1, "--param", "frame_rate_limiter=0")
    _mdev_create(cli, root, "--uuid", U2)
    assert cli("--root", str(root), "mdevctl", "export", "--from-host").code == 0
    manual = definition("0000:02:00.0", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003", "nvidia-64", start="manual")
    write_definition(str(root), manual)
    state = tree_state(root)
    assert cli("--root", str(root), "sim", "reboot", str(root)).code == 0
    assert not (root / "sys/bus/mdev/devices" / U1).exists()

    check = cli("--root", str(root), "mdevctl", "import", "--check")
    assert check.code == 0, check.err
    assert check.out.splitlines() == [
        f"step 1/3 create mdev {U1} of type nvidia-63 on 0000:01:00.0",
        f'step 2/3 set vgpu_params of mdev {U1} to "frame_rate_limiter=0"',
        f"step 3/3 create mdev {U2} of type nvidia-63 on 0000:01:00.0",
        "nothing was changed (--check)",
    ]
    res = cli("--root", str(root), "mdevctl", "import")
    assert res.code == 0, res.err
    assert tree_state(root) == state  # the manual definition stays defined but not started
    again = cli("--root", str(root), "mdevctl", "import")
    assert again.out == "nothing to do: every mdevctl definition is running\n"
