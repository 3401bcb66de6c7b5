"""Domain XML for vgpuadm: hostdev elements and the vgpuadm <metadata> element rendered from jinja2 templates
(autoescaped, then parsed with lxml so only well-formed XML leaves this module), and the parsers that read
hostdevs and vgpuadm's metadata back out of a domain's XML (the source of truth for what a domain owns).
The one jinja2 environment over templates/ is here too (the HTML report and the installed files use it); jinja2
is imported on its first use.

Pure: no libvirt, no sysfs. The templates live in templates/ at the repo root (vgpuadm/templates in the wheel).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from lxml import etree

from vgpuadm.errors import ConflictError, UsageError
from vgpuadm.model import (
    MDEV_KEY,
    MIGRATION,
    PARENT_PATTERN,
    PCI_KEY,
    PCI_PATTERN,
    UUID_PATTERN,
    Allocation,
    DeviceKey,
    DeviceMode,
    known_device_mode,
    mdev_key,
    parse_pci_address,
    pci_key,
)

NS = "https://vgpuadm.dev/xmlns/vgpuadm/1"
PREFIX = "vgpuadm"
METADATA_VERSION = "1"

MODES = tuple(m.value for m in DeviceMode)  # the built-in ones; the registry may declare more (known_device_mode)
PCI_ADDRESS_TYPE = "pci"  # <address type='pci' …/>: a guest PCI address (not a device mode)

_UUID = re.compile(UUID_PATTERN)
# What metadata values may be before they become part of a sysfs path, an mdevctl file name or a command: anyone
# allowed to edit a domain's metadata (libvirt per-domain ACLs) must not be able to steer root's writes.
_CANONICAL_PCI = re.compile(PCI_PATTERN)
# Matched whole (fullmatch): `$` would let a value end in "\n".
_GRAMMAR = {
    "type": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"),  # nvidia-63, i915-GVTg_V5_4, mtty-2
    "parent": re.compile(PARENT_PATTERN),
    "uuid": _UUID,
    "address": _CANONICAL_PCI,
    "params": re.compile(r"[^\x00-\x1f\x7f]{0,1023}"),
}
# The options of an on-demand request (the hook places it when the domain starts): the same rule, checked on read.
_OPTION_GRAMMAR = {
    "on_demand": re.compile(r"^yes$"),
    "gpu": _CANONICAL_PCI,
    "policy": re.compile(r"^(?:pack|spread)$"),
    "numa": re.compile(r"^[0-9]{1,4}$"),
    "force": re.compile(r"^yes$"),
    "mig_instance": re.compile(r"^[0-9]{1,3}:[0-9]{1,2}$"),  # the GPU instance vgpuadm made for it: profile id:start
    "placement_id": re.compile(r"^[0-9]{1,4}$"),
    MIGRATION: re.compile(r"^(?:incoming|outgoing)$"),  # a device on the move (`vgpuadm migrate`, until it ends)
}

# The metadata's `changed` stamp: UTC to the second, as the executor writes it.
_CHANGED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")

# Never resolve entities or fetch anything: domain XML comes from libvirt, but names and params come from users.
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, remove_blank_text=True, huge_tree=False)


def template_dir() -> str:
    """templates/ shipped inside the package (wheel), else the repo root's (editable install, checkout)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = package
    for candidate in (os.path.join(package, "templates"), os.path.join(os.path.dirname(package), "templates")):
        if os.path.isdir(os.path.join(candidate, "hostdev")):
            return candidate
    raise FileNotFoundError(f"vgpuadm templates not found next to {here}")


