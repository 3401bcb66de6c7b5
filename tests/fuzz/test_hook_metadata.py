"""The qemu hook's metadata surface (`vgpuadm hook run`, issue #31): whatever device ids a domain's vgpuadm
metadata names as on-demand — another domain's mdev UUID, a GPU another domain passes through, fresh or malformed
ids, any mode, type and placement hint — the hook never makes, frees or rebinds a device another domain owns.

The host: a simulated P4 pair. web01 runs (libvirt's status file says so) with its on-demand mdev, which its own
hook start made; web03 (stopped) owns an mdev for good; db01 (stopped) passes GPU 0000:02:00.0 through for good.
web02's metadata is generated; its start and then its stop run through the hook's orchestration in-process, and
after each the owned devices are exactly as they were (web01's and web03's mdevs with their type and parent,
0000:02:00.0 with its driver). Every outcome is a success or one clean error line, never another exception."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.domains import domain, libvirt_file, vgpuadm
from tests.fuzz.conftest import Tally, examples
from tests.fuzz.props import clean_error
from vgpuadm import api, modes
from vgpuadm.cli.app import run
from vgpuadm.cli.console import Console
from vgpuadm.errors import VgpuadmError
from vgpuadm.model import Allocation, DeviceMode, device_uuid
from vgpuadm.ops import hook
from vgpuadm.plan import guest
from vgpuadm.sim.profiles import build
from vgpuadm.virt import xml

WEB01, WEB02, WEB03, DB01 = (f"6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a0{i}" for i in range(4))
GPU1, GPU2 = "0000:01:00.0", "0000:02:00.0"
U3 = "11111111-2222-3333-4444-555555555555"  # web03's mdev, made by hand and recorded for good


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The host with its owners (built once); returns (root, web01's mdev UUID)."""
    root = tmp_path_factory.mktemp("hook-fuzz") / "host"
    build("p4", str(root))
    snap = api.discover(str(root))
    _plan, _added, after = guest.plan_create(
        snap, domain("web01", WEB01, metadata="", devices=""), "nvidia-63", on_demand=True
    )
    web01 = domain("web01", WEB01, metadata=xml.metadata_xml(after, snap.host_key),
                   devices="".join(modes.hostdev_xml(a) for a in after))  # fmt: skip
    hook.run(str(root), "web01", "prepare", "begin", web01.encode())
    libvirt_file(root, web01, running=True)
    [u1] = [a.uuid for a in after]
    assert u1 is not None and os.path.isdir(root / "sys/bus/mdev/devices" / u1)
    made = run(["--root", str(root), "mdev", "create", "--type", "nvidia-63", "--uuid", U3, "--gpu", GPU1],
               Console(io.StringIO(), io.StringIO()))  # fmt: skip
    assert made == 0
    owned3 = Allocation("web03", DeviceMode.MDEV, "nvidia-63", GPU1, uuid=U3, domain_uuid=WEB03, slot=0)
    web03 = domain(
        "web03", WEB03, metadata=xml.metadata_xml([owned3], snap.host_key), devices=modes.hostdev_xml(owned3)
    )
    libvirt_file(root, web03, running=False)
    libvirt_file(root, domain("db01", DB01, metadata="", devices=xml.pci_hostdev(GPU2)), running=False)
    yield root, u1


def owned_state(root: Path, u1: str) -> dict[str, Any]:
    """What the owners hold: each owned mdev's type and parent, and the passed-through GPU's driver."""
    out: dict[str, Any] = {}
    for u in (u1, U3):
        dev = root / "sys/bus/mdev/devices" / u
        out[u] = (os.path.basename(os.readlink(dev / "mdev_type")), os.path.basename(os.path.dirname(
            os.path.realpath(dev)))) if dev.exists() else None  # fmt: skip
    driver = root / "sys/bus/pci/devices" / GPU2 / "driver"
    out[GPU2] = os.path.basename(os.readlink(driver)) if driver.is_symlink() else None
    return out


def _ids(u1: str, kind: str) -> st.SearchStrategy[str]:
    """Mostly ids of the right kind (mdev UUIDs, PCI addresses), now and then one of the other kind or none."""
    uuids = [u1, U3, device_uuid("fuzz", WEB02, 0)]
    pcis = [GPU1, GPU2, "0000:02:00.1", "0000:01:00.4"]
    right, wrong = (uuids, pcis) if kind == "uuid" else (pcis, uuids)
    odd = st.sampled_from([*wrong, u1.upper(), "not-an-id"])
    return st.integers(0, 7).flatmap(lambda n: odd if n == 0 else st.sampled_from(right))


@st.composite
def web02_metadata(draw: st.DrawFn, u1: str) -> str:
    """web02's vgpuadm metadata: 1-3 devices, each naming ids of its own choosing as on-demand."""
    devices = []
    for slot in range(draw(st.integers(1, 3))):
        mode = draw(st.sampled_from(["mdev", "mdev", "mdev", "mdev", "pci", "pci", "vf"]))
        attrs = {"slot": str(slot), "mode": mode}
        if mode != "pci" or draw(st.booleans()):
            attrs["type"] = draw(st.sampled_from(["nvidia-63"] * 4 + ["nvidia-64", "nvidia-66", "P4-1Q", "nvidia-999"]))
        if mode == "mdev":
            attrs["uuid"] = draw(_ids(u1, "uuid"))
        for key in ("parent", "address"):
            if mode != "mdev" or draw(st.integers(0, 5)) == 0:
                attrs[key] = draw(_ids(u1, "pci"))
        options = {"on_demand": "yes"}
        if draw(st.booleans()):
            options["gpu"] = draw(st.sampled_from([GPU1, GPU2]))
        if mode == "pci":
            options["managed"] = "no"
            if draw(st.booleans()):
                options["force"] = "yes"
        if draw(st.booleans()):
            options["policy"] = draw(st.sampled_from(["pack", "spread"]))
        opts = "".join(f'<vgpuadm:option name="{k}" value="{v}"/>' for k, v in options.items())
        devices.append(f"<vgpuadm:device {' '.join(f'{k}={v!r}' for k, v in attrs.items())}>{opts}</vgpuadm:device>")
    return vgpuadm(*devices)


@examples(40)
@given(data=st.data())
def test_hook_metadata_never_touches_another_domains_device(
    tally: Tally, template: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    base, u1 = template
    root = tmp_path_factory.mktemp("hook-example") / "host"
    shutil.copytree(base, root, symlinks=True)
    for saved in [*root.glob("etc/libvirt/qemu/*.xml"), *root.glob("run/libvirt/qemu/*.xml")]:
        saved.write_text(saved.read_text().replace(f"sim:{base}", f"sim:{root}"))  # the copy's host key
    meta = data.draw(web02_metadata(u1))
    web02 = domain("web02", WEB02, metadata=meta, devices="")
    libvirt_file(root, web02, running=False)
    before = owned_state(root, u1)
    for op, sub in (("prepare", "begin"), ("release", "end")):
        try:
            hook.run(str(root), "web02", op, sub, web02.encode())
        except VgpuadmError as exc:
            problem = clean_error(exc)
            if problem:
                raise tally.violation(f"hook {op} on {meta}: {problem}") from exc
            tally.error()
        else:
            tally.ok()
        after = owned_state(root, u1)
        if after != before:
            raise tally.violation(f"hook {op}/{sub} of web02 with {meta} changed what others own: {before} → {after}")
    shutil.rmtree(root.parent, ignore_errors=True)
