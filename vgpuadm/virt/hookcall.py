"""What libvirt's qemu hook is given, checked before anything else is loaded: the phase an operation means, the
domain XML on stdin (bounded, UTF-8, well-formed, of the domain named), and whether that domain asks for on-demand
devices at all. Most domains do not: their start and stop must not wait for the planner, the lock or discovery
(cli/hookrun.py answers them from this module alone; ops/hook.py does the rest)."""

from __future__ import annotations

from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.virt import xml

MAX_DOMAIN_XML = 4 * 1024 * 1024  # bytes: libvirt's own domain XML limit is 10 MB, real ones are a few KiB
START = (("prepare", "begin"),)  # the hook's (operation, sub-operation) that makes a domain's on-demand devices
STOP = (("release", "end"),)  # and the one that frees them


def phase_of(operation: str, sub_operation: str) -> str:
    """ "start", "stop", or "" for an operation the hook leaves alone."""
    if (operation, sub_operation) in START:
        return "start"
    if (operation, sub_operation) in STOP:
        return "stop"
    return ""


def read_domain_xml(data: bytes, domain: str) -> tuple[str, Any]:
    """The domain XML from the hook's stdin: at most MAX_DOMAIN_XML bytes of UTF-8, well-formed, for `domain`; as
    text and as the document parsed once (the readers after this take either)."""
    hint = "libvirt passes the domain XML on standard input; run the hook as libvirt does"
    if len(data) > MAX_DOMAIN_XML:
        raise UsageError(f"the domain XML on standard input is over {MAX_DOMAIN_XML} bytes", hint)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the domain XML on standard input is not UTF-8", hint) from None
    if not text.strip():
        raise UsageError("no domain XML on standard input", hint)
    doc = xml.parse_domain(text)
    name, _ = xml.domain_identity(doc)
    if name != domain:
        raise UsageError(f"the domain XML on standard input is for {name!r}, not {domain!r}",
                         "libvirt passes the domain's name as the first argument and its XML on stdin")  # fmt: skip
    return text, doc


def has_on_demand(domain_xml: str | Any) -> bool:
    """Whether the domain's vgpuadm metadata records any on-demand device."""
    return any(a.on_demand for a in xml.parse_allocations(domain_xml))