def readme_path() -> str:
    """README.md shipped inside the package (wheel), else the repo root's (editable install, checkout)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(package, "README.md"), os.path.join(os.path.dirname(package), "README.md")):
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"vgpuadm's README.md not found next to {package}")


@cache
def environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir()),
        autoescape=True,  # every value lands in an attribute or text node: escape ' " < > &
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
    )


@dataclass(frozen=True)
class PciAddress:
    """A PCI address, on the host (source) or in the guest (target). Prints as 0000:65:00.0."""

    domain: int = 0
    bus: int = 0
    slot: int = 0
    function: int = 0
    multifunction: bool = False

    @classmethod
    def parse(cls, text: str, *, multifunction: bool = False) -> PciAddress:
        return cls(*parse_pci_address(text), multifunction)

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"


@dataclass(frozen=True)
class HostdevRef:
    """A hostdev found in domain XML: an mdev by UUID or a PCI function by host address."""

    kind: str  # "mdev" | "pci"
    key: str  # the UUID, or the host PCI address as 0000:65:00.0
    managed: bool | None = None
    guest_address: PciAddress | None = None
    display: bool = False  # an mdev's display='on' (and ramfb='on'): what `vgpuadm adopt` records of it
    ramfb: bool = False


# -- templates -----------------------------------------------------------------------------------------------------


def render(template: str, **values: Any) -> str:
    """Render a template and return it re-serialised by lxml (well-formed, stable indentation)."""
    text = environment().get_template(template).render(**values)
    return to_string(etree.fromstring(text.encode(), _PARSER))


def to_string(element: Any) -> str:
    return str(etree.tostring(element, encoding="unicode", pretty_print=True))


def _check_uuid(uuid: str) -> str:
    if not _UUID.fullmatch(uuid):
        raise UsageError(f"{uuid!r} is not an mdev UUID", "mdev UUIDs are lower-case 8-4-4-4-12 hex")
    return uuid


def mdev_hostdev(
    uuid: str, *, display: bool = False, ramfb: bool = False, guest_address: PciAddress | None = None
) -> str:
    if ramfb and not display:
        raise UsageError("--ramfb needs --display on", "ramfb shows firmware output on the vGPU's display")
    return render(
        "hostdev/mdev.xml.j2", uuid=_check_uuid(uuid), display=display, ramfb=ramfb, guest_address=guest_address
    )


def pci_hostdev(
    address: str | PciAddress,
    *,
    managed: bool = True,
    rom_bar: bool | None = None,
    rom_file: str | None = None,
    rom_enabled: bool | None = None,
    guest_address: PciAddress | None = None,
) -> str:
    if rom_file is not None and not rom_file.startswith("/"):
        raise UsageError(f"ROM file {rom_file!r} is not an absolute path", "give the full path to the ROM image")
    source = address if isinstance(address, PciAddress) else PciAddress.parse(address)
    return render(
        "hostdev/pci.xml.j2",
        source=source,
        managed=managed,
        rom_bar=rom_bar,
        rom_file=rom_file,
        rom_enabled=rom_enabled,
        guest_address=guest_address,
    )


def vf_hostdev(address: str | PciAddress, *, guest_address: PciAddress | None = None) -> str:
    source = address if isinstance(address, PciAddress) else PciAddress.parse(address)
    return render("hostdev/vf.xml.j2", source=source, guest_address=guest_address)


def guest_address(alloc: Allocation) -> PciAddress | None:
    """The guest PCI address `alloc` records (extra guest_address, multifunction), if any."""
    extra = alloc.extra
    if not extra.get("guest_address"):
        return None
    return PciAddress.parse(extra["guest_address"], multifunction=extra.get("multifunction") == "on")


def on(value: str | None) -> bool | None:
    """A recorded on/off option (on, yes, 1, true) as a bool; None when not recorded."""
    if value is None:
        return None
    return value in ("on", "yes", "1", "true")


def require(alloc: Allocation, value: str | None, what: str) -> str:
    """`value` (the UUID or address a device needs), else the metadata is broken: UsageError naming the device."""
    if not value:
        raise UsageError(f"domain {alloc.domain}: {alloc.mode} device #{alloc.slot} has no {what}", _META_HINT)
    return value


# -- virtio-gpu with 3D (virtio-gl mode) ------------------------------------------------------------------------

_RENDER_NODE = re.compile(r"^/dev/dri/renderD[0-9]{1,5}$")
_VIDEO_MODEL = re.compile(r"^[a-z0-9]{1,16}$")  # vga, cirrus, qxl, bochs, ramfb, none … as libvirt names them
GL_GRAPHICS = ("egl-headless", "spice")


def virtio_gl_elements(rendernode: str, graphics: str = "egl-headless") -> list[str]:
    """The <video> (virtio, accel3d) and <graphics> (GL on `rendernode`) a virtio-gl device adds to a domain."""
    if not _RENDER_NODE.match(rendernode):
        raise UsageError(f"{rendernode!r} is not a DRM render node", "render nodes are /dev/dri/renderD<N>")
    if graphics not in GL_GRAPHICS:
        raise UsageError(f'graphics "{graphics}" has no OpenGL', f"use one of {', '.join(GL_GRAPHICS)}")
    return [render("virtio/video.xml.j2"), render("virtio/graphics.xml.j2", rendernode=rendernode, graphics=graphics)]


def _gl_graphics(devices: Any, rendernode: str) -> list[Any]:
    return [g for g in devices.findall("graphics") if any(gl.get("rendernode") == rendernode for gl in g.findall("gl"))]


def _virtio_video(devices: Any) -> list[Any]:
    return [v for v in devices.findall("video") if v.find("model") is not None
            and v.find("model").get("type") == "virtio" and v.find("model/acceleration[@accel3d='yes']") is not None]  # fmt: skip


def has_virtio_gl(domain_xml: str, rendernode: str) -> bool:
    """Whether the domain has a virtio <video> with accel3d and a GL <graphics> on `rendernode`."""
    devices = parse_domain(domain_xml).find("devices")
    return devices is not None and bool(_virtio_video(devices)) and bool(_gl_graphics(devices, rendernode))


def with_virtio_gl(domain_xml: str, rendernode: str, graphics: str = "egl-headless") -> tuple[str, str]:
    """The domain XML with its <video> devices replaced by the virtio-gl video and a GL <graphics> added; returns it
    and the model of the video it replaced ("" when it had none)."""
    video, gfx = virtio_gl_elements(rendernode, graphics)
    doc = parse_domain(domain_xml)
    devices = doc.find("devices")
    if devices is None:
        devices = etree.SubElement(doc, "devices")
    previous = ""
    for v in devices.findall("video"):
        model = v.find("model")
        previous = previous or (model.get("type", "") if model is not None else "")
        devices.remove(v)
    if graphics == "egl-headless":
        for g in devices.findall("graphics[@type='egl-headless']"):
            devices.remove(g)
    devices.append(etree.fromstring(gfx.encode(), _PARSER))
    devices.append(etree.fromstring(video.encode(), _PARSER))
    return to_string(doc), previous if _VIDEO_MODEL.match(previous) else ""


def without_virtio_gl(domain_xml: str, rendernode: str, previous_video: str = "") -> str:
    """The domain XML with the virtio-gl video and GL graphics taken out and a <video> of `previous_video` back."""
    doc = parse_domain(domain_xml)
    devices = doc.find("devices")
    if devices is None:
        return domain_xml
    for el in [*_virtio_video(devices), *_gl_graphics(devices, rendernode)]:
        devices.remove(el)
    if previous_video and _VIDEO_MODEL.match(previous_video) and devices.find("video") is None:
        video = etree.SubElement(devices, "video")
        etree.SubElement(video, "model", type=previous_video)
    return to_string(doc)


# -- metadata ------------------------------------------------------------------------------------------------------

_META_HINT = "inspect it with `virsh metadata DOMAIN https://vgpuadm.dev/xmlns/vgpuadm/1`"


def metadata_xml(allocations: Iterable[Allocation], host: str | None = None, changed: str | None = None) -> str:
    """The vgpuadm element as it appears inside the domain's <metadata> (namespaced, prefix vgpuadm). `host` names
    the host that made the devices (see metadata_host); `changed`, when they last changed (see metadata_changed)."""
    devices = sorted(allocations, key=lambda a: a.slot)
    for a in devices:
        if not known_device_mode(a.mode):
            raise UsageError(f"unknown device mode {a.mode!r}", f"modes are {', '.join(MODES)}")
        for key in a.extra:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", key):
                raise UsageError(f"option name {key!r} is not allowed", "option names are lower-case identifiers")
            if key in _OPTION_GRAMMAR and not _OPTION_GRAMMAR[key].match(a.extra[key]):
                raise UsageError(f"option {key}={a.extra[key]!r} is not allowed", "see vgpuadm/virt/xml.py")
    if changed is not None and not _CHANGED.fullmatch(changed):
        raise UsageError(f"change time {changed[:40]!r} is not allowed", "it is UTC, like 2026-12-01T13:40:00Z")
    return render("metadata.xml.j2", ns=NS, devices=devices, host=host, changed=changed)


def stamped(element: str, when: str) -> str:
    """A vgpuadm metadata element (either form) with its `changed` time set to `when`."""
    if not _CHANGED.fullmatch(when):
        raise UsageError(f"change time {when[:40]!r} is not allowed", "it is UTC, like 2026-12-01T13:40:00Z")
    root = etree.fromstring(element.encode(), _PARSER)
    root.set("changed", when)
    return to_string(root)


def metadata_changed(domain_xml: str | Any, *, domain: str | None = None) -> str | None:
    """When vgpuadm last changed the domain's devices (its metadata's `changed`, UTC), None when not recorded."""
    doc = _document(domain_xml)
    root = _metadata_root(doc)
    value = None if root is None else root.get("changed")
    if value is not None and not _CHANGED.fullmatch(value):
        name = domain or doc.findtext("name") or ""
        raise ConflictError(f"domain {name}: vgpuadm metadata has a malformed changed {value[:80]!r}", _META_HINT)
    return value


def metadata_for_libvirt(allocations: Iterable[Allocation], host: str | None = None) -> str:
    """The same element without its namespace: virDomainSetMetadata adds the namespace itself from its uri/key
    arguments and refuses an element that already declares the prefix ("failed to create a new XML namespace")."""
    return for_libvirt_metadata(metadata_xml(allocations, host))


def _metadata_root(doc: Any) -> Any:
    """The vgpuadm element of a domain document, or a bare/namespaced vgpuadm element itself."""
    if etree.QName(doc).localname == PREFIX and etree.QName(doc).namespace in (NS, None):
        return doc
    return doc.find(f"metadata/{{{NS}}}{PREFIX}")


def parse_domain(domain_xml: str) -> Any:
    try:
        return etree.fromstring(domain_xml.encode(), _PARSER)
    except etree.XMLSyntaxError as exc:
        raise UsageError(f"domain XML is not well-formed: {exc}", "check the XML libvirt returned") from None


def _document(domain_xml: str | Any) -> Any:
    """A domain's XML text, or the element parse_domain already made of it (a reader of several facts parses once)."""
    return parse_domain(domain_xml) if isinstance(domain_xml, str) else domain_xml


