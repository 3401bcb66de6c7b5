"""The verb-level differential: one scenario of vgpuadm commands (mdev create/remove, create/destroy for a VM,
apply -f twice, sriov enable/disable, vfio bind/unbind, a crash then reconcile and recover, inventory). It runs on
the real kernel inside the lane's guest (tests/kernel/guest/test_verbs.py) and on a simulated `kernel-samples` host
(tests/kernel/test_differential.py); both record, per command, the exit code, the normalised `--json` output and
stderr, the kernel-visible tree (differential_scenario.observe) and the domains' hostdevs and vgpuadm metadata as
libvirt stores them. The records must be identical.

Both runs use the same /etc/machine-id (the simulated root gets the guest's), so vgpuadm's deterministic UUIDs
agree too; still, UUIDs no scenario input names become <uuid-N> in order of first sight, timestamps
<time>, the host name <host>, the simulated root's path and IOMMU group numbers (differential_scenario's g1, g2…).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import differential_scenario as raw
import libvirt
from guest_fork import forked
from lxml import etree

from vgpuadm.cli.app import run as run_cli
from vgpuadm.cli.console import Console
from vgpuadm.executor import CRASH_ARMED, CRASH_HOOK
from vgpuadm.host.sysfs import Sysfs
from vgpuadm.virt.xml import NS, PREFIX, domain_definition

# Fixed domain UUIDs, so vgpuadm's deterministic device UUIDs are the same in both runs.
DOMAINS = {
    "kl-verb-a": "5e1f0000-0000-4000-8000-00000000000a",
    "kl-verb-b": "5e1f0000-0000-4000-8000-00000000000b",
}
U0, U1, U2 = (f"7d2c0000-0000-4000-8000-00000000000{i}" for i in range(3))
PLAN = """\
version: 1
vms:
  kl-verb-a:
    type: mbochs-medium
  kl-verb-b:
    type: mtty-2
    count: 2
"""
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_GROUP_KEYS = ("iommu_group",)
_META_HOST = re.compile(r'host="[^"]*"')  # the metadata's host id: machine-id based, "sim:" on a simulated root
_DROPPED = ("duration_s", "elapsed_s", "simulated")  # `simulated` is the one intended difference


@dataclass(frozen=True)
class Command:
    """One vgpuadm invocation and the exit code it must give; `crash_after` runs it in a child with
    VGPUADM_TEST_CRASH_AFTER_STEP set (exit 99)."""

    args: tuple[str, ...]
    exit: int = 0
    crash_after: int | None = None


@dataclass
class Result:
    code: int
    out: str
    err: str


Cli = Callable[..., Result]


def in_process(*args: str) -> Result:
    """`vgpuadm ARGS…` in this process, as tests/conftest.py's `cli` fixture runs it."""
    out, err = io.StringIO(), io.StringIO()
    code = run_cli(list(args), Console(out, err))
    return Result(code, out.getvalue(), err.getvalue())


