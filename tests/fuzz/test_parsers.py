"""Parser-level fuzz targets, in-process and cheap (the whole lane today): plan files, domain
metadata values, rendered domain XML, journals (what `recover` reads), inventory reports (what `inventory merge`
reads) and umockdev recordings (what `sim import-umockdev` reads).

Properties of every input: the parser returns, or raises a VgpuadmError whose message and hint are one line each;
never another exception. What a parser accepts holds only values of their grammar (checked here against the
grammars written out independently); XML rendered from any value is well-formed and gives the value back (nothing
unescaped); an import writes nothing outside its target (a canary directory beside it keeps its tree hash)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from tests.fuzz import strategies as S
from tests.fuzz.conftest import Tally, examples
from tests.fuzz.mutate import doc_mutants, text_mutants
from tests.fuzz.props import clean_error, tree_hash
from vgpuadm import modes
from vgpuadm.errors import VgpuadmError
from vgpuadm.executor import read_journal
from vgpuadm.executor.journalcheck import check_document
from vgpuadm.host.nvidia_smi_vgpu import parse_gpu_usage, parse_vgpu_usage
from vgpuadm.host.umockdev import load as load_umockdev
from vgpuadm.io.planfile import parse_plan
from vgpuadm.model import Allocation
from vgpuadm.report import merge as merge_mod
from vgpuadm.steps import LEGACY_KINDS, STEP_KINDS
from vgpuadm.virt.xml import NS, metadata_xml, parse_allocations

# The grammars a value read back must match, written out here (not imported) so the product cannot agree with
# itself by accident.
TYPE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
PCI = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PARENT = re.compile(rf"{PCI.pattern}|[A-Za-z][A-Za-z0-9_-]{{0,63}}")
VM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+:-]*")
NO_CONTROL = re.compile(r"[^\x00-\x1f\x7f]*")


def _attempt(tally: Tally, fn: Any, *args: Any) -> tuple[bool, Any]:
    """(True, fn(*args)), or (False, None) after a clean VgpuadmError (counted); any other exception is a
    violation."""
    try:
        return True, fn(*args)
    except VgpuadmError as exc:
        problem = clean_error(exc)
        if problem:
            raise tally.violation(problem) from exc
        tally.error()
        return False, None
    except Exception as exc:
        raise tally.violation(f"{getattr(fn, '__name__', fn)} raised {type(exc).__name__}: {exc}") from exc


# -- plan files ----------------------------------------------------------------------------------------------------


PLAN_TOKENS = [":", ": ", "- ", "&a ", "*a", "<<: *a\n", "!!str ", "!!python/object:os.system ", "'", '"', "\n", "#",
               "{", "}", "[", "]", "? ", "|\n", ">", "%YAML 1.1\n", "---\n", "...\n", "\t", "~", "1e999", "0x1f",
               "[/x]", "..", "vms:", "type:", "count:", "params:", "passthrough:", "web01:", "\ufeff"]  # fmt: skip


@examples(120)
@given(seed=S.plan_text(), rng=st.randoms(use_true_random=False))
def test_plan_files(tally: Tally, seed: str, rng: Any) -> None:
    """`apply -f`'s parser on structure-aware plans and 11 textual mutants of each."""
    for text in [seed, *text_mutants(rng, seed, PLAN_TOKENS, 11)]:
        _check_plan(tally, text)


def _check_plan(tally: Tally, text: str) -> None:
    accepted, plan = _attempt(tally, parse_plan, text, "plan.yaml")
    if not accepted:
        return
    for name, vm in plan.vms.items():
        if not VM.fullmatch(name):
            raise tally.violation(f"plan {text!r} accepted the VM name {name!r}")
        if vm.gpu is not None and not PCI.fullmatch(vm.gpu):
            raise tally.violation(f"plan {text!r} accepted gpu {vm.gpu!r} for {name}")
        if vm.params is not None and not NO_CONTROL.fullmatch(vm.params):
            raise tally.violation(f"plan {text!r} accepted params {vm.params!r} for {name}")
    tally.ok()


