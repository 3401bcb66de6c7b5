"""The embedded default: on a simulated root with no --connect and no $LIBVIRT_DEFAULT_URI, vgpuadm runs libvirt's
embedded QEMU driver in-process under <root>/var/lib/vgpuadm/libvirt (no daemon).

libvirt allows one embedded driver root per process for the life of the process, so every test here runs vgpuadm
in a subprocess (never in the pytest worker, whose other tests may open their own embedded root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from vgpuadm.ops.demo import _DOMAIN_NS, DEMO_MACHINE_ID
from vgpuadm.plan.ids import device_uuid
from vgpuadm.virt.conn import embed_uri

ENV = {k: v for k, v in os.environ.items() if k not in ("LIBVIRT_DEFAULT_URI", "VGPUADM_ROOT")}


def vgpuadm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vgpuadm", *args], capture_output=True, text=True, env=ENV,
                          timeout=120)  # fmt: skip


def virsh_xml(root: Path, domain: str) -> str:
    r = subprocess.run(["virsh", "-c", embed_uri(str(root)), "dumpxml", "--inactive", domain], capture_output=True,
                       text=True, env=ENV, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_demo_then_create_and_destroy_on_the_embedded_driver(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    r = vgpuadm("demo", "--dir", str(root), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    u = device_uuid(DEMO_MACHINE_ID, str(uuid.uuid5(_DOMAIN_NS, "web01")), 0)
    assert (doc["root"], doc["uri"], doc["domains"]) == (str(root), embed_uri(str(root)), ["db01", "web01", "web02"])
    assert [(a["uuid"], a["type_id"], a["parent"]) for a in doc["create"]["added"]] == [
        (u, "nvidia-63", "0000:01:00.0")
    ]
    assert os.listdir(root / "sys/bus/mdev/devices") == [u]
    domain_xml = virsh_xml(root, "web01")
    assert f"<address uuid='{u}'/>" in domain_xml
    assert '<vgpuadm:device slot="0" mode="mdev" type="nvidia-63" parent="0000:01:00.0"' in domain_xml

    again = vgpuadm("--root", str(root), "create", "--type", "nvidia-63", "--vm", "web01", "--json")
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["changed"], os.listdir(root / "sys/bus/mdev/devices")) == (False, [u])

    gone = vgpuadm("--root", str(root), "destroy", "--vm", "web01", "--all")
    assert (gone.returncode, gone.stdout) == (0, f"detached mdev nvidia-63 {u} on 0000:01:00.0 (from web01)\n")
    assert os.listdir(root / "sys/bus/mdev/devices") == []
    domain_xml = virsh_xml(root, "web01")
    assert "<hostdev" not in domain_xml and "vgpuadm" not in domain_xml


def test_demo_output_shows_the_device_and_its_hostdev_xml(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    r = vgpuadm("demo", "--dir", str(root))
    assert r.returncode == 0, r.stderr
    u = device_uuid(DEMO_MACHINE_ID, str(uuid.uuid5(_DOMAIN_NS, "web01")), 0)
    uri = embed_uri(str(root))
    assert r.stdout.splitlines() == [
        f"simulated host: {root}",
        f"libvirt:        {uri}",
        "domains:        db01, web01, web02",
        "",
        "$ vgpuadm create --type nvidia-63 --vm web01",
        f"attached mdev nvidia-63 {u} on 0000:01:00.0 (to web01)",
        "",
        f"hostdev XML added to web01 ({uri}):",
        '<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="off">',
        "  <source>",
        f'    <address uuid="{u}"/>',
        "  </source>",
        "</hostdev>",
        "",
        f"next: vgpuadm --root {root} devices",
    ]


def test_demo_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me\n")
    r = vgpuadm("demo", "--dir", str(tmp_path))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines()[0] == f"error: {tmp_path} is not empty"
    assert os.listdir(tmp_path) == ["x"]


def test_a_second_embedded_root_in_one_process_is_a_clear_error(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from vgpuadm.errors import VgpuadmError\n"
        "from vgpuadm.virt.conn import VirtConn, embed_uri\n"
        "VirtConn(embed_uri(sys.argv[1])).list_domains()\n"
        "try:\n"
        "    VirtConn(embed_uri(sys.argv[2])).list_domains()\n"
        "except VgpuadmError as exc:\n"
        "    print(type(exc).__name__, exc.message, '|', exc.hint)\n"
    )
    a, b = tmp_path / "a", tmp_path / "b"
    r = subprocess.run([sys.executable, "-c", script, str(a), str(b)], capture_output=True, text=True, env=ENV,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        f"ConflictError this process already runs libvirt's embedded driver at {a}/var/lib/vgpuadm/libvirt; libvirt "
        f"cannot open a second one at {b}/var/lib/vgpuadm/libvirt | run one vgpuadm process per simulated host, "
        "or pass --connect qemu:///system\n"
    )
