"""The split-based name and description parsers in vgpuadm/model.py accept exactly what the regular expressions
they replaced accepted: both run on the same generated strings (fixed seed) and must agree on every one."""

from __future__ import annotations

import random
import re

from vgpuadm.model import describe_nvidia_name, parse_description

PROFILE = re.compile(
    r"^(?P<board>.+?)(?:-(?P<slices>\d+))?-(?P<fb>\d+)(?P<series>[ABCQ])(?P<variant>ME|4)?$", re.IGNORECASE
)
NV = re.compile(
    r"^num_heads=(?P<heads>\d+), frl_config=(?P<frl>\d+), framebuffer=(?P<fb>\d+)M, "
    r"max_resolution=(?P<res>\d+x\d+), max_instance=(?P<max>\d+)$"
)
GVT = re.compile(r"^(?P<key>low_gm_size|high_gm_size|fence|resolution|weight):\s*(?P<value>\S+)$")


def regex_name(name: str) -> tuple[object, ...]:
    parts = name.split()
    profile = parts[-1] if parts else name
    m = PROFILE.match(profile)
    if not m:
        return (profile, None, None, None, None, None)
    fb = int(m["fb"])
    slices = int(m["slices"]) if m["slices"] else None
    return (profile, m["board"], slices, 512 if fb == 0 else fb * 1024, m["series"].upper(), m["variant"])


def regex_description(text: str) -> dict[str, str | int]:
    text = text.strip()
    m = NV.match(text)
    if m:
        return {"num_heads": int(m["heads"]), "frl_config": int(m["frl"]), "framebuffer_mib": int(m["fb"]),
                "max_resolution": m["res"], "max_instance": int(m["max"])}  # fmt: skip
    out: dict[str, str | int] = {}
    for line in text.splitlines():
        g = GVT.match(line.strip())
        if g:
            v = g["value"]
            if v.endswith("MB") and v[:-2].isdigit():
                out[g["key"].replace("_size", "_mib")] = int(v[:-2])
            else:
                out[g["key"]] = int(v) if v.isdigit() else v
    return out


def test_names_parse_as_the_profile_regex():
    pieces = ["-", "1", "0", "18", "4", "Q", "q", "A", "b", "C", "M", "E", "me", "x", "H200X", "٣", " ", "GRID "]
    rnd = random.Random(7)
    for _ in range(20000):
        name = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 8)))
        n = describe_nvidia_name(name)
        assert (n.profile, n.board, n.slices, n.framebuffer_mib, n.series, n.variant) == regex_name(name), name


def test_descriptions_parse_as_the_nvidia_and_gvt_regexes():
    fields = ["num_heads=4", "frl_config=60", "framebuffer=1024M", "max_resolution=5120x2880", "max_instance=8",
              "num_heads=x", "framebuffer=10", "max_resolution=5x", "max_instance=٣", "low_gm_size: 128MB", "fence:4",
              "resolution: 1920x1200", "weight: 4 5", "weight:", " fence: 2", "high_gm_size:\t512MB", "fence:a:b"]  # fmt: skip
    seps = [", ", ",", "\n", " , ", "\r\n"]
    rnd = random.Random(7)
    for _ in range(20000):
        k = rnd.randint(0, 6)
        text = "".join(rnd.choice(fields) + (rnd.choice(seps) if i < k - 1 else "") for i in range(k))
        assert parse_description(text) == regex_description(text), text
    nvidia = "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=8"
    assert parse_description(f" {nvidia}\n") == regex_description(nvidia) != {}