def parse_allocations(
    domain_xml: str | Any, *, domain: str | None = None, domain_uuid: str | None = None
) -> list[Allocation]:
    """Every device the domain's vgpuadm metadata records, sorted by slot. Accepts a whole domain XML or the bare
    element virDomainGetMetadata returns (then pass domain/domain_uuid), as text or as parse_domain's element."""
    doc = _document(domain_xml)
    name = domain or doc.findtext("name") or ""
    duuid = domain_uuid or doc.findtext("uuid")
    root = _metadata_root(doc)
    if root is None:
        return []
    ns = etree.QName(root).namespace
    q = (lambda tag: f"{{{ns}}}{tag}") if ns else (lambda tag: tag)
    out = []
    for index, dev in enumerate(root.findall(q("device"))):
        slot_text, mode = dev.get("slot"), dev.get("mode")
        if not known_device_mode(mode) or slot_text is None or not slot_text.isdigit():
            raise ConflictError(
                f"domain {name}: vgpuadm metadata device #{index} is malformed (slot={slot_text!r}, mode={mode!r})",
                _META_HINT,
            )
        for key, grammar in _GRAMMAR.items():
            value = dev.get(key)
            if value is not None and not grammar.fullmatch(value):
                raise ConflictError(
                    f"domain {name}: vgpuadm metadata device #{index} has a malformed {key} {value[:80]!r}", _META_HINT
                )
        extra = {o.get("name"): o.get("value", "") for o in dev.findall(q("option")) if o.get("name")}
        for key, grammar in _OPTION_GRAMMAR.items():
            if key in extra and not grammar.match(extra[key]):
                raise ConflictError(
                    f"domain {name}: vgpuadm metadata device #{index} has a malformed option {key} {extra[key][:80]!r}",
                    _META_HINT,
                )
        out.append(
            Allocation(
                domain=name,
                mode=mode,
                type_id=dev.get("type"),
                parent=dev.get("parent"),
                uuid=dev.get("uuid"),
                address=dev.get("address"),
                params=dev.get("params") or None,  # an empty attribute records no parameters
                domain_uuid=duuid,
                slot=int(slot_text),
                extra=extra,
            )
        )
    return sorted(out, key=lambda a: a.slot)


