"""One persistent libvirt write per VM: `create --vm`, `destroy --vm` and `apply -f` of several VMs against a real
libvirtd (qemu:///system) change each domain's persistent definition with ONE call — defineXML of the hostdevs and
the vgpuadm metadata together — instead of an attach-device --config followed by a metadata write.

The writes are counted at the libvirt-python boundary: the real virConnect/virDomain methods are wrapped (each call
still goes to the daemon) and every call that writes a persistent definition is recorded: defineXML, and
attach/detach/setMetadata with VIR_DOMAIN_AFFECT_CONFIG. Nothing is mocked; the domains end up as the daemon keeps
them."""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from vgpuadm.virt import xml

pytestmark = pytest.mark.libvirt

Writes = list[tuple[str, str]]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    """(call, domain) of every persistent-definition write the process makes through libvirt-python."""
    seen: Writes = []
    define = libvirt.virConnect.defineXML

    def counted_define(self: libvirt.virConnect, text: str) -> libvirt.virDomain:
        seen.append(("defineXML", xml.domain_identity(text)[0]))
        return define(self, text)

    monkeypatch.setattr(libvirt.virConnect, "defineXML", counted_define)
    for method, flags_at in (("attachDeviceFlags", 1), ("detachDeviceFlags", 1), ("setMetadata", 4)):
        real = getattr(libvirt.virDomain, method)

        def counted(self: libvirt.virDomain, *args: object, _real: object = real, _m: str = method,
                    _at: int = flags_at) -> object:  # fmt: skip
            flags = args[_at] if len(args) > _at else 0
            if isinstance(flags, int) and flags & libvirt.VIR_DOMAIN_AFFECT_CONFIG:
                seen.append((_m, self.name()))
            return _real(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(libvirt.virDomain, method, counted)
    return seen


def _owned(conn: libvirt.virConnect, name: str) -> tuple[int, int]:
    text = conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    return len(xml.parse_hostdevs(text)), len(xml.parse_allocations(text))


def test_create_and_destroy_write_each_definition_once(sim_host, cli, conn, daemon_domain, writes, libvirtd):
    root = sim_host("p4")
    vm = daemon_domain("one0")
    writes.clear()  # the test's own definitions
    r = cli("--root", str(root), "--connect", libvirtd, "create", "--type", "nvidia-63", "--vm", vm, "--count", "2")
    assert r.code == 0, r.err
    assert (writes, _owned(conn, vm)) == ([("defineXML", vm)], (2, 2))
    writes.clear()
    r = cli("--root", str(root), "--connect", libvirtd, "destroy", "--vm", vm, "--all")
    assert r.code == 0, r.err
    assert (writes, _owned(conn, vm)) == ([("defineXML", vm)], (0, 0))


def test_apply_writes_one_definition_per_vm(sim_host, cli, conn, daemon_domain, writes, libvirtd, tmp_path: Path):
    root = sim_host("p4")
    vms = [daemon_domain(f"one{i}") for i in range(3)]
    writes.clear()
    plan = tmp_path / "plan.yaml"
    plan.write_text("version: 1\nvms:\n" + "".join(f"  {vm}:\n    type: nvidia-63\n    count: 2\n" for vm in vms))
    r = cli("--root", str(root), "--connect", libvirtd, "apply", "-f", str(plan))
    assert r.code == 0, r.err
    assert sorted(writes) == sorted(("defineXML", vm) for vm in vms)
    assert [_owned(conn, vm) for vm in vms] == [(2, 2)] * 3
