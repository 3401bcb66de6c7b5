"""virsh against the libvirtd of the lane's guest (tests/kernel/guest), for the guest suite's fixtures and tests;
`dumpxml`, `domstate` and `monitor` are the same calls through the library (a virsh is a process start under TCG,
~1 s, and the tests read definitions and QEMU's state dozens of times)."""

from __future__ import annotations

import subprocess

import libvirt
import libvirt_qemu

URI = "qemu:///system"


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=900)
    if check:
        assert result.returncode == 0, f"virsh {' '.join(args)}: {result.stderr.strip()}"
    return result


def dumpxml(name: str, *, inactive: bool = False) -> str:
    """`virsh dumpxml [--inactive] NAME`."""
    conn = libvirt.open(URI)
    try:
        return str(conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0))
    finally:
        conn.close()


def nodedev_dumpxml(name: str) -> str:
    """`virsh nodedev-dumpxml NAME`."""
    conn = libvirt.open(URI)
    try:
        return str(conn.nodeDeviceLookupByName(name).XMLDesc())
    finally:
        conn.close()


def domstate(name: str) -> str:
    """`virsh domstate NAME`: "running", "paused", "shut off", …"""
    conn = libvirt.open(URI)
    try:
        state, _reason = conn.lookupByName(name).state()
    finally:
        conn.close()
    return _STATES.get(state, f"state {state}")


_STATES = {libvirt.VIR_DOMAIN_RUNNING: "running", libvirt.VIR_DOMAIN_PAUSED: "paused",
           libvirt.VIR_DOMAIN_SHUTOFF: "shut off"}  # fmt: skip


def monitor(name: str, command: str) -> str:
    """`virsh qemu-monitor-command NAME COMMAND`: QEMU's QMP reply."""
    conn = libvirt.open(URI)
    try:
        return str(libvirt_qemu.qemuMonitorCommand(conn.lookupByName(name), command, 0))
    finally:
        conn.close()
