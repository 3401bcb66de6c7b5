"""The CLI fuzz target: every command and option of the typer app (introspected, so a new command is covered
without touching this file) with generated arguments, run in-process (tests/fuzz/cli_server.py) against a
simulated `mixed` host root whose libvirt is the embedded driver under the root, as the CLI defaults on a sim root.

Properties of every run:
- exit 0, or a known non-zero code with one `error:` line and an optional `hint:` line (no traceback, no 70);
- nothing outside the root changes: the canary directory beside it keeps its tree hash and the work directory
  holds what it held (writes the user asked for go to a scratch directory, which is emptied after each run);
- a --dry-run, --check, --explain or read command leaves the tree (sysfs, state, the domains' XML) as it was, and
  so does a changing command that fails (no partial change);
- every domain XML libvirt holds afterwards is well-formed, its vgpuadm metadata reads back, and no argument
  holding XML's special characters appears in it unescaped.
The tree is put back from a pristine copy (and the domains redefined) only when a run changed it."""

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
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from tests.fuzz import strategies as S
from tests.fuzz.conftest import Tally, examples
from tests.fuzz.props import clean_run, tree_hash
from vgpuadm.cli.app import build_app
from vgpuadm.virt.conn import embed_uri
from vgpuadm.virt.xml import parse_allocations

pytestmark = pytest.mark.libvirt

SERVER = Path(__file__).with_name("cli_server.py")
REPO = Path(__file__).resolve().parents[2]
# Not part of the tree's state: the lock files (rewritten by every changing run) and the embedded driver's
# runtime, cache and logs; its persistent domain XML (…/libvirt/etc) is compared.
SKIP = frozenset({"run/vgpuadm.lock", "run/vgpuadm.lock.owner"} | {f"var/lib/vgpuadm/libvirt/{d}" for d in
                                                                 ("run", "cache", "lib", "log")})  # fmt: skip
NO_LIBVIRT = "qemu+unix:///system?socket=/nonexistent/vgpuadm-fuzz.sock"
SAFE_URIS = [NO_LIBVIRT, "test:///default", "qemu:///embed?root=/nonexistent/fuzz", "bogus://x", "", "[/x]"]
TIMEOUT = 120.0


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
                walk(sub, (*path, name))
        else:
            out.append(Command(path, params_of(c)))

    walk(typer.main.get_command(build_app()), ())
    return out


COMMANDS = commands()
CHANGING_FLAGS = ("--dry-run", "--check", "--explain")
READ_ONLY = {("gpus",), ("types",), ("devices",), ("inventory",), ("inventory", "merge"), ("sim", "list"),
             ("unit", "status"), ("reconcile",)}  # fmt: skip


# -- the host ----------------------------------------------------------------------------------------------------


class Host:
    """The fuzz root, its canary, scratch and inputs directories, and the server process."""

    def __init__(self, work: Path) -> None:
        self.work, self.root, self.canary = work, work / "host", work / "canary"
        self.scratch, self.inputs, self.pristine = work / "scratch", work / "inputs", work / "pristine"
        for d in (self.scratch, self.inputs):
            d.mkdir(parents=True)
        self.make_canary()
        env = {k: v for k, v in os.environ.items() if k not in ("LIBVIRT_DEFAULT_URI", "VGPUADM_ROOT", "COLUMNS")}
        env["PYTHONPATH"] = str(REPO)
        subprocess.run([sys.executable, "-m", "vgpuadm", "sim", "build", "mixed", str(self.root)], check=True,
                       capture_output=True, env=env)  # fmt: skip
        self.log = open(work / "server.log", "w")  # noqa: SIM115 — open for the server's life
        self.proc = subprocess.Popen([sys.executable, str(SERVER), str(self.root)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=self.scratch,
                                     text=True)  # fmt: skip
        self.ask({"op": "define", "names": S.VMS})
        for argv in (["create", "--type", "nvidia-288", "--vm", "web01"], ["create", "--type", "H200X-4C", "--vm",
                     "db02"], ["mdev", "create", "--type", "mtty-1", "--uuid", S.UUIDS[1]]):  # fmt: skip
            r = self.run(["--root", str(self.root), *argv])
            assert r["code"] == 0, r
        os.mkfifo(self.inputs / "fifo")
        (self.inputs / "dir").mkdir()
        self.xml = self.ask({"op": "domains"})["xml"]
        shutil.copytree(self.root, self.pristine, symlinks=True,
                        ignore=lambda d, names: ["libvirt"] if d.endswith("vgpuadm") and "libvirt" in names else [])  # fmt: skip
        self.content = tree_hash(str(self.root), SKIP)
        self.stamp = self.fingerprint()
        self.canary_hash = tree_hash(str(self.canary))
        self.listing = sorted(os.listdir(work))

    def make_canary(self) -> None:
        """A directory shaped like a target: an attribute to overwrite, a sys/ to pass for a root, a link."""
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
        assert self.proc.stdin and self.proc.stdout
        if self.proc.poll() is not None:
            raise AssertionError(f"the CLI server is gone (exit {self.proc.returncode}): {self.log_tail()}")
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"vgpuadm did not answer within {TIMEOUT:.0f} s: {req}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the CLI server died on {req}: {self.log_tail()}")
        return dict(json.loads(line))

    def log_tail(self) -> str:
        self.log.flush()
        return (self.work / "server.log").read_text(errors="replace")[-1500:]

    def run(self, argv: list[str]) -> dict[str, Any]:
        return self.ask({"op": "run", "argv": argv})

    def fingerprint(self) -> list[tuple[str, int, int, int]]:
        """Path, mode, size and mtime of every entry: a cheap "did anything change" (content is hashed only when
        this differs)."""
        out = []
        for here, dirs, files in os.walk(self.root):
            rel = os.path.relpath(here, self.root)
            dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in SKIP]
            for name in files + dirs:
                relpath = os.path.normpath(os.path.join(rel, name))
                if relpath in SKIP:
                    continue
                st = os.lstat(os.path.join(here, name))
                out.append((relpath, st.st_mode, st.st_size, st.st_mtime_ns))
        return sorted(out)

    def reset(self) -> None:
        self.ask({"op": "reset", "pristine": str(self.pristine), "xml": self.xml})
        assert tree_hash(str(self.root), SKIP) == self.content, "reset did not restore the pristine tree"
        self.stamp = self.fingerprint()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    h = Host(tmp_path_factory.mktemp("fuzz-cli"))
    yield h
    h.close()


