"""Hypothesis strategies shared by the fuzz targets: valid-ish values of every grammar vgpuadm reads (PCI addresses,
UUIDs, type ids and names, VM names, params) next to their near misses and hostile text (climbing and absolute
paths, control characters, huge numbers, nan/inf, unicode, rich markup, shell quotes)."""

from __future__ import annotations

import json
import string
from typing import Any

from hypothesis import strategies as st

PCIS = ["0000:01:00.0", "0000:03:00.0", "0000:18:00.0", "0000:18:00.4", "0000:18:01.3", "0000:41:00.0",
        "0000:41:00.5", "0000:65:00.0", "0000:65:00.1", "0000:00:01.0", "01:00.0", "18:00.4"]  # fmt: skip
PCI_NEAR = ["0000:01:00.8", "0000:1:00.0", "0000:01:00", "0000:01:00.0\n", " 0000:01:00.0", "0000:01:00.0/..",
            "0000:01:00.0/../../..", "ffff:ff:ff.7", "0000:01:1f.0", "0000:01:20.0", "00000:01:00.0", "0000-01-00.0",
            "0000:01:00.0,0000:03:00.0", "0000:0g:00.0", "0000:01:00.0\x00", "０000:01:00.0", "0000:01:00.０"]  # fmt: skip
UUIDS = ["3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b", "00000000-0000-0000-0000-000000000001",
         "c0ffee00-0000-4000-8000-000000000000"]  # fmt: skip
UUID_NEAR = ["3F9A1C2E-5B7D-4E8F-9A0B-1C2D3E4F5A6B", "3f9a1c2e5b7d4e8f9a0b1c2d3e4f5a6b", "3f9a1c2e-5b7d-4e8f-9a0b",
             "3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b\n", "{3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b}",
             "../3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b", "3f9a1c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6bz",
             "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"]  # fmt: skip
TYPES = ["nvidia-63", "nvidia-64", "nvidia-289", "GRID P4-1Q", "P4-1Q", "p4-1q", "nvidia-1420", "H200X-4C",
         "NVIDIA H200X-4C", "H200X-1-18C", "nvidia-468", "A100-4C", "GRID A100-4C", "mtty-1", "mtty-2",
         "Single port serial"]  # fmt: skip
TYPE_NEAR = ["nvidia-", "nvidia-999", "nvidia-63 ", "nvidia-63/../nvidia-64", "nvidia_63", "NVIDIA-63", "nvidia-0x3f",
             "H200X-4", "H200X-4CC", "GRID", "../../canary/t", "mdev_supported_types", "nvidia-63\n", "-",
             "nvidia-1420/../../..", "A100-7-40C", "mtty", "i915-GVTg_V5_4"]  # fmt: skip
VMS = ["web01", "db02"]
VM_NEAR = ["web02", "WEB01", "web01 ", "web01\n", "web/01", "../web01", "db02;rm -rf /", "", "-web01", "web01'"]
PROFILES = ["p4", "t4", "a100-mdev-vf", "h200-vendor-vfio", "gvt-g", "mtty", "passthrough", "mixed", "kernel-samples"]
ERRNOS = ["EIO", "ENOSPC", "EBUSY", "EEXIST", "einval", "ENOTANERRNO", "E2BIG", "0", "5"]
FORMATS = ["table", "json", "csv", "html", "prometheus", "JSON", "xml", ""]

HOSTILE = [
    "", " ", "-", "--", "--help", "-x", "..", "../..", "../canary", "../canary/t", "../../canary/t/create", "/",
    "/etc/passwd", "/dev/zero", "/dev/null", "/proc/self/environ", "~", "$HOME", "`id`", "$(id)", "'", '"', "'\"",
    "a'b", 'a"b', "\\", "a\\nb", "[/x]", "[bold]x[/bold]", "[/]", "[link=file:///etc]x", "<x/>", "]]>", "&amp;",
    "&xxe;", "<!--", "{{ 7*7 }}", "%s%s%n", "%(x)s", "\x1b[31mred", "\r", "\t", "a\nb", "\x7f", "\u202e", "é", "😀",
    "Ω" * 300, "a" * 5000, "nan", "inf", "-inf", "NaN", "1e309", "-1", "0", "-0", "99999999999999999999999",
    "18446744073709551616", "0x10", "1_000", "١٢", "true", "null", "None", "!!python/object", "*", "?", "[0-9]",
]  # fmt: skip