def metadata_host(domain_xml: str | Any) -> str | None:
    """The host recorded in the domain's vgpuadm metadata (machine-id, or sim:<root> for a simulated root), None
    when there is no metadata or it names no host."""
    root = _metadata_root(_document(domain_xml))
    return None if root is None else root.get("host")


# -- hostdevs in domain XML ----------------------------------------------------------------------------------------


def _address(el: Any, *, multifunction: bool = False) -> PciAddress:
    def num(attr: str) -> int:
        text = el.get(attr, "0")
        return int(text, 16) if text.lower().startswith("0x") else int(text)

    return PciAddress(num("domain"), num("bus"), num("slot"), num("function"), multifunction)


def parse_hostdevs(domain_xml: str | Any) -> list[HostdevRef]:
    """The domain's mdev and PCI hostdevs (any, not only vgpuadm's), in document order."""
    out = []
    for hd in _document(domain_xml).findall("devices/hostdev"):
        key = hostdev_key(hd)
        if key is None:
            continue
        guest_el = hd.find("address")
        guest = (
            _address(guest_el, multifunction=guest_el.get("multifunction") == "on") if guest_el is not None else None
        )
        managed = None if key[0] == MDEV_KEY else hd.get("managed") == "yes"
        out.append(HostdevRef(key[0], key[1], managed, guest, hd.get("display") == "on", hd.get("ramfb") == "on"))
    return out


