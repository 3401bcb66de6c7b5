"""The collection as Ansible itself reads it: module documentation parsed by ansible-doc and matching each module's
argument spec, the playbooks passing ansible-playbook's syntax check, and galaxy.yml good enough to build."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.lab import BIN, REPO, ansible_env

MODULES = ("vgpu_allocation", "vgpu_inventory", "vgpu_migration")
PLAYBOOKS = ("provision.yml", "release.yml", "fleet-report.yml")


def _argument_spec(module: str) -> dict[str, dict[str, Any]]:
    """The argument_spec=dict(...) of the module's AnsibleModule call, read from its source (plus COMMON_ARGS)."""
    source = (REPO / f"ansible/plugins/modules/{module}.py").read_text()
    common = (REPO / "ansible/plugins/module_utils/vgpuadm_common.py").read_text()
    spec: dict[str, dict[str, Any]] = {}
    for tree in (ast.parse(source), ast.parse(common)):
        for node in ast.walk(tree):
            if (isinstance(node, ast.keyword) and node.arg == "argument_spec") or (
                isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMMON_ARGS"
            ):
                call = node.value
                assert isinstance(call, ast.Call)
                for kw in call.keywords:
                    if kw.arg is not None:
                        spec[kw.arg] = {k.arg: ast.literal_eval(k.value) for k in kw.value.keywords}  # type: ignore[attr-defined]
    return spec


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return ansible_env(tmp_path_factory.mktemp("collection"))


@pytest.mark.parametrize("module", MODULES)
def test_documentation_matches_the_argument_spec(env: dict[str, str], module: str) -> None:
    out = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "module", "--json", f"vgpuadm.vgpu.{module}"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    doc = json.loads(out)[f"vgpuadm.vgpu.{module}"]
    options = doc["doc"]["options"]
    spec = _argument_spec(module)
    assert sorted(options) == sorted(spec)
    for name, arg in spec.items():
        documented = options[name]
        assert documented["type"] == arg.get("type", "str"), name
        assert documented.get("default") == arg.get("default"), name
        assert documented.get("choices") == arg.get("choices"), name
        assert documented.get("aliases", []) == arg.get("aliases", []), name
    examples = [e for e in yaml.safe_load(doc["examples"]) if f"vgpuadm.vgpu.{module}" in e]
    assert examples
    for example in examples:
        assert set(example[f"vgpuadm.vgpu.{module}"]) <= set(spec), example["name"]
    assert doc["return"], "RETURN is documented"


def test_playbooks_pass_the_syntax_check(env: dict[str, str]) -> None:
    inventory = REPO / "inventory"
    for playbook in PLAYBOOKS:
        run = subprocess.run(
            [str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(inventory / "hosts.yml"), str(inventory / playbook)],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr


def test_collection_builds(env: dict[str, str], tmp_path: Path) -> None:
    run = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", str(REPO / "ansible"), "--output-path", str(tmp_path)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["vgpuadm-vgpu-0.1.0.tar.gz"]
