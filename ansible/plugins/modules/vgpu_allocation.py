#!/usr/bin/python
# Copyright: vgpuadm developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ansible module: the GPUs one libvirt VM owns (vGPUs of a type, or a whole passed-through GPU), as desired state.

The task's options become ONE desired state for the VM (a vgpuadm plan, DesiredPlan, checked against the plan
file schema by vgpuadm.io.planfile.plan_from_data) and that is committed once by vgpuadm.api.apply_desired, the
code path of `vgpuadm apply -f`: one journaled plan under the host lock, rolled back as a whole when a step fails
and by `vgpuadm reconcile` when the process dies mid-way. `changed`, the steps and the diff come from its
ApplyResult; check mode is the same call with check=True (plans, executes nothing).

Why the Python API and not the JSON CLI: the module runs under the Python vgpuadm is installed in
(ansible_python_interpreter), so it gets the plan and the allocations as data (no output scraping, no second
process), and vgpuadm's errors as objects whose one-line message and hint become the task's msg and hint.
"""

DOCUMENTATION = r"""
---
module: vgpu_allocation
short_description: Give a libvirt VM vGPUs or a whole GPU with vgpuadm
version_added: 0.1.0
description:
  - Declares what one libvirt domain owns, either O(count) vGPUs of a O(type) (NVIDIA mdev types on a GPU or its VFs,
    NVIDIA vendor-specific VFIO VFs, Intel GVT-g, the kernel's mdev samples), or a whole GPU by O(passthrough)
    (its IOMMU group bound to vfio-pci, GPU and audio functions in one guest slot).
  - Each task is one vgpuadm plan, made and committed the way C(vgpuadm apply -f) does it (take back, create the
    devices, attach the hostdevs, record them in the domain's vgpuadm metadata) under vgpuadm's host lock and
    journaled; a failed step rolls back what the plan did, and C(vgpuadm reconcile) rolls back a plan whose
    process died mid-way.
  - As in a vgpuadm plan file, a VM owns one kind of device (plus, with O(virtio_gl), a virtio-gpu). O(state=present) with a O(type) takes back the VM's
    devices of other types and its passed-through GPUs; with O(passthrough) it keeps the GPUs the VM already has
    passed through and takes back its vGPUs. A running VM's devices are never taken back (the task fails).
  - Idempotent. What a VM owns is read from its vgpuadm metadata, so a VM that already has its devices gives an
    empty plan and C(changed=false).
  - Runs vgpuadm's Python API, so the module's interpreter (C(ansible_python_interpreter)) must import C(vgpuadm).
author:
  - vgpuadm developers (@vgpuadm)
requirements:
  - python >= 3.11
  - vgpuadm (importable by the module's Python)
  - libvirt-python, and a libvirt daemon (or libvirt's embedded driver on a simulated host)
attributes:
  check_mode:
    support: full
    description: Plans with vgpuadm's check (as C(vgpuadm apply --check)); reports C(changed) and the predicted devices without changing the host.
  diff_mode:
    support: full
    description: Shows the VM's devices before and after.
options:
  vm:
    description: Name of the libvirt domain.
    type: str
    required: true
    aliases: [name, domain]
  state:
    description:
      - V(present) makes the VM own O(count) devices of O(type), or the GPU O(passthrough).
      - V(absent) takes back the VM's devices of O(type), the GPU O(passthrough), or, with neither, every device
        vgpuadm gave the VM.
    type: str
    choices: [present, absent]
    default: present
  type:
    description:
      - vGPU type, by type id (V(nvidia-63)) or name (V(GRID P4-1Q), V(H200X-1-18C)).
      - Mutually exclusive with O(passthrough).
    type: str
  count:
    description:
      - How many devices of O(type) the VM owns in total. Extra devices of that type (highest slots first) are
        taken back when O(count) shrinks.
    type: int
    default: 1
  params:
    description:
      - NVIDIA C(vgpu_params) written to each new device, as a mapping of parameter names to values (see the
        examples) or as a string of space-separated V(key=value) pairs.
      - vgpu_params can only be set when a device is created. If the VM's existing devices carry other params the
        task fails; release them (O(state=absent)) and provision again.
    type: raw
  gpu:
    description: Place new vGPUs on this GPU only (PCI address; a PF includes its VFs).
    type: str
  policy:
    description: Placement policy for new vGPUs, V(pack) fills the busiest compatible GPU first, V(spread) the idlest.
    type: str
    choices: [pack, spread]
    default: pack
  numa:
    description: Place new vGPUs on GPUs of this NUMA node only.
    type: int
  display:
    description: Give new mdev vGPUs a display (C(display='on') on the hostdev).
    type: bool
    default: false
  passthrough:
    description:
      - PCI address of a GPU to pass through whole (its IOMMU group; companion functions such as HD audio go along).
      - Mutually exclusive with O(type).
    type: str
  force:
    description: Pass a GPU through even when vgpuadm calls it unsafe (boot VGA, host devices in its IOMMU group).
    type: bool
    default: false
  virtio_gl:
    description:
      - A paravirtual virtio-gpu with 3D (virgl) on a host render node, besides the O(type) or O(passthrough)
        devices or alone (vgpuadm's C(virtio-gl), C(virtio_gl) in a plan file). It edits the VM's C(<video>) and
        adds an egl-headless C(<graphics>); taking it back restores the video model the VM had.
      - With O(state=present), V(true) gives the VM one and V(false) takes it back; omitted, the VM's virtio-gpu
        is left as it is. With O(state=absent), V(true) takes back only the virtio-gpu.
    type: bool
  on_demand:
    description:
      - Record the request and the hostdev only; the devices are made when the VM starts and freed when it stops,
        by libvirt's qemu hook (C(vgpuadm hook install)). A stopped VM then holds no vGPU.
      - A warning says when the on-demand requests of the host's VMs could not all run at once.
    type: bool
    default: false
  gpus:
    description:
      - NVIDIA host policies per GPU, applied before the VM's devices, the keys of a plan file's C(gpus:) section
        (PCI address of the PF to a mapping of V(heterogeneous) (bool), V(scheduler) (V(best-effort),
        V(equal-share), V(fixed-share)), V(timeslice_ms) (1-30) and V(mig) (a mapping with C(enabled), a bool).
      - Kept across reboots by C(vgpuadm restore) (heterogeneous mode, placement IDs) and a modprobe file (the
        scheduler).
    type: dict
  root:
    description: Host root vgpuadm reads and changes; V(/) on a real host, a simulated host's directory otherwise.
    type: path
    default: /
  connect:
    description:
      - libvirt URI. Default as vgpuadm chooses it, C(LIBVIRT_DEFAULT_URI), else V(qemu:///system), or libvirt's
        embedded driver on a simulated root.
    type: str
notes:
  - Failures carry vgpuadm's one-line message in C(msg) and its advice in C(hint); nothing is left half-done.
"""

EXAMPLES = r"""
- name: web01 gets two GRID P4-1Q vGPUs without the frame rate limiter
  vgpuadm.vgpu.vgpu_allocation:
    vm: web01
    type: nvidia-63
    count: 2
    params:
      frame_rate_limiter: 0

- name: infer01 gets one H200X-35C (a vendor-VFIO VF), spread across GPUs
  vgpuadm.vgpu.vgpu_allocation:
    vm: infer01
    type: H200X-35C
    policy: spread

- name: render01 gets the whole GPU at 0000:65:00.0 (and its HD audio function)
  vgpuadm.vgpu.vgpu_allocation:
    vm: render01
    passthrough: "0000:65:00.0"

- name: Take every vgpuadm device back from web01
  vgpuadm.vgpu.vgpu_allocation:
    vm: web01
    state: absent

- name: Work on a simulated host through the system libvirtd
  vgpuadm.vgpu.vgpu_allocation:
    vm: web02
    type: GRID P4-1Q
    root: /var/tmp/vgpuadm-lab/gpu-p4
    connect: qemu:///system
"""

RETURN = r"""
vm:
  description: The domain.
  returned: always
  type: str
  sample: web01
devices:
  description: What the VM owns afterwards (predicted in check mode), from its vgpuadm metadata.
  returned: success
  type: list
  elements: dict
  sample:
    - slot: 0
      mode: mdev
      type_id: nvidia-63
      parent: "0000:01:00.0"
      uuid: 0b5e2bd2-3c43-5d1c-9c54-1e0b8f0f7d21
      address: null
      params: frame_rate_limiter=0
      options: {display: "off"}
added:
  description: Devices given to the VM by this task (would be, in check mode).
  returned: success
  type: list
  elements: dict
removed:
  description: Devices taken back from the VM by this task (would be, in check mode).
  returned: success
  type: list
  elements: dict
plan:
  description: The steps vgpuadm ran (would run, in check mode), in order.
  returned: success
  type: list
  elements: str
  sample:
    - create mdev 0b5e2bd2-3c43-5d1c-9c54-1e0b8f0f7d21 of type nvidia-63 on 0000:01:00.0
    - attach mdev 0b5e2bd2-3c43-5d1c-9c54-1e0b8f0f7d21 (nvidia-63) to domain web01, and record 1 vgpuadm device(s) in its metadata
hint:
  description: On failure, vgpuadm's advice on what to do.
  returned: failure
  type: str
  sample: free a vGPU of this type or choose another type
error:
  description: On failure, the vgpuadm error class (CapacityError, NotFoundError, ConflictError…).
  returned: failure
  type: str
  sample: CapacityError
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vgpuadm.vgpu.plugins.module_utils.vgpuadm_common import (
    COMMON_ARGS,
    VgpuadmError,
    fail_from,
    require_vgpuadm,
)

SOURCE = "vgpu_allocation"  # the plan's name in vgpuadm's messages
VIRTIO_GL = "virtio-gl"  # the mode (and type id) of a virtio-gpu record


class Task:
    """One task: the VM's desired state as a DesiredPlan, committed once with apply_desired."""

    def __init__(self, module):
        from vgpuadm import api

        self.api = api
        self.module = module
        self.p = module.params
        self.vm = self.p["vm"]

    def run(self):
        from vgpuadm.ops.guest import allocation_json

        before = self.api.domain_allocations(self.p["root"], self.vm, connect=self.p["connect"])
        plan_doc = self.desired(before)
        if plan_doc is None:  # absent, and the VM owns nothing it names
            after, steps, removed, changed = before, [], [], False
        else:
            result = self.api.apply_desired(
                self.p["root"], plan_doc, connect=self.p["connect"], check=self.module.check_mode
            )
            changed = not result.plan.empty or bool(result.diff.missing)  # missing devices come back too
            steps = list(result.applied)
            for warning in result.warnings:
                self.module.warn(warning)
            removed = sorted(result.diff.removes, key=lambda a: -a.slot)
            if changed and not self.module.check_mode:
                after = self.api.domain_allocations(self.p["root"], self.vm, connect=self.p["connect"])
            else:
                after = planned_devices(result.plan, self.vm, before)
        had = {device_key(a) for a in before}
        before_doc = [allocation_json(a) for a in before]
        after_doc = [allocation_json(a) for a in after]
        out = dict(
            changed=changed,
            vm=self.vm,
            devices=after_doc,
            added=[allocation_json(a) for a in after if device_key(a) not in had],
            removed=[allocation_json(a) for a in removed],
            plan=steps,
        )
        if self.module._diff:
            header = "%s (vgpuadm metadata)" % self.vm
            out["diff"] = dict(
                before=dict(vm=self.vm, devices=before_doc),
                after=dict(vm=self.vm, devices=after_doc),
                before_header=header,
                after_header=header,
            )
        return out

    # -- the desired state -------------------------------------------------------------------------------------

    def plan(self, body):
        from vgpuadm.io.planfile import plan_from_data

        doc = {"vms": {self.vm: body}}
        if self.p.get("gpus"):
            doc["gpus"] = self.p["gpus"]
        return plan_from_data(doc, SOURCE)

    def type_id(self, plan_doc, before):
        """The type id the plan's type names on this host (or among the ids the VM already owns)."""
        spec = plan_doc.vms[self.vm]
        return self.api.declarative.resolve_desired_types(self.p["root"], plan_doc, before)[spec.type]

    def desired(self, before):
        if self.p["state"] == "present":
            if self.p["passthrough"]:
                return self.present_passthrough(before)
            if self.p["type"]:
                return self.present_type(before)
            return self.present_virtio(before)
        return self.absent(before)

    def virtio(self, before):
        """Whether the VM is to have a virtio-gpu: as the task says, else as it has now."""
        if self.p["virtio_gl"] is not None:
            return self.p["virtio_gl"]
        return any(a.mode == VIRTIO_GL for a in before)

    def present_virtio(self, before):
        """virtio_gl alone: the VM keeps its other devices and gets (or loses) the virtio-gpu."""
        rest = [a for a in before if a.mode != VIRTIO_GL]
        if self.virtio(before) == (len(rest) != len(before)):
            return None
        return self.keep(rest, virtio=self.virtio(before))

    def present_type(self, before):
        from vgpuadm.plan.desired import format_params, params_equal

        p = self.p
        if p["count"] < 1:
            self.module.fail_json(msg="count must be at least 1, not %d" % p["count"],
                                  hint="use state=absent to take every device of the type back")
        body = dict(type=p["type"], count=p["count"], policy=p["policy"], display=dict(enabled=p["display"]))
        if self.virtio(before):
            body["virtio_gl"] = True
        if p["on_demand"]:
            body["on_demand"] = True
        if p["gpu"]:
            body["gpu"] = pci(p["gpu"])
        if p["numa"] is not None:
            body["numa"] = p["numa"]
        if p["params"] is not None:
            body["params"] = p["params"]
        plan_doc = self.plan(body)
        type_id = self.type_id(plan_doc, before)
        mine = [a for a in before if a.mode != "pci" and a.type_id == type_id and a.on_demand == p["on_demand"]]
        if p["params"] is None:
            if mine:  # params not managed: new devices get what the VM's devices of the type have
                body["params"] = mine[0].params or ""
                plan_doc = self.plan(body)
        else:
            wanted = format_params(p["params"])
            differ = [a for a in mine if not params_equal(a.params, wanted)]
            if differ:
                self.module.fail_json(
                    msg="VM %s has %s of type %s with vgpu_params %r, not %r"
                    % (self.vm, devices(differ), type_id, differ[0].params or "", wanted),
                    hint="vgpu_params are set when a device is created: release the VM's %s devices "
                    "(state: absent) and provision again" % type_id,
                    error="ConflictError",
                )
        return plan_doc

    def present_passthrough(self, before):
        import dataclasses

        gpus = passed_through(before) | {pci(self.p["passthrough"])}
        body = dict(passthrough=sorted(gpus), **({"on_demand": True} if self.p["on_demand"] else {}))
        if self.virtio(before):
            body["virtio_gl"] = True
        plan_doc = self.plan(body)
        spec = dataclasses.replace(plan_doc.vms[self.vm], force=self.p["force"])
        return dataclasses.replace(plan_doc, vms={self.vm: spec})

    def absent(self, before):
        p = self.p
        gone = [a for a in before if a.mode == VIRTIO_GL and p["virtio_gl"]]
        if p["passthrough"]:
            gpu = pci(p["passthrough"])
            gone += [a for a in before if a.mode == "pci" and pci(a.parent or a.address) == gpu]
        elif p["type"]:
            type_id = self.type_id(self.plan(dict(type=p["type"])), before)
            gone += [a for a in before if a.mode not in ("pci", VIRTIO_GL) and a.type_id == type_id]
        elif not p["virtio_gl"]:
            gone = list(before)
        if not gone:
            return None
        rest = [a for a in before if a not in gone]
        return self.keep([a for a in rest if a.mode != VIRTIO_GL], virtio=any(a.mode == VIRTIO_GL for a in rest))

    def keep(self, rest, virtio=False):
        """The plan in which the VM owns exactly `rest` (what it keeps after an absent task), and a virtio-gpu if
        `virtio`."""
        from vgpuadm.errors import ConflictError
        from vgpuadm.plan.desired import DesiredPlan, VmSpec

        extra = {"virtio_gl": True} if virtio else {}
        if not rest:  # no type, no passthrough, count 0: the VM owns nothing (but a virtio-gpu if `virtio`)
            if virtio:
                return self.plan(extra)
            return DesiredPlan(source=SOURCE, vms={self.vm: VmSpec(name=self.vm, count=0)})
        on_demand = {a.on_demand for a in rest}
        kept = {"on_demand": True} if on_demand == {True} else {}
        kept.update(extra)
        if all(a.mode == "pci" for a in rest) and len(on_demand) == 1:
            return self.plan(dict(passthrough=sorted(passed_through(rest)), **kept))
        kinds = {(a.mode == "pci", a.type_id, a.params or "", a.on_demand) for a in rest}
        if len(kinds) > 1:
            raise ConflictError(
                "VM %s would keep devices of several kinds (types, params or passthrough), which one task "
                "cannot declare" % self.vm,
                "take the devices back one by one with `vgpuadm destroy --vm %s --uuid UUID`" % self.vm,
            )
        ((_, type_id, params, _on_demand),) = kinds
        return self.plan(dict(type=type_id, count=len(rest), params=params, **kept))


def planned_devices(plan, vm, before):
    """What `vm` owns once `plan` has run: the devices its last definition (or metadata) step records (the VM's
    own if it has none)."""
    from vgpuadm.steps import DefineDomain, SetMetadata
    from vgpuadm.virt.xml import parse_allocations

    owned = before
    for step in plan.steps:
        if isinstance(step, (DefineDomain, SetMetadata)) and step.domain == vm:
            owned = parse_allocations(step.element, domain=vm) if step.element else []
    return owned


def passed_through(allocations):
    """The GPUs (PCI addresses) among `allocations` that are passed through whole."""
    return {pci(a.parent or a.address) for a in allocations if a.mode == "pci"}


def pci(address):
    """The canonical PCI address (0000:65:00.0 from 65:00.0 or 0000:65:00.0)."""
    from vgpuadm.virt.xml import PciAddress

    return str(PciAddress.parse(address))


def device_key(a):
    return (a.mode, a.uuid or a.address)


def devices(allocations):
    return "1 device" if len(allocations) == 1 else "%d devices" % len(allocations)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vm=dict(type="str", required=True, aliases=["name", "domain"]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            type=dict(type="str"),
            count=dict(type="int", default=1),
            params=dict(type="raw"),
            gpu=dict(type="str"),
            policy=dict(type="str", default="pack", choices=["pack", "spread"]),
            numa=dict(type="int"),
            display=dict(type="bool", default=False),
            passthrough=dict(type="str", no_log=False),  # a PCI address, not a secret
            force=dict(type="bool", default=False),
            on_demand=dict(type="bool", default=False),
            virtio_gl=dict(type="bool"),
            gpus=dict(type="dict"),
            **COMMON_ARGS
        ),
        mutually_exclusive=[("type", "passthrough")],
        required_if=[("state", "present", ("type", "passthrough", "virtio_gl"), True)],
        supports_check_mode=True,
    )
    require_vgpuadm(module)
    try:
        result = Task(module).run()
    except VgpuadmError as exc:
        fail_from(module, exc, vm=module.params["vm"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