def hostdev_as_defined(domain_xml: str | Any, key: DeviceKey) -> str:
    """The domain's own <hostdev> element for `key` as its definition has it (libvirt's aliases left out), to take
    out a hostdev vgpuadm did not record and to put it back the same on undo; "" when there is none."""
    for hd in _document(domain_xml).findall("devices/hostdev"):
        if hostdev_key(hd) == key:
            el = copy.deepcopy(hd)
            for alias in el.findall("alias"):
                el.remove(alias)
            el.tail = None
            return to_string(el)
    return ""


def used_guest_slots(domain_xml: str, bus: int = 0) -> set[int]:
    doc = parse_domain(domain_xml)
    used = set()
    for el in doc.iter("address"):
        if el.get("type") == PCI_ADDRESS_TYPE and el.getparent().tag != "source":
            addr = _address(el)
            if addr.domain == 0 and addr.bus == bus:
                used.add(addr.slot)
    return used


def free_guest_slot(domain_xml: str, *, first: int = 0x10, last: int = 0x1E) -> PciAddress:
    """A free slot on the guest's root bus for a multifunction passthrough (GPU + audio as functions of one slot).
    Slot 0x1f is left alone: q35 puts its LPC/SATA/SMBus functions there."""
    used = used_guest_slots(domain_xml)
    for slot in range(first, last + 1):
        if slot not in used:
            return PciAddress(0, 0, slot, 0)
    raise ConflictError(
        f"no free guest PCI slot between {first:#04x} and {last:#04x} on bus 0",
        "remove a device from the domain or pass a guest address",
    )


def has_graphics(domain_xml: str | Any) -> bool:
    """Whether the domain defines a <graphics> device (vnc, spice, egl-headless, …): libvirt refuses a hostdev with
    display='on' without one ("graphics device is needed for attribute value 'display=on' in <hostdev>")."""
    return _document(domain_xml).find("devices/graphics") is not None


def count_ramfb(domain_xml: str | Any) -> int:
    """How many of the domain's mdev hostdevs have ramfb on (libvirt allows one)."""
    return sum(1 for hd in _document(domain_xml).findall("devices/hostdev") if hd.get("ramfb") == "on")


def status_domain(status_xml: str) -> str:
    """The domain XML a libvirt status file (`/run/libvirt/qemu/NAME.xml`: `<domstatus>…<domain>`) holds."""
    doc = parse_domain(status_xml)
    inner = doc if doc.tag == "domain" else doc.find("domain")
    if inner is None:
        raise UsageError("libvirt status XML holds no <domain>", "is it a file libvirt wrote?")
    return to_string(inner)


def domain_identity(domain_xml: str | Any) -> tuple[str, str]:
    """The domain's name and UUID, from its XML text or the element parse_domain made of it."""
    doc = _document(domain_xml)
    return doc.findtext("name") or "", doc.findtext("uuid") or ""


def domain_definition(
    name: str,
    *,
    uuid: str | None = None,
    memory_mib: int = 256,
    vcpus: int = 1,
    machine: str = "q35",
    virt_type: str = "qemu",
    vnc: bool = True,
) -> str:
    """A small diskless x86_64 guest (demo domains, libvirt tests)."""
    return render(
        "domain.xml.j2",
        name=name,
        uuid=uuid,
        memory_mib=memory_mib,
        vcpus=vcpus,
        machine=machine,
        virt_type=virt_type,
        vnc=vnc,
    )