_CTRL = "".join(chr(c) for c in range(1, 32)) + "\x7f"
text = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=40)
control_text = st.text(alphabet=string.ascii_letters + string.digits + _CTRL + "/.-_ '\"[]", max_size=24)


def hostile() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE), text, control_text)


def mixed(valid: list[str], near: list[str]) -> st.SearchStrategy[str]:
    """Mostly valid values, then near misses, then anything."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(near), hostile())


pci = mixed(PCIS, PCI_NEAR)
uuid = mixed(UUIDS, UUID_NEAR)
type_name = mixed(TYPES, TYPE_NEAR)
vm_name = mixed(VMS, VM_NEAR)
integer = st.one_of(
    st.integers(-3, 70).map(str),
    st.sampled_from(["10000000", "99999999999999999999", "1e3", "nan", "inf", "0x4", " 2", "2 ", "", "٣", "+1"]),
    hostile(),
)
number = st.one_of(
    st.sampled_from(["0", "0.1", "1", "30", "-1", "nan", "inf", "-inf", "1e308", "1e-320", "NaN", "+inf", "0x1p3"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    hostile(),
)
param = st.one_of(
    st.sampled_from(["frame_rate_limiter=0", "frame_rate_limiter=1", "enable_uvm=1", "frame_rate_limiter=0'",
                     "frame_rate_limiter=[/x]", "a=b,c=d", "=1", "x", "frame_rate_limiter=0\nenable_uvm=1",
                     "frame_rate_limiter=1;reboot", 'k="v"', "k=" + "9" * 400]),
    hostile(),
)  # fmt: skip


# -- plan files ----------------------------------------------------------------------------------------------------

_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), text, st.sampled_from(HOSTILE)
)
_json_like = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(text, st.sampled_from(HOSTILE)),
                                                                        inner, max_size=4)),
    max_leaves=12,
)  # fmt: skip

_vm_spec = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(st.sampled_from(TYPES), type_name, _scalar),
        "count": st.one_of(st.integers(1, 4), st.integers(-5, 100), st.integers(2**40, 2**80), _scalar),
        "gpu": st.one_of(pci, _scalar),
        "policy": st.one_of(st.sampled_from(["pack", "spread"]), _scalar),
        "numa": st.one_of(st.integers(0, 2), st.integers(-2, 2**65), _scalar),
        "params": st.one_of(param, st.dictionaries(st.sampled_from(["frame_rate_limiter", "enable_uvm", "x y", "é"]),
                                                   st.one_of(st.integers(), st.booleans(), text, param),
                                                   max_size=3), _scalar),
        "display": st.one_of(st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "ramfb": st.booleans()}),
                             _json_like),
        "passthrough": st.one_of(pci, st.lists(pci, min_size=1, max_size=3), _scalar),
        "bogus": _json_like,
    },
)  # fmt: skip
plan_data = st.fixed_dictionaries(
    {"vms": st.one_of(st.dictionaries(st.one_of(st.sampled_from(VMS), vm_name), _vm_spec, max_size=3), _json_like)},
    optional={
        "version": st.one_of(st.just(1), _scalar),
        "defaults": st.one_of(st.fixed_dictionaries({}, optional={"policy": st.sampled_from(["pack", "spread", "x"]),
                                                                  "display": _json_like}), _json_like),
        "extra": _json_like,
    },
)  # fmt: skip

YAML_GARBAGE = [
    "", "---\n", "vms:\n", "vms: []\n", "vms: {a: &x [*x]}\n", "a: &a [*a, *a]\nvms: *a\n", "vms: !!python/object:os.system {}\n",
    "vms: !!binary aGVsbG8=\n", "vms:\n  web01:\n    type: nvidia-63\n  web01:\n    type: nvidia-64\n", "[" * 200,
    "{" * 60 + "}" * 60, "vms: {web01: {type: nvidia-63, count: 1e3}}\n", "\ufeffvms: {}\n", "vms: {web01: ~}\n",
    "%YAML 1.1\n---\nvms: {web01: {type: yes}}\n", "vms: {web01: {type: nvidia-63}}\n...\n---\nvms: {}\n",
    "vms: {? [a, b] : {type: x}}\n", "vms: {web01: {type: nvidia-63, params: \"frame_rate_limiter=0'\"}}\n",
    "\t vms: x", "vms: {web01: {type: '[/x]'}}\n", "vms: {0000:01:00.0: {}}\n", "vms: {web01: {count: 0o10}}\n",
]  # fmt: skip


def _yaml_dump(data: Any) -> str:
    """Flow-style YAML of a JSON-like value (JSON is YAML 1.2), with keys and strings unquoted where safe."""
    return json.dumps(data, ensure_ascii=False, default=str)


@st.composite
def plan_text(draw: st.DrawFn) -> str:
    """Structure-aware plan files: valid-ish documents in block or flow style, then textual mutations, or garbage."""
    kind = draw(st.sampled_from(["block", "flow", "mutated", "garbage"]))
    if kind == "garbage":
        return draw(st.one_of(st.sampled_from(YAML_GARBAGE), text, st.binary(max_size=60).map(lambda b: b.decode(
            "latin-1"))))  # fmt: skip
    data = draw(plan_data)
    if kind == "flow":
        return _yaml_dump(data)
    out = block_yaml(data)
    if kind == "mutated":
        for _ in range(draw(st.integers(1, 3))):
            pos = draw(st.integers(0, len(out)))
            op = draw(st.sampled_from(["insert", "delete", "dup-line", "indent"]))
            if op == "insert":
                out = out[:pos] + draw(
                    st.sampled_from(
                        [
                            ":",
                            "- ",
                            "&a ",
                            "*a",
                            "!!str ",
                            "'",
                            '"',
                            "\n",
                            "  ",
                            "#",
                            "{",
                            "[",
                            "? ",
                            "|",
                            ">",
                            "%",
                            "@",
                            "\t",
                            "!!python/name:os.x ",
                        ]
                    )
                )
                out = out + draw(st.sampled_from(["", "\n"]))
            elif op == "delete":
                out = out[:pos] + out[pos + draw(st.integers(1, 8)) :]
            elif op == "dup-line":
                lines = out.splitlines(keepends=True)
                if lines:
                    i = draw(st.integers(0, len(lines) - 1))
                    lines.insert(i, lines[i])
                out = "".join(lines)
            else:
                out = out.replace("\n", "\n  ", 1)
    return out  # fmt: skip


def block_yaml(data: Any, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(data, dict):
        if not data:
            return "{}\n"
        lines = []
        for k, v in data.items():
            key = json.dumps(k, ensure_ascii=False) if not str(k).replace("-", "").replace("_", "").isalnum() else k
            if isinstance(v, dict | list) and v:
                lines.append(f"{pad}{key}:\n{block_yaml(v, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {_flow(v)}\n")
        return "".join(lines)
    if isinstance(data, list):
        if not data:
            return f"{pad}[]\n"
        return "".join(f"{pad}- {_flow(v)}\n" for v in data)
    return f"{pad}{_flow(data)}\n"


def _flow(v: Any) -> str:
    if isinstance(v, str) and v and all(c.isalnum() or c in "-_. :" for c in v) and not v.endswith(":"):
        return v  # plain scalars, as people write them (0000:01:00.0 stays a string in YAML 1.2)
    return json.dumps(v, ensure_ascii=False, default=str)