# -- arguments ---------------------------------------------------------------------------------------------------


def value_for(data: st.DataObject, host: Host, cmd: Command, p: Param) -> str:
    """A value for one parameter, chosen by what its name says it holds; anything else gets hostile text."""
    name = p.name.lower()
    if p.kind == "int":
        return data.draw(S.integer)
    if p.kind == "float":
        return data.draw(S.number)
    if cmd.path[:1] == ("sim",) and name == "directory":
        if cmd.path == ("sim", "build") or cmd.path == ("sim", "import-umockdev"):
            return data.draw(out_path(host))
        return data.draw(st.one_of(st.just(str(host.root)), st.just("../host"), st.just(str(host.canary)),
                                   out_path(host), S.hostile()))  # fmt: skip
    if name in ("output", "directory", "dir"):
        return data.draw(out_path(host))
    if name in ("plan_file", "recording", "files", "rom_file", "types_from", "domain_xml_dir", "domains_xml"):
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
        return data.draw(S.type_name)
    if name in ("vm", "host"):
        return data.draw(S.vm_name)
    if name == "param":
        return data.draw(S.param)
    if name == "policy":
        return data.draw(st.one_of(st.sampled_from(["pack", "spread", "PACK", "random"]), S.hostile()))
    if name == "display":
        return data.draw(st.one_of(st.sampled_from(["vnc", "spice", "none", "on", "off", "egl-headless"]),
                                   S.hostile()))  # fmt: skip
    if name in ("fmt", "format"):
        return data.draw(st.sampled_from(S.FORMATS))
    if name == "profile":
        return data.draw(st.one_of(st.sampled_from(S.PROFILES), S.hostile()))
    if name == "errno_name":
        return data.draw(st.sampled_from(S.ERRNOS))
    if name == "path_glob":
        return data.draw(st.sampled_from(["*/create", "*/nvidia-63/create", "*", "[", "*/remove", "/sys/**"]))
    return data.draw(S.hostile())


def out_path(host: Host) -> st.SearchStrategy[str]:
    """Where a command may write because the user said so: the scratch directory (new, existing, odd names), or
    places it must refuse (the non-empty root or canary, a file)."""
    s = str(host.scratch)
    return st.one_of(
        st.sampled_from([f"{s}/new", "new", f"{s}/a/b/c", f"{s}/../scratch/x", f"{s}/é [/x] 'q'", s, str(host.root),
                         str(host.canary), str(host.canary / "t" / "create"), f"{s}/out.json", "./x.html"]),
        S.text.filter(lambda t: t and "/" not in t and t not in (".", "..") and not t.startswith("-")),
    )  # fmt: skip