def commands(plan_path: str) -> list[Command | tuple[str, str]]:
    """The scenario; a (path, data) tuple is a raw sysfs write the test makes (SR-IOV autoprobe off, as
    tests/kernel/guest/conftest.py does, or nvme grabs each VF)."""
    a, b = DOMAINS
    c = Command
    return [
        c(("types", "--json")),
        c(("mdev", "create", "--type", "mtty-2", "--uuid", U0, "--json")),
        c(("mdev", "create", "--type", "mdpy-vga", "--uuid", U1, "--json")),
        c(("mdev", "create", "--type", "Mdpy-VGA", "--uuid", U2, "--json")),  # the type by name, any case
        c(("mdev", "create", "--type", "mdpy-hd", "--count", "3", "--json"), 4),  # 2 of 4 left: refused
        c(("devices", "--json")),
        c(("mdev", "remove", U0, "--json")),
        c(("mdev", "remove", U0, "--json"), 3),  # gone: not found
        c(("create", "--type", "mtty-1", "--vm", a, "--json")),
        c(("create", "--type", "mbochs-large", "--vm", b, "--json")),
        c(("create", "--type", "mbochs-medium", "--vm", b, "--json")),  # 96-64 MiB left: one medium (16) fits
        c(("create", "--type", "mbochs-large", "--vm", a, "--json"), 4),  # no room
        c(("inventory", "--json")),
        c(("show", "--vm", b, "--json")),
        c(("destroy", "--vm", a, "--all", "--json")),
        c(("destroy", "--vm", b, "--all", "--json")),
        c(("reconcile", "--json")),  # the two mdpy-vga devices nobody owns are leaks
        c(("reconcile", "--fix", "--json")),
        c(("apply", "-f", plan_path, "--json")),
        c(("apply", "-f", plan_path, "--json")),  # the second changes nothing
        c(("inventory", "--json")),
        ("/sys/bus/pci/devices/{pf}/sriov_drivers_autoprobe", "0"),
        c(("sriov", "enable", "{pf}", "--num", "2", "--json")),
        c(("gpus", "--json")),
        c(("vfio", "bind", "{vf0}", "--json")),
        c(("sriov", "disable", "{pf}", "--json"), 5),  # a VF on vfio-pci: refused
        c(("vfio", "unbind", "{vf0}", "--json")),
        c(("sriov", "disable", "{pf}", "--json")),
        ("/sys/bus/pci/devices/{pf}/sriov_drivers_autoprobe", "1"),
        c(("vfio", "bind", "{gpu}", "--json"), 6),  # the boot VGA: refused without --force
        c(("vfio", "bind", "{gpu}", "--force", "--json")),  # the whole group: VGA and its HD audio
        c(("vfio", "unbind", "{gpu}", "--json")),
        c(("create", "--type", "mtty-1", "--vm", a, "--json"), 99, crash_after=1),  # dies after the mdev is made
        c(("reconcile", "--json")),  # rolls it back
        c(("create", "--type", "mtty-2", "--vm", a, "--json"), 99, crash_after=2),  # dies after the definition
        c(("recover",)),
        c(("apply", "-f", plan_path, "--prune", "--json")),
        c(("destroy", "--vm", a, "--all", "--json")),
        c(("destroy", "--vm", b, "--all", "--json")),
        c(("inventory", "--json")),
    ]


def expected_exits() -> list[int]:
    return [c.exit for c in commands("PLAN") if isinstance(c, Command)]


class Normaliser:
    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.host = socket.gethostname()
        self.fixed = {U0, U1, U2, *DOMAINS.values()}
        self.uuids: dict[str, str] = {}

    def text(self, s: str) -> str:
        if self.root:
            s = s.replace(self.root, "")
        s = _TIME.sub("<time>", s)
        s = _UUID.sub(self._uuid, s)
        s = _META_HOST.sub('host="<host>"', s)
        # the host name as a word of its own: a host called `vm` must not turn `--vm` into `--<host>`
        return re.sub(rf"(?<![\w-]){re.escape(self.host)}(?![\w-])", "<host>", s) if self.host else s

    def _uuid(self, m: re.Match[str]) -> str:
        u = m.group(0)
        if u in self.fixed:
            return u
        return self.uuids.setdefault(u, f"<uuid-{len(self.uuids)}>")

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(k): self.value(x) for k, x in v.items() if k not in _DROPPED}
        return v


def _group_names(state: dict[str, Any], groups: dict[Any, str]) -> Any:
    """IOMMU group numbers inside --json output (gpus), renamed like differential_scenario does."""
    if isinstance(state, dict):
        return {
            k: (
                groups.setdefault(v, f"g{len(groups) + 1}")
                if k in _GROUP_KEYS and v is not None
                else _group_names(v, groups)
            )
            for k, v in state.items()
        }
    if isinstance(state, list):
        return [_group_names(x, groups) for x in state]
    return state


def domain_view(conn: Any, name: str, norm: Normaliser) -> dict[str, Any]:
    """The domain's hostdevs and vgpuadm metadata from libvirt's inactive XML (what vgpuadm writes there)."""
    doc = etree.fromstring(conn.lookupByName(name).XMLDesc(2).encode())  # VIR_DOMAIN_XML_INACTIVE
    hostdevs = [norm.text(etree.tostring(h, with_tail=False).decode()) for h in doc.findall("devices/hostdev")]
    meta = doc.find(f"metadata/{{{NS}}}{PREFIX}")
    return {
        "hostdevs": hostdevs,
        "metadata": norm.text(etree.tostring(meta, with_tail=False).decode()) if meta is not None else None,
    }


