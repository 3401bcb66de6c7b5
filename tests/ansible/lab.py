"""The Ansible lane's lab: simulated GPU hosts (one root per inventory host), their VMs as throwaway domains on the
real libvirtd, a copy of inventory/, and ansible-playbook runs whose task results are recorded as JSON by
tests/ansible/plugins/callback/vgpuadm_record.py (ansible-core ships no JSON callback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
URI = "qemu:///system"
BIN = Path(sys.executable).parent


@dataclass
class Run:
    rc: int
    out: str
    results: list[dict[str, Any]]
    stats: dict[str, dict[str, int]]

    def of(self, host: str, task: str | None = None) -> list[dict[str, Any]]:
        """The recorded results of `host` (optionally of one task, by name)."""
        return [r for r in self.results if r["host"] == host and (task is None or r["task"] == task)]

    def changed(self, host: str) -> int:
        return self.stats[host]["changed"]

    def failed(self, host: str) -> int:
        return self.stats[host]["failures"]

    def items(self, host: str, task: str) -> list[dict[str, Any]]:
        """Per-item results of a looped task on `host`."""
        (rec,) = self.of(host, task)
        return list(rec["result"].get("results", [rec["result"]]))


@dataclass
class Lab:
    dir: Path
    inventory: Path
    prefix: str
    hosts: dict[str, dict[str, Any]]  # host -> its host_vars
    env: dict[str, str]
    runs: int = 0
    domains: list[str] = field(default_factory=list)

    def root(self, host: str) -> Path:
        return self.dir / "lab" / host

    def vm(self, name: str) -> str:
        return self.prefix + name

    def playbook(self, name: str, *args: str, check: bool = False, diff: bool = False) -> Run:
        cmd = [str(BIN / "ansible-playbook"), "-i", str(self.inventory / "hosts.yml"), str(self.inventory / name)]
        cmd += ["-e", f"vgpuadm_lab_dir={self.dir / 'lab'}", "-e", f"vgpuadm_vm_prefix={self.prefix}"]
        cmd += ["-e", f"vgpuadm_connect={URI}"]
        cmd += ["--limit", ",".join(self.hosts)]
        return self._run(cmd + (["--check"] if check else []) + (["--diff"] if diff else []) + list(args))

    def module(self, host: str, module: str, args: dict[str, Any], *, check: bool = False, diff: bool = False) -> dict:
        """Run one module on one host, ad hoc (`ansible HOST -m vgpuadm.vgpu.MODULE -a JSON`); returns its result
        plus `status` (ok, changed, failed). The host's root and the lab's libvirt URI are filled in unless given."""
        args = {"root": str(self.root(host)), "connect": URI, **args}
        cmd = [str(BIN / "ansible"), host, "-i", str(self.inventory / "hosts.yml"), "-m", f"vgpuadm.vgpu.{module}"]
        cmd += ["-a", json.dumps(args)] + (["--check"] if check else []) + (["--diff"] if diff else [])
        run = self._run(cmd)
        (rec,) = run.of(host)
        return {**rec["result"], "status": rec["status"]}

    def _run(self, cmd: list[str]) -> Run:
        self.runs += 1
        record = self.dir / f"run-{self.runs}.json"
        proc = subprocess.run(
            cmd, cwd=self.dir, env={**self.env, "VGPUADM_RECORD_FILE": str(record)}, capture_output=True, text=True
        )
        out = proc.stdout + proc.stderr
        if not record.exists():
            raise AssertionError(f"ansible-playbook recorded nothing (rc {proc.returncode}):\n{out}")
        doc = json.loads(record.read_text())
        return Run(proc.returncode, out, doc["results"], doc["stats"])


def inactive_xml(domain: str) -> str:
    """The persistent definition of `domain` on the lab's libvirtd."""
    import libvirt

    conn = libvirt.open(URI)
    try:
        return str(conn.lookupByName(domain).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    finally:
        conn.close()


def autostart(domain: str) -> None:
    """Mark `domain` on the lab's libvirtd to start when libvirtd does (virsh autostart)."""
    import libvirt

    conn = libvirt.open(URI)
    try:
        conn.lookupByName(domain).setAutostart(1)
    finally:
        conn.close()


def ansible_env(tmp: Path) -> dict[str, str]:
    collections = tmp / "collections" / "ansible_collections" / "vgpuadm"
    collections.mkdir(parents=True)
    (collections / "vgpu").symlink_to(REPO / "ansible")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "LIBVIRT_", "VGPUADM_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(tmp / "home"),
        ANSIBLE_COLLECTIONS_PATH=str(tmp / "collections"),
        ANSIBLE_CALLBACK_PLUGINS=str(REPO / "tests/ansible/plugins/callback"),
        ANSIBLE_CALLBACKS_ENABLED="vgpuadm_record",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",  # ad-hoc `ansible` loads enabled callbacks only with this
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )
    return env