# -- domain metadata and the XML rendered from it --------------------------------------------------------------------

_XML_TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\ufffe\uffff"),
                    max_size=30)  # fmt: skip
_MODE = st.sampled_from(["mdev", "vf", "pci", "MDEV", "", "sriov", "../x"])
_OPTION_NAMES = ["display", "ramfb", "managed", "rom_bar", "rom_file", "rom_enabled", "guest_address", "multifunction"]
_OPTION_VALUES = ["on", "off", "yes", "no", "0000:00:10.0", "0x0000:0x00:0x10.0x0", "0000:00:1f.7", "zz", "", "/x.rom",
                  "0000:00:10.0:0", "0000:00:100.0", "ffff:ff:ff.ff"]  # fmt: skip


def _xml_safe(value: str) -> str:
    """XML 1.0 cannot carry most control characters at all: drop them (lxml refuses them before we could test)."""
    return "".join(c for c in value if (c in "\t\n\r" or ord(c) >= 0x20) and c not in "\ufffe\uffff")


_device = st.fixed_dictionaries(
    {"slot": st.one_of(st.integers(0, 3).map(str), st.sampled_from(["-1", "x", "", "99999999999999999999", "٣"])),
     "mode": _MODE},
    optional={"type": S.type_name, "parent": st.one_of(S.pci, st.sampled_from(["mtty", "../mtty", "mtty\n"])),
              "uuid": S.uuid, "address": S.pci, "params": S.param},
)  # fmt: skip


@st.composite
def domain_with_metadata(draw: st.DrawFn) -> str:
    dom = etree.Element("domain", type="kvm")
    etree.SubElement(dom, "name").text = _xml_safe(draw(st.one_of(st.sampled_from(S.VMS), _XML_TEXT)))
    etree.SubElement(dom, "uuid").text = _xml_safe(draw(S.uuid))
    meta = etree.SubElement(etree.SubElement(dom, "metadata"), f"{{{NS}}}vgpuadm", nsmap={"vgpuadm": NS})
    meta.set("version", "1")
    for dev in draw(st.lists(_device, max_size=3)):
        el = etree.SubElement(meta, f"{{{NS}}}device")
        for k, v in dev.items():
            el.set(k, _xml_safe(v))
        for name, value in draw(st.lists(st.tuples(st.one_of(st.sampled_from(_OPTION_NAMES), _XML_TEXT),
                                                   st.one_of(st.sampled_from(_OPTION_VALUES), _XML_TEXT)),
                                         max_size=3)):  # fmt: skip
            o = etree.SubElement(el, f"{{{NS}}}option")
            o.set("name", _xml_safe(name))
            o.set("value", _xml_safe(value))
    return etree.tostring(dom, encoding="unicode")


def _check_allocation(tally: Tally, a: Allocation) -> None:
    for key, grammar in (("type_id", TYPE_ID), ("parent", PARENT), ("uuid", UUID), ("address", PCI)):
        value = getattr(a, key)
        if value is not None and not grammar.fullmatch(value):
            raise tally.violation(f"metadata accepted {key} {value!r}")
    if a.params is not None and not NO_CONTROL.fullmatch(a.params):
        raise tally.violation(f"metadata accepted params {a.params!r}")


_ATTR_VALUES = [*S.PCI_NEAR, *S.UUID_NEAR, *S.TYPE_NEAR, *S.HOSTILE, *S.PCIS, *S.UUIDS, *S.TYPES, "mtty", "0", "7"]


def metadata_mutants(rng: Any, xml: str, n: int) -> list[str]:
    """n variants of a domain: one or two vgpuadm attributes or options set to a near miss or hostile value."""
    out = []
    for _ in range(n):
        dom = etree.fromstring(xml.encode())
        targets = dom.findall(f"metadata/{{{NS}}}vgpuadm/{{{NS}}}device") + dom.findall(
            f"metadata/{{{NS}}}vgpuadm/{{{NS}}}device/{{{NS}}}option"
        )
        for _ in range(rng.randint(1, 2)):
            if not targets:
                break
            el = rng.choice(targets)
            key = rng.choice(["name", "value"] if el.tag.endswith("option") else
                             ["slot", "mode", "type", "parent", "uuid", "address", "params"])  # fmt: skip
            el.set(key, _xml_safe(rng.choice(_ATTR_VALUES)))
        out.append(etree.tostring(dom, encoding="unicode"))
    return out


