"""The embedded default: on a simulated root with no --connect and no $LIBVIRT_DEFAULT_URI, vgpuadm runs libvirt's
embedded QEMU driver in-process under <root>/var/lib/vgpuadm/libvirt (no daemon).

libvirt allows one embedded driver root per process for the life of the process, so every test here runs vgpuadm
in a subprocess (never in the pytest worker, whose other tests may open their own embedded root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from embedded_host import define
from embedded_host import vgpuadm as run_vgpuadm

from vgpuadm.sim.profiles import build
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


def test_a_root_too_long_for_libvirts_probe_socket_still_takes_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libvirt probes QEMU through a UNIX socket under the embedded root (…/lib/qemu/qmp-XXXXXX/qmp.monitor), and
    a socket path must fit in 108 bytes. With no earlier probe result cached (an empty $XDG_CACHE_HOME: a fresh
    machine) every definition under a longer root failed ("UNIX socket path … is too long"). Real libvirt, real
    QEMU: vgpuadm probes once under a short private directory and seeds the root with the result."""
    root = tmp_path / ("a-long-directory-name-" * 3) / "host"
    build("p4", str(root))
    assert len(embed_uri(str(root)).split("root=", 1)[1] + "/lib/qemu/qmp-XXXXXX/qmp.monitor") > 107
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # embedded_host's processes inherit it
    assert list(define(root, "web01", vnc=False)) == ["web01"]
    r = run_vgpuadm(root, "create", "--type", "nvidia-63", "--vm", "web01")
    assert (r.code, r.err) == (0, "")
    assert "<hostdev mode='subsystem' type='mdev'" in virsh_xml(root, "web01")
    assert len(list((cache / "vgpuadm" / "qemu-capabilities").glob("*.xml"))) == 1  # kept for the next root


def test_a_root_with_uri_characters_keeps_libvirts_state_inside_it(tmp_path: Path) -> None:
    """The embedded URI carries the root path percent-escaped (#31 item 11): unescaped, `#` ended the root (the
    rest became a fragment), `&` started another parameter and libvirt unescaped `%2e%2e%2f` into `../`, so the
    driver's state (definitions, caches) went outside the root. Real libvirt, real QEMU."""
    top = tmp_path / "top"
    root = top / "a b#c&d=e%2e%2e%2fx'q\"" / "host"
    build("p4", str(root))
    assert list(define(root, "web01", vnc=False)) == ["web01"]
    assert (root / "var/lib/vgpuadm/libvirt/etc/qemu/web01.xml").is_file()
    assert sorted(os.listdir(top)) == ["a b#c&d=e%2e%2e%2fx'q\""]  # nothing beside the root
    assert sorted(os.listdir(top / "a b#c&d=e%2e%2e%2fx'q\"")) == ["host"]
    r = run_vgpuadm(root, "vms", "--json")
    assert r.code == 0 and '"web01"' in r.out, r.err
