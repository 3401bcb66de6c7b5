"""The CLI fuzz target: every command and option of the typer app (introspected, so a new command is covered
without touching this file), PER_COMMAND inputs per command and one test per top-level group, each input run in a
child forked for it alone (tests/fuzz/cli_zygote.py says why) against a simulated `mixed` host root whose libvirt
is the embedded driver under the root, as the CLI defaults on a sim root. A third of the inputs are tame (values
that can succeed, on the fuzz root), so that changing runs succeed often enough for the tree and XML properties.

Properties of every run (one that takes longer than TIMEOUT is a hang: killed, and a violation):
- exit 0, or a known non-zero code with one `error:` line and an optional `hint:` line (no traceback, no 70);
  `doctor`'s exit 1 with its report, and `hook run`'s one `vgpuadm: domain …` line (it speaks to libvirt), too;
- nothing outside the root changes: the canary directory beside it keeps its tree hash and the work directory
  holds what it held (writes the user asked for go to a scratch directory, which is emptied after each run);
- a --dry-run, --check, --explain or read command leaves the tree (sysfs, state, the domains' XML) as it was, and
  so does a changing command that fails (no partial change);
- every domain XML the embedded driver keeps afterwards is well-formed, its vgpuadm metadata reads back, and the
  markers some arguments carry (MARK, inside XML syntax: `<vgfz/>`, `' vgfz='`, `]]>`…) appear in it only inside
  text and attribute values, never as an element, attribute, comment or processing instruction.
The tree is put back from a pristine copy only when a run changed it."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fuzz import strategies as S
from tests.fuzz.conftest import Tally, examples
from tests.fuzz.props import KNOWN_CODES, clean_run, tree_hash
from vgpuadm.cli.app import build_app
from vgpuadm.virt.conn import EMBED_SUBDIR, embed_uri
from vgpuadm.virt.xml import parse_allocations

SERVER = Path(__file__).with_name("cli_zygote.py")
REPO = Path(__file__).resolve().parents[2]
# Not part of the tree's state: the lock files (rewritten by every changing run) and the embedded driver's
# runtime, cache and logs; its persistent domain XML (…/libvirt/etc) is compared.
SKIP = frozenset({"run/vgpuadm/lock", "run/vgpuadm/lock.owner"} | {f"var/lib/vgpuadm/libvirt/{d}" for d in
                                                                 ("run", "cache", "lib", "log")})  # fmt: skip
NO_LIBVIRT = "qemu+unix:///system?socket=/nonexistent/vgpuadm-fuzz.sock"
SAFE_URIS = [NO_LIBVIRT, "test:///default", "qemu:///embed?root=/nonexistent/fuzz", "bogus://x", "", "[/x]"]
TIMEOUT = 60.0  # seconds per input; a run still going then is a hang (a violation); `demo` takes ~10 s on a busy CI
# Commands whose non-zero exit is a report, not an error: (command, exit code) → stdout holds the report and stderr
# nothing but warnings. `doctor` exits 1 when a check fails (its --help says so).
REPORT_EXITS = {(("doctor",), 1)}
SETUP_TIMEOUT = 120.0
SERVER_SLACK = 30.0


# -- the command surface, from the app ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    opts: tuple[str, ...]  # () for an argument
    kind: str  # flag, int, float, str
    required: bool
    many: bool  # multiple option or nargs=-1 argument


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Param, ...]


def commands() -> list[Command]:
    """Every runnable command: leaves, and groups that run without a subcommand (`inventory`)."""
    out: list[Command] = []

    def params_of(c: Any) -> tuple[Param, ...]:
        ps = []
        for p in c.params:
            is_arg = p.param_type_name == "argument"
            kind = "flag" if getattr(p, "is_flag", False) else {"int": "int", "float": "float"}.get(
                p.bare_type().__name__ if isinstance(p.bare_type(), type) else "", "str")  # fmt: skip
            if p.name in ("_show_version",):
                continue
            ps.append(Param(p.name, () if is_arg else tuple(p.opts), kind, bool(p.required),
                            bool(getattr(p, "multiple", False)) or p.nargs == -1))  # fmt: skip
        return tuple(ps)

    def walk(c: Any, path: tuple[str, ...]) -> None:
        if hasattr(c, "commands"):
            if path and getattr(c, "invoke_without_command", False):
                out.append(Command(path, params_of(c)))
            for name, sub in c.commands.items():
                # A hidden command is what a daemon runs: `udev run` hands a restore off to a background run that
                # would change the root after the input ended (tests/unit/test_udev_install.py checks its input).
                if not getattr(sub, "hidden", False):
                    walk(sub, (*path, name))
        else:
            out.append(Command(path, params_of(c)))

    walk(typer.main.get_command(build_app()), ())
    return out


COMMANDS = commands()
CHANGING_FLAGS = ("--dry-run", "--check", "--explain")
SERVES = {("exporter",): "--once"}  # serves until stopped: fuzzed with the flag that makes it answer once and end
READ_ONLY = {("gpus",), ("types",), ("devices",), ("show",), ("inventory",), ("inventory", "merge"), ("sim", "list"),
             ("unit", "status"), ("hook", "status"), ("udev", "status"), ("reconcile",), ("doctor",), ("vms",), ("man",), ("snapshot",),
             ("mig", "status"), ("mig", "profiles"), ("mig", "instances")}  # fmt: skip


# -- the host ----------------------------------------------------------------------------------------------------


class Host:
    """The fuzz root, its canary, scratch and inputs directories, and the fork server (tests/fuzz/cli_zygote.py)
    that runs each input in a child of its own."""

    def __init__(self, work: Path) -> None:
        self.work, self.root, self.canary, self.other = work, work / "host", work / "canary", work / "other"
        self.scratch, self.inputs, self.pristine = work / "scratch", work / "inputs", work / "pristine"
        for d in (self.scratch, self.inputs):
            d.mkdir(parents=True)
        self.make_canary()
        (self.other / "sys").mkdir(parents=True)  # another root vgpuadm may use (and write its lock in)
        os.symlink("other", work / "other-link")
        env = {k: v for k, v in os.environ.items() if k not in ("LIBVIRT_DEFAULT_URI", "VGPUADM_ROOT", "COLUMNS")}
        env["PYTHONPATH"] = str(REPO)
        subprocess.run([sys.executable, "-m", "vgpuadm", "sim", "build", "mixed", str(self.root)], check=True,
                       capture_output=True, env=env)  # fmt: skip
        self.log = open(work / "server.log", "w")  # noqa: SIM115 — open for the server's life
        self.proc = subprocess.Popen([sys.executable, str(SERVER), str(self.root), str(self.scratch)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                     text=True)  # fmt: skip
        self.answer(SETUP_TIMEOUT)  # warm
        r = self.ask({"op": "define", "root": str(self.root), "names": S.VMS, "timeout": SETUP_TIMEOUT})
        assert r["code"] == 0, r
        for argv in (["create", "--type", "nvidia-288", "--vm", "web01"], ["create", "--type", "H200X-4C", "--vm",
                     "db02"], ["mdev", "create", "--type", "mtty-1", "--uuid", S.UUIDS[1]]):  # fmt: skip
            r = self.run(["--root", str(self.root), *argv])
            assert r["code"] == 0, r
        os.mkfifo(self.inputs / "fifo")
        (self.inputs / "dir").mkdir()
        self.xml = {p.stem: p.read_text() for p in sorted(self.domain_dir().glob("*.xml"))}
        assert sorted(self.xml) == sorted(S.VMS), self.xml
        shutil.copytree(self.root, self.pristine, symlinks=True)
        self.content = tree_hash(str(self.root), SKIP)
        self.stamp = self.fingerprint()
        self.canary_hash = tree_hash(str(self.canary))
        self.listing = sorted(os.listdir(work))

    def domain_dir(self) -> Path:
        return self.root / EMBED_SUBDIR / "etc" / "qemu"

    def make_canary(self) -> None:
        """A directory shaped like a target (an attribute to overwrite, a sys/ to pass for a root, a link); no input
        names it as the root, so nothing may ever write into it."""
        shutil.rmtree(self.canary, ignore_errors=True)
        (self.canary / "t").mkdir(parents=True)
        (self.canary / "t" / "create").write_text("keep\n")
        (self.canary / "sys").mkdir()
        os.symlink("t", self.canary / "link")

    def canary_changes(self) -> list[str]:
        """What changed in the canary ([] if nothing); the canary is made anew after a change."""
        if tree_hash(str(self.canary)) == self.canary_hash:
            return []
        found = sorted(str(p.relative_to(self.canary)) for p in self.canary.rglob("*"))
        self.make_canary()
        return found

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin
        if self.proc.poll() is not None:
            raise AssertionError(f"the fork server is gone (exit {self.proc.returncode}): {self.log_tail()}")
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self.answer(float(req["timeout"]) + SERVER_SLACK)

    def answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"the fork server did not answer within {timeout:.0f} s: {self.log_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the fork server died: {self.log_tail()}")
        return dict(json.loads(line))

    def log_tail(self) -> str:
        self.log.flush()
        return (self.work / "server.log").read_text(errors="replace")[-1500:]

    def run(self, argv: list[str], stdin: str | None = None) -> dict[str, Any]:
        return self.ask({"op": "run", "argv": argv, "stdin": stdin, "timeout": TIMEOUT})

    def fingerprint(self) -> dict[str, tuple[int, int, int]]:
        """Mode, size and mtime of every entry by path: a cheap "did anything change" (content is hashed only when
        this differs)."""
        out = {}
        for here, dirs, files in os.walk(self.root):
            rel = os.path.relpath(here, self.root)
            dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in SKIP]
            for name in files + dirs:
                relpath = os.path.normpath(os.path.join(rel, name))
                if relpath not in SKIP:
                    st = os.lstat(os.path.join(here, name))
                    out[relpath] = (st.st_mode, st.st_size, st.st_mtime_ns)
        return out

    def reset(self) -> None:
        """The tree (and with it the embedded driver's domains: every child reads them afresh) as it was: the
        entries whose fingerprint differs are put back from the pristine copy (copying the whole tree would cost
        ~0.5 s of CPU an input); the whole tree only if that did not make the fingerprints equal."""
        now = self.fingerprint()
        changed = {p for p in now.keys() & self.stamp.keys() if now[p] != self.stamp[p]}
        for rel in sorted(now.keys() - self.stamp.keys(), reverse=True):
            _remove(self.root / rel)
        dirs = []
        for rel in sorted((self.stamp.keys() - now.keys()) | changed):
            src, dst = self.pristine / rel, self.root / rel
            if src.is_dir() and not src.is_symlink():
                if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
                    _remove(dst)
                dst.mkdir(exist_ok=True)
                dirs.append(rel)
            elif not dst.parent.is_dir():
                continue  # under a directory being put back: copied with it below
            else:
                if dst.is_symlink() or dst.exists():
                    _remove(dst)
                shutil.copy2(src, dst, follow_symlinks=False)
        touched = set(dirs) | {os.path.dirname(p) for p in changed | now.keys() ^ self.stamp.keys()}
        for rel in sorted((p for p in touched if p in self.stamp or not p), key=lambda p: -p.count("/")):
            shutil.copystat(self.pristine / rel, self.root / rel)
        if self.fingerprint() != self.stamp:
            shutil.rmtree(self.root)
            shutil.copytree(self.pristine, self.root, symlinks=True)
            assert self.fingerprint() == self.stamp, "a reset did not give the pristine tree back"

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    h = Host(tmp_path_factory.mktemp("fuzz-cli"))
    yield h
    h.close()


# -- arguments ---------------------------------------------------------------------------------------------------

MARK = "vgfz"
# Values with XML syntax around the marker, each also behind a valid-looking prefix (the prefix may pass a grammar
# that checks only the start).
_MARKED = [f"<{MARK}/>", f"' {MARK}='1", f'" {MARK}="1', f"]]><{MARK}/>", f"--><{MARK}/><!--", f"<?{MARK}?>",
           f"&lt;{MARK}/&gt;", f"x<{MARK} a='1'>y</{MARK}>"]  # fmt: skip


def marked(prefixes: list[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda p, m: p + m, st.sampled_from(["", *prefixes]), st.sampled_from(_MARKED))


# Values that can succeed, for the tame third of the inputs (the others mix in near misses and hostile text): enough
# successful changing runs for the partial-change and XML properties to bite.
TAME = {"gpu": S.PCIS[:10], "pf": ["0000:18:00.0", "0000:41:00.0"], "vf": ["0000:18:00.4", "0000:18:00.5"],
        "uuid": S.UUIDS, "type_name": S.TYPES, "vm": S.VMS, "count": ["1", "2"], "total": ["1", "2"],
        "num": ["2", "4"], "policy": ["pack", "spread"], "display": ["vnc", "spice", "none"], "numa": ["0"],
        "param": ["frame_rate_limiter=0", "enable_uvm=1"], "profile": ["1g.18gb", "2g.35gb", "19", "14"],
        "timeout": ["5"]}  # fmt: skip


def value_for(data: st.DataObject, host: Host, cmd: Command, p: Param, tame: bool = False) -> str:
    """A value for one parameter, chosen by what its name says it holds; anything else gets hostile text."""
    name = p.name.lower()
    if tame and name in TAME:
        return data.draw(st.sampled_from(TAME[name]))
    if p.kind == "int" or name in ("count", "total", "num", "numa", "times", "after", "placement", "instance"):
        return data.draw(S.integer)
    if p.kind == "float" or name in ("timeout", "wait"):
        return data.draw(S.number)
    if cmd.path[:1] == ("sim",) and name == "directory":
        if cmd.path in (("sim", "build"), ("sim", "import-umockdev"), ("sim", "import")):
            return data.draw(out_path(host))
        return data.draw(st.one_of(st.just(str(host.root)), st.just("../host"), st.just(str(host.other)),
                                   out_path(host), S.hostile()))  # fmt: skip
    if name in ("output", "directory", "dir", "out"):
        return data.draw(out_path(host))
    if name in ("plan_file", "recording", "files", "rom_file", "types_from", "archive") or name.endswith("xml_dir") \
            or name.endswith("domains_xml"):  # fmt: skip
        return input_path(data, host, name)
    if name == "connect":
        return data.draw(st.sampled_from(SAFE_URIS))
    if name in ("gpu", "pf", "parent") or (name == "vf" and not p.opts):
        return data.draw(S.pci)
    if name == "vf":
        return data.draw(st.one_of(st.sampled_from(["0000:18:00.4", "0000:18:00.5", "0000:41:00.4"]), S.pci))
    if name == "uuid":
        return data.draw(S.uuid)
    if "type" in name:
        return data.draw(st.one_of(S.type_name, marked(["nvidia-63", "mtty-1"])))
    if name in ("vm", "host", "domain"):
        return data.draw(st.one_of(S.vm_name, marked(S.VMS)))
    if name == "operation":
        return data.draw(st.one_of(st.sampled_from(["prepare", "start", "started", "stopped", "release"]),
                                   S.hostile()))  # fmt: skip
    if name == "sub_operation":
        return data.draw(st.one_of(st.sampled_from(["begin", "end", "-"]), S.hostile()))
    if name == "param":
        return data.draw(st.one_of(S.param, marked(["frame_rate_limiter=", "enable_uvm=1,x="])))
    if name == "policy":
        return data.draw(st.one_of(st.sampled_from(["pack", "spread", "PACK", "random"]), S.hostile()))
    if name == "display":
        return data.draw(st.one_of(st.sampled_from(["vnc", "spice", "none", "on", "off", "egl-headless"]),
                                   S.hostile(), marked(["vnc", "spice"])))  # fmt: skip
    if name in ("fmt", "format"):
        return data.draw(st.sampled_from(S.FORMATS))
    if name == "profile":
        return data.draw(st.one_of(st.sampled_from(S.PROFILES), S.hostile()))
    if name == "errno_name":
        return data.draw(st.sampled_from(S.ERRNOS))
    if name == "path_glob":
        return data.draw(st.sampled_from(["*/create", "*/nvidia-63/create", "*", "[", "*/remove", "/sys/**"]))
    return data.draw(st.one_of(S.hostile(), marked([])))


def out_path(host: Host) -> st.SearchStrategy[str]:
    """Where a command may write because the user said so: the scratch directory (new, existing, odd names), or
    places it must refuse (the non-empty root or another directory, a FIFO)."""
    s = str(host.scratch)
    return st.one_of(
        st.sampled_from([f"{s}/new", "new", f"{s}/a/b/c", f"{s}/../scratch/x", f"{s}/é [/x] 'q'", s, str(host.root),
                         str(host.other), f"{s}/out.json", "./x.html", str(host.inputs / "fifo")]),
        S.text.filter(lambda t: t and "/" not in t and t not in (".", "..") and not t.startswith("-")),
    )  # fmt: skip


def input_path(data: st.DataObject, host: Host, name: str) -> str:
    """A file (or directory) the command reads: generated content written into inputs/, or odd paths."""
    from tests.fuzz.test_parsers import domain_with_metadata, recordings

    odd = [str(host.inputs / "fifo"), str(host.inputs / "dir"), "/dev/zero", "/dev/null", str(host.inputs / "none"),
           str(host.canary / "t" / "create"), str(host.canary), ""]  # fmt: skip
    if data.draw(st.integers(0, 3)) == 0:
        return data.draw(st.sampled_from(odd))
    if name.endswith("xml_dir") or name.endswith("domains_xml") or name == "types_from":
        d = host.inputs / f"xml{data.draw(st.integers(0, 2))}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        for vm, xml in host.xml.items():
            text = data.draw(st.one_of(st.just(xml), domain_with_metadata()))
            (d / f"{vm}.xml").write_text(text)
        return str(d)
    path = host.inputs / f"{name}-{data.draw(st.integers(0, 2))}"
    if name == "rom_file" and data.draw(st.booleans()):  # a path that reaches the XML: XML syntax in its name
        path = host.inputs / ("rom" + data.draw(st.sampled_from([m for m in _MARKED if "/" not in m])))
    if name == "plan_file":
        path.write_text(data.draw(S.plan_text()))
    elif name == "recording":
        path.write_text(data.draw(recordings()))
    elif name == "files":
        doc = data.draw(st.sampled_from(["{}", "[]", '{"schema": "vgpuadm-inventory/1"}', "nan", "\x00"]))
        path.write_text(doc)
    else:
        path.write_bytes(data.draw(st.binary(max_size=64)))
    return str(path)


def argv_for(data: st.DataObject, host: Host, cmd: Command) -> tuple[list[str], bool]:
    """(argv, whether it must leave the tree as it was)."""
    args: list[str] = []
    positional: list[str] = []
    tame = data.draw(st.integers(0, 2)) == 0
    for p in cmd.params:
        if not p.required and not data.draw(st.integers(0, 2)):
            continue
        if p.kind == "flag":
            if p.opts[0] in CHANGING_FLAGS and not data.draw(st.integers(0, 2)):
                continue  # a third of the runs with a --dry-run are real changing runs
            args.append(p.opts[0])
            continue
        for _ in range(data.draw(st.integers(1, 3)) if p.many else 1):
            value = value_for(data, host, cmd, p, tame)
            if not p.opts:
                positional.append(value)
            elif value.startswith("-") or data.draw(st.booleans()):
                args.append(f"{data.draw(st.sampled_from(p.opts))}={value}")  # `--opt=-1` is how one passes a dash
            else:
                args += [data.draw(st.sampled_from(p.opts)), value]
    if not tame and data.draw(st.integers(0, 12)) == 0:
        args.append(data.draw(st.sampled_from(["--nope", "-z", "--json=x", "--", "extra", "--help"])))
    if cmd.path in SERVES and SERVES[cmd.path] not in args:
        args.append(SERVES[cmd.path])
    data.draw(st.randoms(use_true_random=False)).shuffle(args)
    root_args = ["--root", str(host.root)] if tame else global_args(data, host)
    argv = [*root_args, *cmd.path, *args, *positional]
    on_fuzz_root = os.path.realpath(os.path.join(host.scratch, root_args[1])) == str(host.root) and root_args[1]
    unchanged = (
        (cmd.path in READ_ONLY and "--fix" not in args)
        or any(f in args for f in CHANGING_FLAGS)
        # another root: the fuzz root must not change at all (`sim` commands name their tree as an argument)
        or (not on_fuzz_root and cmd.path[0] != "sim")
    )
    return argv, unchanged


def global_args(data: st.DataObject, host: Host) -> list[str]:
    """--root is always given (without it the command would act on this machine's /), mostly the fuzz root; on
    another root, -c always names a harmless URI (a plain root would default to qemu:///system)."""
    wait = ["--no-wait"] if data.draw(st.integers(0, 7)) == 0 else []
    if data.draw(st.integers(0, 9)):
        root = data.draw(st.sampled_from([str(host.root), str(host.root), str(host.root) + "/", "../host"]))
        connect = data.draw(st.sampled_from([None, None, None, embed_uri(str(host.root)), *SAFE_URIS]))
        return ["--root", root, *(["-c", connect] if connect is not None else []), *wait]
    root = data.draw(st.sampled_from([str(host.other), "../other", str(host.work / "other-link"), "",
                                      str(host.canary / "t" / "create"), str(host.inputs / "none"), "[/x]", "'",
                                      "a\nb", str(host.inputs / "fifo"), str(host.inputs / "none" / "x")]))  # fmt: skip
    return ["--root", root, "-c", data.draw(st.sampled_from(SAFE_URIS[:2])), *wait]


def stdin_for(data: st.DataObject, host: Host, cmd: Command) -> str | None:
    """`hook run` reads the domain's XML on stdin, as libvirt gives it: a domain of the root, or a generated one."""
    if cmd.path != ("hook", "run"):
        return None
    from tests.fuzz.test_parsers import domain_with_metadata

    return data.draw(st.one_of(st.sampled_from(sorted(host.xml.values())), domain_with_metadata(), S.hostile()))


# -- the properties ------------------------------------------------------------------------------------------------


def injected(doc: Any) -> str:
    """'' when MARK appears in the document only inside text and attribute values, else where it sits."""
    for node in doc.iter():
        if not isinstance(node.tag, str):  # a comment or a processing instruction
            if MARK in (node.text or "") or MARK in str(getattr(node, "target", "")):
                return f"in a {type(node).__name__}: {etree.tostring(node)[:200]!r}"
            continue
        if MARK in node.tag:
            return f"as the element {node.tag!r}"
        for key in node.attrib:
            if MARK in key:
                return f"as the attribute {key!r} of <{node.tag}>"
        for prefix, uri in node.nsmap.items():
            if MARK in (prefix or "") or MARK in (uri or ""):
                return f"as the namespace {prefix}={uri!r} on <{node.tag}>"
    return ""


def clean_hook_run(r: dict[str, Any]) -> str:
    """`hook run` speaks to libvirt, not to a user (vgpuadm/cli/hook.py): every stderr line is `vgpuadm: domain …`,
    and a failure is exactly one such line with a known non-zero code."""
    lines = r["err"].splitlines()
    if "Traceback" in r["err"] or r["code"] not in KNOWN_CODES:
        return f"exit {r['code']}: {r['err'][-600:]!r}"
    if any(not x.startswith("vgpuadm: domain ") for x in lines) or (r["code"] != 0 and len(lines) != 1):
        return f"exit {r['code']} without one `vgpuadm: domain …` line per message: {r['err'][-600:]!r}"
    return ""


def check_domains(tally: Tally, host: Host, argv: list[str]) -> None:
    for path in sorted(host.domain_dir().glob("*.xml")):
        text = path.read_bytes()
        try:
            doc = etree.fromstring(text)
        except etree.XMLSyntaxError as exc:
            raise tally.violation(f"vgpuadm {argv}: {path.name} is not well-formed: {exc}") from exc
        where = injected(doc)
        if where:
            raise tally.violation(f"vgpuadm {argv}: a marker reached {path.name} {where}")
        try:
            parse_allocations(doc)
        except Exception as exc:
            raise tally.violation(f"vgpuadm {argv}: {path.name}'s metadata does not read back: {exc}") from exc


def check(tally: Tally, host: Host, cmd: Command, data: st.DataObject) -> None:
    argv, unchanged = argv_for(data, host, cmd)
    stdin = stdin_for(data, host, cmd)
    r = host.run(argv, stdin)
    shown = f"vgpuadm {argv}" + (f" with stdin {stdin[:300]!r}" if stdin is not None else "")
    if r["hang"]:
        host.reset()
        raise tally.violation(f"{shown} did not end within {TIMEOUT:.0f} s (killed)\nstderr: {r['err'][-800:]}")
    warnings_only = all(x.startswith("warning: ") for x in r["err"].splitlines())
    report = (cmd.path, r["code"]) in REPORT_EXITS and bool(r["out"]) and warnings_only
    problem = "" if report else clean_run(r["code"], r["out"], r["err"])
    if problem and cmd.path == ("hook", "run") and not clean_hook_run(r):
        problem = ""  # its own one line (a usage error before it runs is the CLI's `error:` line)
    if problem:
        raise tally.violation(f"{shown}: {problem}\nstdout: {r['out'][-500:]}\nstderr: {r['err'][-800:]}")
    changes = host.canary_changes()
    if changes:
        raise tally.violation(f"{shown} changed the canary beside the root: it now holds {changes}")
    extra = sorted(set(os.listdir(host.work)) - set(host.listing))
    if extra:
        raise tally.violation(f"{shown} wrote {extra} beside the root")
    for name in os.listdir(host.scratch):
        _remove(host.scratch / name)
    if host.fingerprint() != host.stamp:
        try:
            if (unchanged or r["code"] != 0) and tree_hash(str(host.root), SKIP) != host.content:
                what = "left a partial change" if r["code"] else "changed the tree"
                raise tally.violation(f"{shown} (exit {r['code']}) {what}\nstderr: {r['err'][-800:]}")
            check_domains(tally, host, argv)
        finally:
            host.reset()
    tally.ok() if r["code"] == 0 else tally.error()


NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a run costs ~0.2 s: the failing input is shown as is
PER_COMMAND = 4  # inputs per command, per run; the lane's total (tests/fuzz) must stay >= 10,000
GROUPS: dict[str, list[Command]] = {}
for _cmd in COMMANDS:
    GROUPS.setdefault(_cmd.path[0], []).append(_cmd)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_cli(tally: Tally, host: Host, group: str) -> None:
    """Every command of one top-level group (`mdev` is `mdev create` and `mdev remove`), PER_COMMAND inputs each."""
    commands = GROUPS[group]

    @settings(examples(PER_COMMAND * len(commands)), phases=NO_SHRINK)
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        check(tally, host, data.draw(st.sampled_from(commands)), data)

    one()


@pytest.mark.parametrize(
    ("xml", "where"),
    [
        (f"<domain><name>a<{MARK}/></name></domain>", f"as the element '{MARK}'"),
        (f"<domain><name x='1' {MARK}='1'>a</name></domain>", f"as the attribute '{MARK}' of <name>"),
        (f"<domain><!--<{MARK}/>--></domain>", "in a _Comment: b'<!--<vgfz/>-->'"),
        (f"<domain><name>&lt;{MARK}/&gt;</name><rom file=\"' {MARK}='1\"/></domain>", ""),
    ],
    ids=["element", "attribute", "comment", "escaped"],
)
def test_the_marker_check_sees_markup_and_only_markup(xml: str, where: str) -> None:
    """The XML property itself: a marker as markup is found, one inside text or an attribute value is not."""
    assert injected(etree.fromstring(xml)) == where