@examples(160)
@given(seed=domain_with_metadata(), rng=st.randoms(use_true_random=False))
def test_domain_metadata(tally: Tally, seed: str, rng: Any) -> None:
    """What restore, destroy, mdevctl export and the inventory read back from a domain: accepted values match
    their grammars, and the hostdev and metadata XML made from them are well-formed and carry them unchanged.
    Each generated domain and 19 mutants of its attribute values."""
    for xml in [seed, *metadata_mutants(rng, seed, 19)]:
        _check_metadata(tally, xml)


def _check_metadata(tally: Tally, xml: str) -> None:
    accepted, allocations = _attempt(tally, parse_allocations, xml)
    if not accepted:
        return
    for a in allocations:
        _check_allocation(tally, a)
        hostdev = _attempt_quiet(modes.hostdev_xml, a)
        if isinstance(hostdev, str):
            _well_formed(tally, hostdev)
    rendered = _attempt_quiet(metadata_xml, allocations, "sim:/root")
    if isinstance(rendered, str):
        _well_formed(tally, rendered)
        again = parse_allocations(rendered, domain=allocations[0].domain if allocations else "d")
        before = [(a.type_id, a.parent, a.uuid, a.address, a.params, a.slot, a.extra) for a in allocations]
        after = [(a.type_id, a.parent, a.uuid, a.address, a.params, a.slot, a.extra) for a in again]
        if after != before:
            raise tally.violation(f"metadata rendered from {before!r} reads back as {after!r}")
    tally.ok()


def _attempt_quiet(fn: Any, *args: Any) -> Any:
    """fn(*args), None after a VgpuadmError (the caller counts the input once); other exceptions propagate."""
    try:
        return fn(*args)
    except VgpuadmError as exc:
        problem = clean_error(exc)
        if problem:
            raise AssertionError(problem) from exc
        return None


def _well_formed(tally: Tally, xml: str) -> None:
    try:
        etree.fromstring(xml.encode())
    except etree.XMLSyntaxError as exc:
        raise tally.violation(f"rendered XML is not well-formed: {exc}: {xml[:200]}") from exc


# -- journals ------------------------------------------------------------------------------------------------------

_FIELD_VALUES = st.one_of(S.pci, S.uuid, S.type_name, S.vm_name, st.integers(-3, 5000), st.booleans(), st.none(),
                          st.lists(st.lists(st.one_of(S.pci, st.sampled_from(["nvidia", "vfio-pci", "../x"])),
                                            min_size=2, max_size=2), max_size=2))  # fmt: skip


@st.composite
def journal_doc(draw: st.DrawFn) -> Any:
    steps = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from([*STEP_KINDS, *LEGACY_KINDS, "rm-rf", ""]))
        cls = STEP_KINDS.get(kind)
        step: dict[str, Any] = {"kind": kind}
        names = [f.name for f in __import__("dataclasses").fields(cls)] if cls else []
        if kind in LEGACY_KINDS:  # an older vgpuadm's managed-file step: the fields that named the file, its texts
            names = [*LEGACY_KINDS[kind][1], "text", "previous"]
        for name in names:
            if draw(st.integers(0, 9)):
                step[name] = draw(_FIELD_VALUES)
        if not draw(st.integers(0, 5)):
            step[draw(st.sampled_from(["extra", "kind", "path"]))] = draw(_FIELD_VALUES)
        steps.append(step)
    doc: Any = {"version": 1, "pid": 1, "state": draw(st.sampled_from(["applying", "rolling-back", "x"])),
                "current": draw(st.integers(-1, 4)), "done": 0, "plan": {"summary": "fuzz", "steps": steps}}  # fmt: skip
    if not draw(st.integers(0, 4)):
        doc = _mutate(draw, doc)
    return doc