def run(
    cli: Cli,
    base: list[str],
    sysfs: Sysfs,
    conn: Any,
    plan_path: str,
    root: str = "",
) -> list[dict[str, Any]]:
    """Run the scenario with `cli` (in-process; crashes in a forked child, tests/kernel/guest_fork.py) on `base`
    (--root/-c);
    `conn` is a libvirt connection on which the scenario's domains are defined. One record per step."""
    norm = Normaliser(root)
    groups: dict[Any, str] = {}
    records: list[dict[str, Any]] = []
    for step in commands(plan_path):
        names = raw._names(sysfs)
        if isinstance(step, tuple):
            path, data = step
            sysfs.write(path.format(**names), data)
            records.append({"write": path, "data": data})
            continue
        args = [a.format(**names) for a in step.args]
        if step.crash_after is None:
            r = cli(*base, *args)
        else:  # on a real root the hook is honoured only once armed (vgpuadm/executor: CRASH_ARMED)
            armed = os.path.join(root or "/", CRASH_ARMED)
            os.makedirs(os.path.dirname(armed), mode=0o700, exist_ok=True)
            open(armed, "w").close()
            ((code, stdout, stderr),) = forked([[*base, *args]], env={CRASH_HOOK: str(step.crash_after)})
            r = Result(code, stdout, stderr)
        try:
            out: Any = json.loads(r.out) if r.out.strip() else None
        except ValueError:
            out = r.out
        records.append({
            "command": [a.replace(plan_path, "PLAN") for a in step.args],
            "exit": r.code,
            "json": _group_names(norm.value(out), groups),
            "stderr": norm.text(r.err).replace(plan_path, "PLAN").splitlines(),
            "tree": norm.value(raw.observe(sysfs)),
            "domains": {n: domain_view(conn, n, norm) for n in DOMAINS},
        })  # fmt: skip
    return records


def define_domains(conn: Any) -> None:
    for name, uuid in DOMAINS.items():
        conn.defineXML(domain_definition(name, uuid=uuid, vnc=False))


def undefine_domains(conn: Any) -> None:
    for name in DOMAINS:
        with contextlib.suppress(libvirt.libvirtError):  # not defined
            conn.lookupByName(name).undefine()


def write_plan(folder: str) -> str:
    path = os.path.join(folder, "verb-plan.yaml")
    with open(path, "w") as f:
        f.write(PLAN)
    return path


def counts(records: list[dict[str, Any]]) -> tuple[int, int]:
    """(commands, compared facts): a fact is one leaf of a record (exit code, a JSON value, a stderr line, a tree
    attribute, a hostdev, the metadata)."""

    def leaves(v: Any) -> Iterator[None]:
        if isinstance(v, dict):
            for x in v.values():
                yield from leaves(x)
        elif isinstance(v, list) and v:
            for x in v:
                yield from leaves(x)
        else:
            yield None

    cmds = [r for r in records if "command" in r]
    return len(cmds), sum(1 for r in records for _ in leaves(r))


def differences(real: list[dict[str, Any]], sim: list[dict[str, Any]]) -> Iterator[str]:
    if len(real) != len(sim):
        yield f"step count differs: real {len(real)}, simulated {len(sim)}"
    for i, (r, s) in enumerate(zip(real, sim, strict=False)):
        if r == s:
            continue
        label = " ".join(r.get("command", [r.get("write", "?")]))
        for key in sorted(set(r) | set(s)):
            if key == "tree":
                for k in sorted(set(r["tree"]) | set(s.get("tree", {}))):
                    if r["tree"].get(k) != s.get("tree", {}).get(k):
                        yield f"step {i} `{label}` tree {k}: real {r['tree'].get(k)!r}, simulated {s['tree'].get(k)!r}"
            elif r.get(key) != s.get(key):
                yield f"step {i} `{label}` {key}: real {r.get(key)!r}, simulated {s.get(key)!r}"