def input_path(data: st.DataObject, host: Host, name: str) -> str:
    """A file (or directory) the command reads: generated content written into inputs/, or odd paths."""
    from tests.fuzz.test_parsers import domain_with_metadata, recordings

    odd = [str(host.inputs / "fifo"), str(host.inputs / "dir"), "/dev/zero", "/dev/null", str(host.inputs / "none"),
           str(host.canary / "t" / "create"), str(host.canary), ""]  # fmt: skip
    if data.draw(st.integers(0, 3)) == 0:
        return data.draw(st.sampled_from(odd))
    if name in ("domain_xml_dir", "domains_xml", "types_from"):
        d = host.inputs / f"xml{data.draw(st.integers(0, 2))}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        for vm, xml in host.xml.items():
            text = data.draw(st.one_of(st.just(xml), domain_with_metadata()))
            (d / f"{vm}.xml").write_text(text)
        return str(d)
    path = host.inputs / f"{name}-{data.draw(st.integers(0, 2))}"
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
    for p in cmd.params:
        if not p.required and not data.draw(st.integers(0, 2)):
            continue
        if p.kind == "flag":
            if p.opts[0] in CHANGING_FLAGS and not data.draw(st.integers(0, 2)):
                continue  # a third of the runs with a --dry-run are real changing runs
            args.append(p.opts[0])
            continue
        for _ in range(data.draw(st.integers(1, 3)) if p.many else 1):
            value = value_for(data, host, cmd, p)
            if not p.opts:
                positional.append(value)
            elif value.startswith("-") or data.draw(st.booleans()):
                args.append(f"{data.draw(st.sampled_from(p.opts))}={value}")  # `--opt=-1` is how one passes a dash
            else:
                args += [data.draw(st.sampled_from(p.opts)), value]
    if data.draw(st.integers(0, 12)) == 0:
        args.append(data.draw(st.sampled_from(["--nope", "-z", "--json=x", "--", "extra", "--help"])))
    data.draw(st.randoms(use_true_random=False)).shuffle(args)
    root_args = global_args(data, host)
    argv = [*root_args, *cmd.path, *args, *positional]
    unchanged = (
        (cmd.path in READ_ONLY and "--fix" not in args)
        or any(f in args for f in CHANGING_FLAGS)
        or (cmd.path == ("apply",) and "--check" in args)
        or root_args[1] != str(host.root)  # another root: the fuzz root must not change at all
    )
    return argv, unchanged


def global_args(data: st.DataObject, host: Host) -> list[str]:
    """--root is always given (without it the command would act on this machine's /), mostly the fuzz root; on
    another root, -c always names a harmless URI (a plain root would default to qemu:///system)."""
    if data.draw(st.integers(0, 9)):
        root = data.draw(st.sampled_from([str(host.root), str(host.root), str(host.root) + "/", "../host"]))
        connect = data.draw(st.sampled_from([None, None, None, embed_uri(str(host.root)), *SAFE_URIS]))
        return ["--root", root, *(["-c", connect] if connect is not None else [])]
    root = data.draw(st.sampled_from([str(host.canary), "../canary", str(host.canary / "t" / "create"), "",
                                      str(host.inputs / "none"), str(host.scratch), "[/x]", "'", "a\nb"]))  # fmt: skip
    return ["--root", root, "-c", data.draw(st.sampled_from(SAFE_URIS[:2]))]


# -- the properties ------------------------------------------------------------------------------------------------


def check_domains(tally: Tally, host: Host, argv: list[str]) -> None:
    etc = host.root / "var/lib/vgpuadm/libvirt/etc/qemu"
    risky = [a for a in argv if any(c in a for c in "<>&\"'") and len(a) > 1]
    for path in sorted(etc.glob("*.xml")):
        text = path.read_text()
        try:
            doc = etree.fromstring(text.encode())
        except etree.XMLSyntaxError as exc:
            raise tally.violation(f"{argv}: {path.name} is not well-formed: {exc}") from exc
        try:
            parse_allocations(doc)
        except Exception as exc:
            raise tally.violation(f"{argv}: {path.name}'s metadata does not read back: {exc}") from exc
        for a in risky:
            if a in text:
                raise tally.violation(f"{argv}: {a!r} appears unescaped in {path.name}")


@examples(300)
@given(data=st.data())
def test_cli(tally: Tally, host: Host, data: st.DataObject) -> None:
    cmd = data.draw(st.sampled_from(COMMANDS))
    argv, unchanged = argv_for(data, host, cmd)
    r = host.run(argv)
    problem = clean_run(r["code"], r["out"], r["err"])
    if problem:
        raise tally.violation(f"vgpuadm {argv}: {problem}\nstdout: {r['out'][-500:]}\nstderr: {r['err'][-800:]}")
    changes = host.canary_changes()
    if changes:
        raise tally.violation(f"vgpuadm {argv} changed the canary beside the root: it now holds {changes}")
    extra = sorted(set(os.listdir(host.work)) - set(host.listing))
    if extra:
        raise tally.violation(f"vgpuadm {argv} wrote {extra} beside the root")
    for name in os.listdir(host.scratch):
        path = host.scratch / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if host.fingerprint() != host.stamp:
        try:
            if (unchanged or r["code"] != 0) and tree_hash(str(host.root), SKIP) != host.content:
                what = "left a partial change" if r["code"] else "changed the tree"
                raise tally.violation(f"vgpuadm {argv} (exit {r['code']}) {what}\nstderr: {r['err'][-800:]}")
            check_domains(tally, host, argv)
        finally:
            host.reset()
    tally.ok() if r["code"] == 0 else tally.error()