def _mutate(draw: st.DrawFn, doc: Any) -> Any:
    """Replace one node of a JSON document by any JSON value, or drop one key."""
    doc = copy.deepcopy(doc)
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths))
    if not path:
        return draw(S._json_like)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(S._json_like)
    return doc


def _paths(node: Any, here: tuple[Any, ...] = ()) -> Any:
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*here, i))


_JOURNAL_VALUES = [*S.PCIS, *S.PCI_NEAR, *S.UUIDS, *S.UUID_NEAR, *S.TYPE_NEAR, *STEP_KINDS, 4097, -2]


@examples(180)
@given(seed=journal_doc(), rng=st.randoms(use_true_random=False))
def test_journal_documents(tally: Tally, seed: Any, rng: Any) -> None:
    """The journal is untrusted: a document check_document accepts holds only step kinds and values of their
    grammars, so `recover` can act on it. Each generated journal and 24 structural mutants."""
    for doc in [seed, *doc_mutants(rng, seed, 24, _JOURNAL_VALUES)]:
        _check_journal(tally, doc)


def _check_journal(tally: Tally, doc: Any) -> None:
    accepted, _ = _attempt(tally, check_document, doc)
    if not accepted:
        return
    for step in doc["plan"]["steps"]:
        for key in ("parent", "address", "pf", "vf"):
            if isinstance(step.get(key), str) and not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]",
                                                                   step[key]):  # fmt: skip
                raise tally.violation(f"journal {doc!r} accepted {key} {step[key]!r}")
        if isinstance(step.get("uuid"), str) and not UUID.fullmatch(step["uuid"]):
            raise tally.violation(f"journal {doc!r} accepted uuid {step['uuid']!r}")
    tally.ok()


@pytest.fixture
def journal_root(tmp_path: Path) -> Path:
    (tmp_path / "var/lib/vgpuadm").mkdir(parents=True, mode=0o700)
    return tmp_path


@examples(50)
@given(seed=journal_doc(), rng=st.randoms(use_true_random=False))
def test_journal_files(tally: Tally, journal_root: Path, seed: Any, rng: Any) -> None:
    """`recover`'s reader on the journal file itself: the document, torn progress lines, textual mutants."""
    text = json.dumps(seed)
    for data in [text, text + '\n{"current": 1, "undo": [0, "x"]}\n{"curr', *text_mutants(rng, text, ['"', "{", "}",
                 ",", "\\u0000", "[", "1e999", "NaN"], 2)]:  # fmt: skip
        path = journal_root / "var/lib/vgpuadm/journal.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, data.encode(errors="surrogatepass"))
        os.close(fd)
        accepted, _ = _attempt(tally, read_journal, str(journal_root))
        if accepted:
            tally.ok()


# -- inventory reports (inventory merge) -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real host inventory of the mixed profile with one mdev, as `inventory --format json` writes it."""
    from tests.unit.inventory_setup import create_mdev
    from vgpuadm.ops.inventory import inventory
    from vgpuadm.sim.profiles import build

    root = tmp_path_factory.mktemp("fuzz-report") / "host"
    build("mixed", str(root))
    create_mdev(root, "0000:03:00.0", "nvidia-288", S.UUIDS[0])
    return json.loads(json.dumps(inventory(str(root), use_libvirt=False, host="h1")))


def report_docs_seed() -> Any:
    names = st.one_of(st.sampled_from(["h1", "h2", "h3"]), st.sampled_from(S.HOSTILE))
    return st.tuples(st.lists(names, min_size=1, max_size=3), st.sampled_from(["json", "csv", "prometheus", "html"]))


