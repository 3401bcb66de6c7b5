"""Every command's --help as a user reads it: metavars that say what to type (never typer's `<str>`), the exit
codes (all of errors.EXIT_CODES, also in the README), `apply --help`'s example that checks where it says so."""

from __future__ import annotations

import re

from tests.conftest import REPO
from vgpuadm import errors
from vgpuadm.errors import EXIT_CODES


def _help(cli, capsys, *path: str) -> str:
    """click prints help to sys.stdout itself (not through the Console): read it there."""
    capsys.readouterr()
    r = cli(*path, "--help")
    assert r.code == 0, (path, r.err)
    return capsys.readouterr().out + r.out


def _commands(cli, capsys, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    text = _help(cli, capsys, *path)
    found = [path]
    if "Commands:" in text:
        for line in text.split("Commands:", 1)[1].splitlines():
            m = re.match(r"^  ([a-z][a-z-]*)  ", line)
            if m:
                found += _commands(cli, capsys, (*path, m.group(1)))
    return found


def test_no_help_shows_typer_type_metavars(cli, capsys):
    paths = _commands(cli, capsys)
    assert len(paths) > 30
    for path in paths:
        text = _help(cli, capsys, *path)
        assert not re.search(r"<(str|int|float|list\[[a-z]+\])>", text), (path, text)


def test_every_exit_code_is_in_help_and_readme(cli, capsys):
    codes = {code for code, _ in EXIT_CODES}
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.VgpuadmError)]
    assert {c.exit_code for c in classes} <= codes
    help_text = _help(cli, capsys)
    readme = (REPO / "README.md").read_text()
    for code, meaning in EXIT_CODES:
        assert f"{code:>5}  {meaning}" in help_text
        assert f"| {code} | {meaning} |" in readme


def test_apply_help_example_checks_where_it_says_it_checks(cli, capsys):
    text = " ".join(_help(cli, capsys, "apply").split())
    assert "Example: vgpuadm apply -f plan.yaml --check (shows the diff, changes nothing;" in text
    assert "cat plan.yaml | vgpuadm apply -f -" in text


def test_top_level_help_names_every_sharing_mode(cli, capsys):
    """`vgpuadm --help` names every way it gives a VM a GPU (modes/: mdev, vf, MIG, VF pools, virtio-gl, passthrough)."""
    text = " ".join(_help(cli, capsys).split()).replace("MIG- backed", "MIG-backed")  # click wraps at a hyphen
    assert ("Give GPUs to libvirt/KVM guests: mdev vGPUs, NVIDIA vendor-VFIO VFs, MIG-backed vGPUs, SR-IOV VF pools "
            "(AMD, Intel), virtio-gpu with 3D (virtio-gl) and whole-GPU passthrough.") in text  # fmt: skip
