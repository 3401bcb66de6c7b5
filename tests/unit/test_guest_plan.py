"""The guest planners (vgpuadm/plan/guest.py) are pure: given a simulated host's snapshot and a domain's XML they return
the exact steps, hostdev XML and metadata. No libvirt here (the daemon and embedded lanes in tests/libvirt run the
same commands for real)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests import domains
from vgpuadm import api, modes
from vgpuadm.errors import CapacityError, ConflictError, NotFoundError, UsageError
from vgpuadm.host.root import HostRoot
from vgpuadm.io.planfile import parse_plan
from vgpuadm.model import Allocation, device_uuid
from vgpuadm.plan import desired, guest
from vgpuadm.plan.apply import build_apply_plan, resolve_types
from vgpuadm.plan.domains import Domains
from vgpuadm.steps import DefineDomain
from vgpuadm.virt import xml

DOM_UUID = domains.WEB01


def domain(
    name: str = "web01", allocations: Sequence[Allocation] = (), hostdevs: Sequence[str] = (), graphics: bool = True
) -> str:
    meta = xml.metadata_xml(allocations) if allocations else None
    return domains.domain(name, DOM_UUID, metadata=meta, devices=(domains.VNC if graphics else "") + "".join(hostdevs))


def test_create_plan_is_create_then_one_definition(sim_host):
    root = sim_host("p4")
    snap = api.discover(str(root))
    u = device_uuid(HostRoot(str(root)).machine_id(), DOM_UUID, 0)
    plan, added, after = guest.plan_create(snap, domain(), "P4-1Q", display=True, params=["frame_rate_limiter=0"])
    assert plan.describe() == [
        f"step 1/3 create mdev {u} of type nvidia-63 on 0000:01:00.0",
        f'step 2/3 set vgpu_params of mdev {u} to "frame_rate_limiter=0"',
        f"step 3/3 attach mdev {u} (nvidia-63) to domain web01, and record 1 vgpuadm device(s) in its metadata",
    ]
    define = plan.steps[2]
    assert isinstance(define, DefineDomain)
    assert (define.attach, define.detach, define.previous) == (xml.mdev_hostdev(u, display=True), "", "")
    assert define.element == (
        f'<vgpuadm:vgpuadm xmlns:vgpuadm="{xml.NS}" version="1" host="sim:{root}">\n'
        f'  <vgpuadm:device slot="0" mode="mdev" type="nvidia-63" parent="0000:01:00.0" uuid="{u}" '
        'params="frame_rate_limiter=0">\n'
        '    <vgpuadm:option name="display" value="on"/>\n'
        "  </vgpuadm:device>\n"
        "</vgpuadm:vgpuadm>\n"
    )
    assert added == after and [a.uuid for a in added] == [u]


def test_display_on_needs_a_graphics_device_and_is_refused_while_planning(sim_host):
    """libvirt refuses a display='on' hostdev in a domain with no <graphics> only at the attach, after the kernel
    steps: the planner refuses it first, naming the domain and the fix. Display off, or a VF, needs none."""
    snap = api.discover(str(sim_host("p4")))
    with pytest.raises(UsageError) as caught:
        guest.plan_create(snap, domain(graphics=False), "nvidia-63", display=True)
    assert caught.value.message == "domain web01 has no <graphics> device, which a vGPU with display on needs"
    assert caught.value.hint == (
        "add one (virsh edit web01, then <graphics type='vnc'/> or <graphics type='spice'/> under <devices>), "
        "or use --display off"
    )
    plan, added, _ = guest.plan_create(snap, domain(graphics=False), "nvidia-63")
    assert len(added) == 1 and not plan.empty
    owned = [Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", uuid="c2177883-f1bb-47f0-914d-32a22e3a8804")]
    plan, added, _ = guest.plan_create(snap, domain(allocations=owned, graphics=False), "nvidia-63", display=True)
    assert (plan.empty, added) == (True, [])  # nothing to attach: nothing to refuse


def test_create_counts_what_the_domain_already_owns(sim_host):
    snap = api.discover(str(sim_host("p4")))
    owned = [Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", uuid="c2177883-f1bb-47f0-914d-32a22e3a8804")]
    plan, added, after = guest.plan_create(snap, domain(allocations=owned), "nvidia-63")
    assert (plan.empty, plan.summary, added) == (True, "domain web01 already has 1 × nvidia-63", [])
    assert [a.uuid for a in after] == ["c2177883-f1bb-47f0-914d-32a22e3a8804"]
    plan, added, _ = guest.plan_create(snap, domain(allocations=owned), "nvidia-63", 2)
    assert [a.slot for a in added] == [1]
    record = plan.steps[-1]
    assert isinstance(record, DefineDomain) and record.devices == 2 and 'slot="0"' in record.previous


def test_joint_placement_across_domains_packs_then_spills(sim_host):
    root = sim_host("p4")
    snap = api.discover(str(root))
    domains = [(domain(f"vm{i}").replace(DOM_UUID, f"00000000-0000-4000-8000-{i:012d}"), 1) for i in range(9)]
    plans = guest.plan_create_many(snap, domains, "nvidia-63")
    assert [(p.name, p.added[0].parent) for p in plans] == [(f"vm{i}", "0000:01:00.0") for i in range(8)] + [
        ("vm8", "0000:02:00.0")
    ]
    assert all(len(p.plan.steps) == 2 for p in plans)


def test_create_refusals(sim_host):
    snap = api.discover(str(sim_host("p4")))
    with pytest.raises(NotFoundError, match='Unknown type "nvidia-999"'):
        guest.plan_create(snap, domain(), "nvidia-999")
    with pytest.raises(UsageError, match="--ramfb needs --display on"):
        guest.plan_create(snap, domain(), "nvidia-63", ramfb=True)
    with pytest.raises(UsageError, match="--param 'frame_rate_limiter' is not key=value"):
        guest.plan_create(snap, domain(), "nvidia-63", params=["frame_rate_limiter"])
    with pytest.raises(CapacityError):
        guest.plan_create(snap, domain(), "nvidia-63", 17)


def test_layout_c_gives_the_vf_unmanaged(sim_host):
    snap = api.discover(str(sim_host("h200-vendor-vfio")))
    plan, added, _ = guest.plan_create(snap, domain(), "H200X-4C")
    vf = added[0].address
    assert (added[0].mode, added[0].parent, added[0].uuid) == ("vf", vf, None)
    assert plan.describe()[0] == f"step 1/2 set vGPU type 1420 (nvidia-1420) on VF {vf}"
    attach = plan.steps[1]
    assert isinstance(attach, DefineDomain) and attach.attach == xml.vf_hostdev(vf)
    assert 'managed="no"' in attach.attach


def test_destroy_plan_and_its_refusals(sim_host):
    snap = api.discover(str(sim_host("p4")))
    owned = [Allocation("web01", "mdev", "nvidia-63", "0000:01:00.0", uuid="c2177883-f1bb-47f0-914d-32a22e3a8804")]
    dom = domain(allocations=owned, hostdevs=[modes.hostdev_xml(owned[0])])
    plan, gone, after = guest.plan_destroy(snap, dom, {}, uuid=None, all_=True)
    # the mdev does not exist in this snapshot: only the new definition (no hostdev, no metadata) remains
    assert [type(s) for s in plan.steps] == [DefineDomain] and after == []
    assert (plan.steps[0].detach, plan.steps[0].element) == (modes.hostdev_xml(owned[0]), "")
    assert plan.describe() == [
        f"step 1/1 detach mdev {owned[0].uuid} (nvidia-63) from domain web01, and remove its vgpuadm metadata"
    ]
    assert [(a.uuid, a.domain_uuid) for a in gone] == [(owned[0].uuid, DOM_UUID)]
    with pytest.raises(ConflictError, match="is also used by domain db01"):
        guest.plan_destroy(snap, dom, {("mdev", owned[0].uuid): "db01"}, uuid=None, all_=True)
    # one device: neither --uuid nor --all is needed
    assert guest.plan_destroy(snap, dom, {}, uuid=None, all_=False)[1] == gone
    with pytest.raises(UsageError, match="not both") as refused:
        guest.plan_destroy(snap, dom, {}, uuid=owned[0].uuid, all_=True)
    assert refused.value.hint == "vgpuadm destroy --vm web01 --all"
    with pytest.raises(NotFoundError, match=r"owns no vgpuadm device 0000:65:00\.0"):
        guest.plan_destroy(snap, dom, {}, uuid="0000:65:00.0", all_=False)


def test_passthrough_plan_binds_group_then_attaches_one_slot(sim_host):
    snap = api.discover(str(sim_host("passthrough")))
    plan, added, _ = guest.plan_passthrough(snap, domain(), "65:00.0", {})
    [define] = [s for s in plan.steps if isinstance(s, DefineDomain)]
    assert define.attach == (
        xml.pci_hostdev("0000:65:00.0", guest_address=xml.PciAddress(0, 0, 0x10, 0, multifunction=True))
        + xml.pci_hostdev("0000:65:00.1", guest_address=xml.PciAddress(0, 0, 0x10, 1))
    )
    assert plan.steps[-1] is define
    assert plan.describe()[0].startswith("step 1/") and "remember original drivers" in plan.describe()[0]
    assert [a.extra["host_driver"] for a in added] == ["nvidia", "snd_hda_intel"]


def test_a_running_domain_gets_a_function_hot_plugged_where_libvirt_puts_it(sim_host):
    """Found by the kernel lane: a running q35 guest refused the function at a fixed slot on its root bus ("requires
    hotplug capability, but the PCI controller with index='0' doesn't support hotplug"). Hot-plugged, the function
    has no guest address (libvirt picks a hot-pluggable root port); a multifunction slot, which libvirt cannot
    hot-plug, is refused before any change."""
    snap = api.discover(str(sim_host("passthrough")))
    [a] = guest.passthrough_allocations(snap, "web01", DOM_UUID, domain(), "0000:65:00.0", ["0000:65:00.0"], [],
                                        running=True)  # fmt: skip
    assert a.extra == {"managed": "yes", "host_driver": "nvidia"}
    assert "<address" not in modes.hostdev_xml(a).split("</source>")[1]
    with pytest.raises(ConflictError, match=r"^domain web01 is running: 0000:65:00\.0's 2 functions go into one "
                       r"multifunction guest slot, which libvirt cannot hot-plug$") as refused:  # fmt: skip
        guest.plan_passthrough(snap, domain(), "65:00.0", {}, running=True)
    assert refused.value.hint == "shut it down (virsh shutdown web01) and run the command again"


def test_every_guest_command_has_help_with_an_example(cli, capsys):
    """click prints --help to the process's stdout itself, hence capsys."""
    for command in ("create", "destroy", "passthrough", "release", "demo"):
        assert cli(command, "--help").code == 0
        assert "Example: vgpuadm " in capsys.readouterr().out, command


def _apply(snap, plan_text: str, domains: dict[str, str]):
    """`apply -f` planned for a plan file's text against domains (name → persistent XML)."""
    doc = parse_plan(plan_text, source="plan.yaml")
    doms = Domains.of(snap.host_key, [(n, xml.domain_identity(x)[1], x, False, "") for n, x in domains.items()])
    d = desired.diff(doc, desired.Current(doms.allocations), resolve_types(doc, snap, doms.allocations))
    return build_apply_plan(doc, d, snap, doms, {})


def test_apply_checks_an_on_demand_vgpus_display_as_create_does(sim_host):
    """`apply -f` plans through the same guest planner as `create`: an on-demand vGPU with display on is refused
    for a domain with no <graphics> (libvirt would refuse the definition), at the plan file's `display` line."""
    snap = api.discover(str(sim_host("p4")))
    with pytest.raises(UsageError, match=r"^domain web01 has no <graphics> device") as by_create:
        guest.plan_create(snap, domain(graphics=False), "nvidia-63", display=True, on_demand=True)
    plan = "vms:\n  web01:\n    type: nvidia-63\n    on_demand: true\n    display: {enabled: true}\n"
    with pytest.raises(UsageError) as by_apply:
        _apply(snap, plan, {"web01": domain(graphics=False)})
    assert by_apply.value.message == f"plan.yaml:5: vms.web01.display: {by_create.value.message}"
    assert by_apply.value.hint.endswith("or set display: {enabled: false}")


def test_apply_refuses_a_gpu_another_domain_holds_as_passthrough_does(sim_host):
    """One conflict input for every verb that gives devices: a GPU another domain holds is refused by `apply -f`
    with the words `passthrough` uses, naming that domain."""
    snap = api.discover(str(sim_host("passthrough")))
    *_, after = guest.plan_passthrough(snap, domain("db01"), "65:00.0", {})
    db01 = domain("db01", after).replace(DOM_UUID, "6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a02")
    users = Domains.of(snap.host_key, [("db01", "6b7f1e4e-5d3c-4d0b-9a55-2f9c4d1b0a02", db01, False, "")]).users()
    with pytest.raises(ConflictError) as by_verb:
        guest.plan_passthrough(snap, domain(), "65:00.0", users)
    with pytest.raises(ConflictError) as by_apply:
        _apply(snap, "vms:\n  web01:\n    passthrough: [0000:65:00.0]\n", {"web01": domain(), "db01": db01})
    assert by_verb.value.message == "0000:65:00.0 is already given to domain db01"
    assert by_apply.value.message == f"plan.yaml:3: vms.web01.passthrough: {by_verb.value.message}"
    assert by_apply.value.hint == by_verb.value.hint