@examples(50)
@given(seeds=report_docs_seed(), rng=st.randoms(use_true_random=False))
def test_inventory_reports(tally: Tally, host_report: dict[str, Any], seeds: Any, rng: Any) -> None:
    """Host reports as `inventory merge` reads them (check, merge) and renders the fleet (json, csv, prometheus,
    html): structure-aware mutants of a real report, 12 per example."""
    from vgpuadm.cli.inventory import render

    hosts, fmt = seeds
    for i in range(12):
        docs = []
        for j, name in enumerate(hosts):
            doc = copy.deepcopy(host_report)
            doc["host"] = name
            docs.append(doc_mutants(rng, doc, 1)[0] if j == 0 or rng.random() < 0.3 else doc)

        def merge_and_render(docs: list[Any] = docs, fmt: str = fmt if i % 4 == 0 else "json") -> None:
            for k, doc in enumerate(docs):
                merge_mod.check_report(doc, f"r{k}.json")
            fleet = merge_mod.merge([(f"r{k}.json", d) for k, d in enumerate(docs)],
                                    generated_at="2026-12-01T00:00:00Z")  # fmt: skip
            render(fleet, fmt, True)

        accepted, _ = _attempt(tally, merge_and_render)
        if accepted:
            tally.ok()


# -- umockdev recordings (sim import-umockdev) -------------------------------------------------------------------------

_BASE_RECORDING = """P: /devices/pci0000:00/0000:00:02.0/0000:01:00.0
E: SUBSYSTEM=pci
E: DRIVER=nvidia
E: PCI_SLOT_NAME=0000:01:00.0
A: vendor=0x10de\\n
A: device=0x1bb3\\n
A: class=0x030200\\n
A: numa_node=0\\n
L: driver=../../../../bus/pci/drivers/nvidia
L: iommu_group=../../../../kernel/iommu_groups/1

P: /devices/pci0000:00/0000:00:02.0/0000:01:00.0/3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b
E: SUBSYSTEM=mdev
E: MDEV_TYPE=nvidia-63
L: mdev_type=../mdev_supported_types/nvidia-63
L: iommu_group=../../../../../kernel/iommu_groups/7
"""
_RECORD_LINES = ["P: /devices/../../canary", "P: /devices/x/../../..", "P: /etc", "E: SUBSYSTEM=../../../canary",
                 "E: SUBSYSTEM=", "E: DRIVER=../../x", "L: esc=../../../../../../canary", "A: esc/x=owned",
                 "L: esc=/tmp", "A: ../x=1", "A: /abs=1", "A: a=\\x41\\101\\q\\", "H: config=zz", "H: config=00ff",
                 "L: driver=/bus/pci/drivers/nvidia", "L: iommu_group=../../../../kernel/iommu_groups/../../..",
                 "A: mdev_supported_types/nvidia-63/create=x", "N: dri/card0", "S: x", "X: y", "P:", "A: =x", "",
                 "E: MDEV_TYPE=../../canary", "L: mdev_type=../../../../../canary", "A: x\\n=y"]  # fmt: skip


@st.composite
def recordings(draw: st.DrawFn) -> str:
    lines = _BASE_RECORDING.splitlines()
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, len(lines)))
        op = draw(st.sampled_from(["insert", "insert", "delete", "replace-value"]))
        if op == "insert":
            lines.insert(pos, draw(st.one_of(st.sampled_from(_RECORD_LINES), S.control_text, S.text)))
        elif lines and op == "delete":
            del lines[min(pos, len(lines) - 1)]
        elif lines:
            i = min(pos, len(lines) - 1)
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}={draw(S.hostile())}"
    return "\n".join(lines) + "\n"


@pytest.fixture
def import_area(tmp_path: Path) -> Path:
    (tmp_path / "canary" / "t").mkdir(parents=True)
    (tmp_path / "canary" / "t" / "create").write_text("keep\n")
    return tmp_path


@examples(50)
@given(seed=recordings(), rng=st.randoms(use_true_random=False))
def test_umockdev_recordings(tally: Tally, import_area: Path, seed: str, rng: Any) -> None:
    """A recording is imported into a new directory beside a canary directory: it writes under the target only,
    and every link it makes resolves inside the target. Each generated recording and 9 textual mutants."""
    for text in [seed, *text_mutants(rng, seed, _RECORD_LINES_NL, 9)]:
        _check_import(tally, import_area, text)


_RECORD_LINES_NL = [x + "\n" for x in _RECORD_LINES]


