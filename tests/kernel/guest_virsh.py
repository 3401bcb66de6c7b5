"""virsh against the libvirtd of the lane's guest (tests/kernel/guest), for the guest suite's fixtures and tests;
`dumpxml` is the same call through the library (a virsh is a process start under TCG, ~1 s, and the tests read the
definitions dozens of times)."""

from __future__ import annotations

import subprocess

import libvirt

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
