"""`vgpuadm hook run|install|uninstall|status`: on-demand devices through libvirt's qemu hook.

`run` is what the installed hook executes for each domain libvirt starts and stops: on prepare/begin it makes the
domain's on-demand devices (plan/ondemand.py: the same planner and capacity model as `create`), on release/end it
removes them. It plans from the domain XML libvirt passes on stdin and the kernel alone, under the host lock, and
never calls libvirt (libvirt documents that a hook calling back into its API deadlocks). Other operations do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vgpuadm.errors import UsageError
from vgpuadm.executor import load_drivers
from vgpuadm.ops.session import Session
from vgpuadm.plan import ondemand
from vgpuadm.steps import Plan
from vgpuadm.virt import xml

MAX_DOMAIN_XML = 4 * 1024 * 1024  # bytes: libvirt's own domain XML limit is 10 MB, real ones are a few KiB


@dataclass(frozen=True)
class HookRunResult:
    domain: str
    phase: str  # "start", "stop" or "" (an operation the hook leaves alone)
    plan: Plan
    applied: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "phase": self.phase, "steps": self.plan.describe(),
                "applied": list(self.applied)}  # fmt: skip


def phase_of(operation: str, sub_operation: str) -> str:
    if (operation, sub_operation) in ondemand.START:
        return "start"
    if (operation, sub_operation) in ondemand.STOP:
        return "stop"
    return ""


def read_domain_xml(data: bytes) -> str:
    """The domain XML from the hook's stdin: at most MAX_DOMAIN_XML bytes of UTF-8, well-formed."""
    hint = "libvirt passes the domain XML on standard input; run the hook as libvirt does"
    if len(data) > MAX_DOMAIN_XML:
        raise UsageError(f"the domain XML on standard input is over {MAX_DOMAIN_XML} bytes", hint)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the domain XML on standard input is not UTF-8", hint) from None
    if not text.strip():
        raise UsageError("no domain XML on standard input", hint)
    xml.parse_domain(text)
    return text


def run(root: str | None, domain: str, operation: str, sub_operation: str, domain_xml: bytes) -> HookRunResult:
    """Make (start) or free (stop) the on-demand devices of `domain`, whose XML libvirt gave on stdin."""
    phase = phase_of(operation, sub_operation)
    if not phase:
        return HookRunResult(domain, "", Plan.of([], f"{operation}/{sub_operation}: nothing to do"), ())
    text = read_domain_xml(domain_xml)
    name, _ = xml.domain_identity(text)
    if name != domain:
        raise UsageError(f"the domain XML on standard input is for {name!r}, not {domain!r}",
                         "libvirt passes the domain's name as the first argument and its XML on stdin")  # fmt: skip
    with Session.open(root) as s:  # s.virt is never opened here
        if phase == "start":
            plan = ondemand.plan_start(s.snap, text)
        else:
            plan = ondemand.plan_stop(s.snap, text, load_drivers(s.root.path))
        applied = s.execute(plan).applied if not plan.empty else ()
    return HookRunResult(domain, phase, plan, tuple(applied))