def _check_import(tally: Tally, import_area: Path, text: str) -> None:
    canary = tree_hash(str(import_area / "canary"))
    target = import_area / "work" / "target"
    rec = import_area / "work" / "rec.umockdev"
    rec.parent.mkdir(exist_ok=True)
    rec.write_bytes(text.encode(errors="surrogateescape"))
    try:
        accepted, _ = _attempt(tally, load_umockdev, str(rec), str(target))
        if tree_hash(str(import_area / "canary")) != canary or sorted(os.listdir(import_area)) != ["canary", "work"]:
            raise tally.violation(f"importing {text!r} wrote outside its target")
        if accepted:
            for here, dirs, files in os.walk(target):
                for name in dirs + files:
                    path = os.path.join(here, name)
                    if os.path.islink(path):
                        resolved = os.path.realpath(path)
                        if not resolved.startswith(str(target) + os.sep):
                            raise tally.violation(f"importing {text!r} made a link out of the target: {path} -> "
                                                  f"{resolved}")  # fmt: skip
            tally.ok()
    finally:
        shutil.rmtree(import_area / "work")


# -- the driver's usage reports (`nvidia-smi vgpu -q`, `--query-gpu`: what the exporter and `show --vm` read) --------

_VGPU_Q_SEED = (Path(__file__).resolve().parents[1] / "unit" / "test_usage_exporter.py").read_text().split(
    'VGPU_Q = """', 1)[1].split('"""', 1)[0]  # fmt: skip
_GPU_CSV_SEED = ("pci.bus_id, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB]\n"
                 "00000000:01:00.0, 45 %, 20 %, 2048 MiB, 8192 MiB\n00000000:18:00.0, [N/A], [N/A], 9000 MiB, 1 MiB\n")  # fmt: skip
USAGE_TOKENS = [" : ", ":", "\n", "    ", "        ", "            ", "GPU ", "vGPU ID", "VM UUID", "MDEV UUID",
                "Utilization", "FB Memory Usage", "Used", "Gpu", " %", " MiB", "N/A", "[N/A]", "-1", "99999999999999",
                "1e9", "\x1b[31m", "\x00", ",", "00000000:ff:1f.7", "ffffffff:01:00.0", "Licensed", "\ufeff"]  # fmt: skip


@examples(120)
@given(rng=st.randoms(use_true_random=False))
def test_usage_reports(tally: Tally, rng: Any) -> None:
    """The usage parsers on mutants of a real-layout `vgpu -q` and `--query-gpu` text: never an exception, and every
    value they return in its grammar (a UUID, a PCI address, a name without control characters, 0-100 %)."""
    for text in [_VGPU_Q_SEED, *text_mutants(rng, _VGPU_Q_SEED, USAGE_TOKENS, 11)]:
        ok, records = _attempt(tally, parse_vgpu_usage, text)
        for v in records if ok else ():
            names = [x for x in (v.vm_name, v.type_name, v.driver_version) if x is not None]
            percents = [
                x for x in (v.gpu_percent, v.memory_percent, v.encoder_percent, v.decoder_percent) if x is not None
            ]
            if (not PCI.fullmatch(v.gpu) or any(u is not None and not UUID.fullmatch(u) for u in (v.vm_uuid, v.mdev_uuid))
                    or any(not NO_CONTROL.fullmatch(n) for n in names) or any(not 0 <= p <= 100 for p in percents)):  # fmt: skip
                raise tally.violation(f"vgpu -q {text!r} gave {v!r}")
        tally.ok()
    for text in [_GPU_CSV_SEED, *text_mutants(rng, _GPU_CSV_SEED, USAGE_TOKENS, 11)]:
        ok, gpus = _attempt(tally, parse_gpu_usage, text)
        for address, g in (gpus or {}).items():
            if not PCI.fullmatch(address) or any(p is not None and not 0 <= p <= 100 for p in (g.gpu_percent,
                                                                                               g.memory_percent)):  # fmt: skip
                raise tally.violation(f"--query-gpu {text!r} gave {g!r}")
        tally.ok()
