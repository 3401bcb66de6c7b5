"""Golden XML: every hostdev variant, the vgpuadm metadata element and the demo domain, rendered from the templates
and compared byte for byte with tests/golden/xml/<case>.xml. Each golden file is also validated against libvirt's
own RelaxNG schema (/usr/share/libvirt/schemas/domain.rng) inside a skeleton domain, and the hand-written
`*-invalid.xml` files must fail that validation (proof the validator really runs).

Regenerate after an intended template change with `VGPUADM_UPDATE_GOLDENS=1 pytest tests/golden` and review the
diff with `git diff tests/golden/xml`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree

from tests.goldens import golden
from vgpuadm import modes
from vgpuadm.model import Allocation
from vgpuadm.virt import xml
from vgpuadm.virt.xml import PciAddress

GOLDEN = Path(__file__).parent / "xml"
TEMPLATES = Path(xml.template_dir())
SCHEMA = "/usr/share/libvirt/schemas/domain.rng"

UUID = "c2177883-f1bb-47f0-914d-32a22e3a8804"
NASTY = "frame_rate_limiter=0 x='\"<>&"  # every XML metacharacter

MDEV_ALLOC = Allocation(
    domain="web01",
    mode="mdev",
    type_id="nvidia-63",
    parent="0000:01:00.0",
    uuid=UUID,
    params="frame_rate_limiter=0 disable_vnc=1",
    slot=0,
    extra={"display": "on", "ramfb": "on"},
)
VF_ALLOC = Allocation(domain="web01", mode="vf", type_id="nvidia-1426", parent="0000:41:00.4", address="0000:41:00.4",
                      slot=1)  # fmt: skip
PCI_ALLOCS = [
    Allocation(domain="web01", mode="pci", address="0000:65:00.0", slot=2,
               extra={"managed": "yes", "rom_bar": "on", "guest_address": "0000:00:10.0", "multifunction": "on",
                      "host_driver": "nvidia"}),
    Allocation(domain="web01", mode="pci", address="0000:65:00.1", slot=3,
               extra={"managed": "yes", "guest_address": "0000:00:10.1", "host_driver": "snd_hda_intel"}),
]  # fmt: skip

# A VF of an SR-IOV VF pool (Intel Flex 170): vgpuadm binds it to vfio-pci itself, so managed='no' and no <driver>.
POOL_ALLOC = Allocation(domain="web01", mode="pool", type_id="vf-flex170", parent="0000:4d:00.0",
                        address="0000:4d:00.1", slot=4, extra={"host_driver": ""})  # fmt: skip

# A paravirtual virtio-gpu with 3D on the host's first render node (virtio-gl mode): a <video> and a <graphics>.
VIRTIO_ALLOC = Allocation(domain="web01", mode="virtio-gl", type_id="virtio-gl", parent="0000:00:02.0", slot=5,
                          extra={"rendernode": "/dev/dri/renderD128", "graphics": "egl-headless",
                                 "previous_video": "cirrus"})  # fmt: skip

# case name → a function returning the rendered hostdev(s) or element; "domain-*" cases are whole domains.
CASES: dict[str, Callable[[], list[str]]] = {
    "mdev-basic": lambda: [xml.mdev_hostdev(UUID)],
    "mdev-display-ramfb": lambda: [
        xml.mdev_hostdev(UUID, display=True, ramfb=True, guest_address=PciAddress(0, 0, 7, 0))
    ],
    "mdev-from-allocation": lambda: [modes.hostdev_xml(MDEV_ALLOC)],
    "pci-gpu-audio": lambda: [modes.hostdev_xml(a) for a in PCI_ALLOCS],
    "pci-unmanaged-rom-file": lambda: [
        xml.pci_hostdev("0000:65:00.0", managed=False, rom_file="/usr/share/vgpu/p4.rom", rom_enabled=True)
    ],
    "pci-rom-disabled": lambda: [xml.pci_hostdev("21:1f.7", rom_bar=False, rom_enabled=False)],
    "vf-basic": lambda: [modes.hostdev_xml(VF_ALLOC)],
    "vf-guest-address": lambda: [xml.vf_hostdev("0000:41:00.5", guest_address=PciAddress(0, 0, 0x11, 0))],
    "metadata-all-modes": lambda: [xml.metadata_xml([MDEV_ALLOC, VF_ALLOC, *PCI_ALLOCS], host="sim:/srv/lab/h1")],
    "pool-vf": lambda: [modes.hostdev_xml(POOL_ALLOC)],
    "metadata-pool": lambda: [xml.metadata_xml([POOL_ALLOC], host="sim:/srv/lab/h1", changed="2026-12-01T13:40:00Z")],
    "virtio-gl-egl-headless": lambda: [modes.hostdev_xml(VIRTIO_ALLOC)],
    "virtio-gl-spice": lambda: xml.virtio_gl_elements("/dev/dri/renderD129", "spice"),
    "metadata-escaped": lambda: [
        xml.metadata_xml(
            [
                Allocation(
                    domain="x", mode="mdev", type_id="nvidia-63", uuid=UUID, params=NASTY, slot=0, extra={"note": NASTY}
                )
            ]
        )
    ],
    "domain-demo": lambda: [xml.domain_definition("web01", uuid="6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a01")],
    "domain-escaped-name": lambda: [xml.domain_definition("web01'/><disk", machine="pc", vnc=False, memory_mib=128)],
}


DEVICE_ELEMENTS = ("<hostdev", "<video", "<graphics")  # what goes under <devices>; the rest is metadata


def skeleton(devices: list[str]) -> str:
    """A minimal valid domain holding the case's elements (hostdevs in <devices>, metadata in <metadata>)."""
    hostdevs = "".join(d for d in devices if d.lstrip().startswith(DEVICE_ELEMENTS))
    meta = "".join(d for d in devices if not d.lstrip().startswith(DEVICE_ELEMENTS))
    return (
        "<domain type='kvm'><name>golden</name><memory unit='MiB'>256</memory>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os>"
        f"<metadata>{meta}</metadata><devices>{hostdevs}</devices></domain>"
    )


