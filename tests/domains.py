"""The one domain-XML builder of the tests: a libvirt domain definition with what a test needs (name, UUID, a
machine libvirt can define, vgpuadm's metadata, devices), and the files domains are kept in: libvirt's own under a
host root (the persistent definition, or a running domain's status file; the hook reads them) and a saved-XML
directory (`--domain-xml-dir`). Values go in as given: a test that wants markup or a malformed value writes it."""

from __future__ import annotations

from pathlib import Path

from vgpuadm.virt import xml

NS = xml.NS  # vgpuadm's metadata namespace
WEB01 = "6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a01"  # the UUID most tests give their domain web01
KVM_MACHINE = "<memory unit='KiB'>1048576</memory><os><type arch='x86_64' machine='q35'>hvm</type></os>"
QEMU_MACHINE = "<memory>65536</memory><os><type arch='x86_64'>hvm</type></os>"  # what the embedded driver defines
VNC = "<graphics type='vnc'/>"


def domain(
    name: str = "web01",
    uuid: str | None = None,
    *,
    metadata: str | None = None,
    devices: str | None = None,
    machine: str = "",
    hypervisor: str = "kvm",
) -> str:
    """`<domain>` with `name`, `uuid` (None: no element), `machine` (memory, os: KVM_MACHINE, QEMU_MACHINE),
    `metadata` and `devices` (the inner XML of those elements; "": an empty one, None: none)."""
    parts = [f"<domain type='{hypervisor}'><name>{name}</name>"]
    if uuid is not None:
        parts.append(f"<uuid>{uuid}</uuid>")
    parts.append(machine)
    for tag, inner in (("metadata", metadata), ("devices", devices)):
        if inner is not None:
            parts.append(f"<{tag}>{inner}</{tag}>" if inner else f"<{tag}/>")
    return "".join(parts) + "</domain>"


def device(**attrs: object) -> str:
    """One `<vgpuadm:device …/>` record, its attributes in the order given."""
    return "<vgpuadm:device " + " ".join(f"{k}='{v}'" for k, v in attrs.items()) + "/>"


def vgpuadm(*devices: str) -> str:
    """vgpuadm's metadata element (version 1, no host) holding `devices` (device() records, or any markup)."""
    return f"<vgpuadm:vgpuadm xmlns:vgpuadm='{NS}' version='1'>{''.join(devices)}</vgpuadm:vgpuadm>"


def libvirt_file(root: Path, domain_xml: str, *, running: bool) -> Path:
    """Write a domain where libvirt keeps it under `root`: its persistent definition, or (running) its status
    file."""
    name, _ = xml.domain_identity(domain_xml)
    where = root / ("run/libvirt/qemu" if running else "etc/libvirt/qemu")
    where.mkdir(parents=True, exist_ok=True)
    text = f"<domstatus state='running' reason='booted' pid='4242'>{domain_xml}</domstatus>" if running else domain_xml
    (where / f"{name}.xml").write_text(text)
    return where / f"{name}.xml"


def save(directory: Path, domain_xml: str, name: str | None = None) -> Path:
    """Write a domain into a saved-XML directory (`--domain-xml-dir`) as <name>.xml."""
    path = directory / f"{name or xml.domain_identity(domain_xml)[0]}.xml"
    path.write_text(domain_xml)
    return path
