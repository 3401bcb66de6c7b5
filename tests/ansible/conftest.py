"""Fixtures of the Ansible lane: `ansible_lab(hosts=None)` builds a lab (see tests/ansible/lab.py) for all hosts of
inventory/hosts.yml or the named ones, on the real libvirtd (the project's `libvirtd` fixture), and undefines its
domains afterwards."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.lab import REPO, Lab, ansible_env
from vgpuadm.sim.profiles import build


def _define(conn: Any, name: str) -> None:
    from vgpuadm.virt.xml import domain_definition

    conn.defineXML(domain_definition(name, memory_mib=64, vnc=False))


@pytest.fixture
def ansible_lab(tmp_path: Path, libvirtd: str) -> Iterator[Callable[..., Lab]]:
    """Factory: `ansible_lab(hosts=None)` builds the lab for all inventory hosts (or the named ones)."""
    import libvirt

    conn = libvirt.open(libvirtd)
    labs: list[Lab] = []

    def make(hosts: list[str] | None = None) -> Lab:
        inventory = tmp_path / "inventory"
        shutil.copytree(REPO / "inventory", inventory)
        all_hosts = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]["gpu_hosts"]["hosts"]
        chosen = {h: yaml.safe_load((inventory / "host_vars" / f"{h}.yml").read_text()) for h in hosts or all_hosts}
        lab = Lab(tmp_path, inventory, f"vgt{uuid.uuid4().hex[:6]}-", chosen, ansible_env(tmp_path))
        labs.append(lab)
        for host, hv in chosen.items():
            build(hv["vgpuadm_profile"], str(lab.root(host)))
            for vm in dict.fromkeys(a["vm"] for a in hv["vgpu_allocations"]):
                _define(conn, lab.vm(vm))
                lab.domains.append(lab.vm(vm))
        return lab

    yield make
    for lab in labs:
        for name in lab.domains:
            with contextlib.suppress(libvirt.libvirtError):
                conn.lookupByName(name).undefine()
    conn.close()