def as_document(text: str) -> str:
    """A golden file → the domain document to validate."""
    stripped = text.lstrip()
    if stripped.startswith("<domain"):
        return text
    parts = re.split(r"(?=^<hostdev |^<vgpuadm:vgpuadm |^<video>|^<graphics )", text, flags=re.M)
    return skeleton([p for p in parts if p.strip()])


@pytest.fixture(scope="module")
def relaxng() -> etree.RelaxNG:
    if not os.path.exists(SCHEMA):
        pytest.fail(f"{SCHEMA} missing: install libvirt-daemon-system (scripts/install.sh does)")
    return etree.RelaxNG(etree.parse(SCHEMA))


def _valid(relaxng: etree.RelaxNG, text: str) -> tuple[bool, str]:
    doc = etree.fromstring(as_document(text).encode())
    ok = relaxng.validate(doc)
    return ok, str(relaxng.error_log.last_error)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str, relaxng: etree.RelaxNG) -> None:
    rendered = "".join(CASES[case]())
    path = GOLDEN / f"{case}.xml"
    assert rendered == golden(path, rendered)
    ok, err = _valid(relaxng, rendered)
    assert ok, f"{case} fails libvirt's domain.rng: {err}"


def test_every_golden_file_has_a_case() -> None:
    files = {p.stem for p in GOLDEN.glob("*.xml") if not p.stem.endswith("-invalid")}
    assert files == set(CASES)


INVALID = sorted(p.name for p in GOLDEN.glob("*-invalid.xml"))


def test_there_are_invalid_cases() -> None:
    assert len(INVALID) >= 4


@pytest.mark.parametrize("name", INVALID)
def test_invalid_cases_fail_validation(name: str, relaxng: etree.RelaxNG) -> None:
    ok, _ = _valid(relaxng, (GOLDEN / name).read_text())
    assert not ok, f"{name} should be rejected by libvirt's schema"


def _template_vocabulary(template: Path) -> tuple[set[str], set[str]]:
    """Element names and attribute names a template can emit (literal text of the template)."""
    text = re.sub(r"\{#.*?#\}", "", template.read_text(), flags=re.S)
    elements = set(re.findall(r"<([a-zA-Z][\w:]*)", text))
    attributes = set(re.findall(r"\s([a-zA-Z][\w:]*)='", text)) - {"xmlns:vgpuadm"}
    return elements, attributes


def test_every_template_field_appears_in_a_golden_case() -> None:
    """Every element and attribute any template can produce shows up in some golden file, so no branch of a
    template goes unchecked by the schema."""
    goldens = [etree.fromstring(as_document(p.read_text()).encode()) for p in GOLDEN.glob("*.xml")
               if not p.stem.endswith("-invalid")]  # fmt: skip
    seen_elements = {etree.QName(el).localname for doc in goldens for el in doc.iter()}
    seen_attributes = {etree.QName(a).localname for doc in goldens for el in doc.iter() for a in el.attrib}
    missing = []
    for template in sorted(TEMPLATES.rglob("*.xml.j2")):
        elements, attributes = _template_vocabulary(template)
        missing += [f"{template.name}: <{e}>" for e in elements if e.split(":")[-1] not in seen_elements]
        missing += [f"{template.name}: {a}=" for a in attributes if a.split(":")[-1] not in seen_attributes]
    assert missing == []


def test_every_template_variable_is_set_in_a_golden_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spy on xml.render (it still renders): each template's variables are given a non-empty value by some case."""
    import jinja2.meta

    calls: list[tuple[str, dict[str, object]]] = []
    real = xml.render

    def spy(template: str, **values: object) -> str:
        calls.append((template, values))
        return real(template, **values)

    monkeypatch.setattr(xml, "render", spy)
    for case in CASES.values():
        case()
    env = xml.environment()
    for template in sorted(str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.xml.j2")):
        source = env.loader.get_source(env, template)[0]
        variables = jinja2.meta.find_undeclared_variables(env.parse(source))
        if template == "hostdev/guest-address.xml.j2":
            continue  # included by the hostdev templates; its one variable is checked through them
        set_somewhere = {k for t, values in calls if t == template for k, v in values.items() if v not in (None, False)}
        assert variables <= set_somewhere, f"{template}: never set by a golden case: {variables - set_somewhere}"


def test_metadata_round_trip() -> None:
    """What metadata_xml writes, parse_allocations reads back unchanged (including options and metacharacters)."""
    allocs = [MDEV_ALLOC, VF_ALLOC, *PCI_ALLOCS]
    domain = f"<domain><name>web01</name><uuid>u-1</uuid><metadata>{xml.metadata_xml(allocs)}</metadata></domain>"
    back = xml.parse_allocations(domain)
    assert [(a, a.extra) for a in back] == [
        (Allocation(**{**a.__dict__, "domain_uuid": "u-1"}), a.extra) for a in allocs
    ]
    nasty = Allocation(domain="web01", mode="mdev", uuid=UUID, params=NASTY, slot=0)
    assert xml.parse_allocations(xml.metadata_for_libvirt([nasty]), domain="web01")[0].params == NASTY