@lru_cache(maxsize=64)  # a step's element is compared before and after it is applied: parsed once
def _canonical(element: str | None) -> tuple[tuple[Any, ...], ...] | None:
    if not element or not element.strip():
        return None
    allocs = parse_allocations(element, domain="")
    return tuple(
        (a.slot, a.mode, a.type_id, a.parent, a.uuid, a.address, a.params, tuple(sorted(a.extra.items())))
        for a in allocs
    )


def same_metadata(a: str | None, b: str | None) -> bool:
    """Whether two vgpuadm metadata elements (namespaced or as libvirt returns them) record the same devices."""
    return _canonical(a) == _canonical(b)


# -- one persistent definition per change --------------------------------------------------------------------------


def hostdev_elements(text: str) -> list[Any]:
    """The <hostdev> elements of a concatenation of hostdev elements (as a DefineDomain step carries them)."""
    if not text.strip():
        return []
    try:
        wrapper = etree.fromstring(f"<devices>{text}</devices>".encode(), _PARSER)
    except etree.XMLSyntaxError as exc:
        raise UsageError(f"hostdev XML is not well-formed: {exc}", "this is a bug in vgpuadm; report it") from None
    found = wrapper.findall("hostdev")
    if len(found) != len(wrapper):
        raise UsageError(f"not only hostdev elements: {text[:60]!r}", "this is a bug in vgpuadm; report it")
    return found


def hostdev_key(element: Any) -> DeviceKey | None:
    """The ownership key of one <hostdev> element: its `type` attribute (libvirt's hostdev types mdev and pci are
    the key kinds) and its source (None: neither an mdev with a UUID nor a PCI hostdev)."""
    src = element.find("source/address")
    if src is None:
        return None
    kind = element.get("type")
    if kind == MDEV_KEY and src.get("uuid"):
        return mdev_key(src.get("uuid"))
    if kind == PCI_KEY:
        return pci_key(str(_address(src)))
    return None


def _namespaced(element_xml: str) -> Any:
    """A vgpuadm metadata element (namespaced, or bare as libvirt returns it) as a namespaced lxml element."""

    def copy(src: Any, parent: Any) -> Any:
        tag = f"{{{NS}}}{etree.QName(src).localname}"
        if parent is None:
            el = etree.Element(tag, dict(src.attrib), nsmap={PREFIX: NS})
        else:
            el = etree.SubElement(parent, tag, dict(src.attrib))
            el.tail = src.tail
        el.text = src.text
        for child in src:
            if isinstance(child.tag, str):
                copy(child, el)
        return el

    return copy(etree.fromstring(element_xml.encode(), _PARSER), None)


def redefine(domain_xml: str | Any, *, add: str = "", remove: str = "", element: str | None = None) -> str:
    """The domain's persistent XML with the hostdevs of `remove` taken out, those of `add` appended (unless
    present) and the vgpuadm metadata element replaced by `element` ("" removes it, None leaves it): the one
    definition a DefineDomain step writes. Everything else in the document is kept as it is. Given parse_domain's
    element, it edits that element."""
    doc = _document(domain_xml)
    devices = doc.find("devices")
    if devices is None:
        devices = etree.SubElement(doc, "devices")
    gone = {hostdev_key(el) for el in hostdev_elements(remove)}
    present = set()
    for hd in devices.findall("hostdev"):
        key = hostdev_key(hd)
        if key is not None and key in gone:
            devices.remove(hd)
        elif key is not None:
            present.add(key)
    for hd in hostdev_elements(add):
        if hostdev_key(hd) not in present:
            devices.append(hd)
    if element is not None:
        meta = doc.find("metadata")
        old = meta.find(f"{{{NS}}}{PREFIX}") if meta is not None else None
        if old is not None:
            meta.remove(old)
        if element.strip():
            if meta is None:
                meta = etree.SubElement(doc, "metadata")  # libvirt puts it in its place when it writes the XML
            meta.append(_namespaced(element))
        elif meta is not None and len(meta) == 0:
            doc.remove(meta)
    return to_string(doc)


def for_libvirt_metadata(element_xml: str) -> str:
    """A vgpuadm metadata element without its namespace (virDomainSetMetadata's form, see metadata_for_libvirt)."""
    root = etree.fromstring(element_xml.encode(), _PARSER)
    for el in root.iter():
        if isinstance(el.tag, str):
            el.tag = etree.QName(el).localname
    etree.cleanup_namespaces(root)
    return to_string(root)
