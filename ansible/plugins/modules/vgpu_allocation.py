#!/usr/bin/python
# Copyright: vgpuadm developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ansible module: the GPUs one libvirt VM owns (vGPUs of a type, or a whole passed-through GPU), as desired state.

Why the Python API (vgpuadm.api) and not the JSON CLI: the module runs under the Python vgpuadm is installed in
(ansible_python_interpreter), so it can call the same functions the CLI calls. That gives it the plan itself (an
empty plan is exactly "not changed"; check mode is the same call with dry_run=True, which plans but executes
nothing), the allocations before and after as data for --diff (no output scraping, no second process), and
vgpuadm's errors as objects whose one-line message and hint become the task's msg and hint.
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
  - Each change is one vgpuadm plan (create the device, attach the hostdev, record it in the domain's vgpuadm
    metadata) run under vgpuadm's host lock; a failed step rolls back what the plan did.
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
    description: Plans with dry_run; reports C(changed) and the predicted devices without changing the host.
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

- name: infer01 gets one H200X-1-18C (a vendor-VFIO VF), spread across GPUs
  vgpuadm.vgpu.vgpu_allocation:
    vm: infer01
    type: H200X-1-18C
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
    - attach mdev 0b5e2bd2-3c43-5d1c-9c54-1e0b8f0f7d21 (nvidia-63) to web01
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


def params_list(value):
    """The params option as vgpuadm's `key=value` list, in the order given."""
    if value is None:
        return None
    if isinstance(value, dict):
        return ["%s=%s" % (k, _text(v)) for k, v in value.items()]
    return [p for p in str(value).split() if p]


def _text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def same_params(recorded, wanted):
    return sorted((recorded or "").split()) == sorted(wanted)


class Allocator:
    def __init__(self, module):
        from vgpuadm import api

        self.api = api
        self.as_json = allocation_doc
        self.module = module
        p = module.params
        self.vm = p["vm"]
        self.root = p["root"]
        self.connect = p["connect"]
        self.check = module.check_mode
        self.steps = []
        self.added = []
        self.removed = []

    def owned(self):
        return self.api.domain_allocations(self.root, self.vm, connect=self.connect)

    def record(self, result):
        self.steps.extend(result.plan.describe())
        self.added.extend(result.added)
        self.removed.extend(result.removed)
        return not result.plan.empty

    def destroy(self, key=None):
        opts = dict(uuid=key) if key else dict(all_=True)
        return self.record(
            self.api.guest_destroy(self.root, self.vm, connect=self.connect, dry_run=self.check, **opts)
        )

    def type_id(self, wanted, owned):
        """The type id `wanted` names here; falls back to the ids the VM already owns (a type can vanish from the
        host's type list while every instance of it is in use)."""
        from vgpuadm.errors import NotFoundError
        from vgpuadm.catalog.naming import resolve_type

        try:
            return resolve_type(self.api.discover(self.root).types(), wanted)[0].type_id
        except NotFoundError:
            if any(a.type_id == wanted for a in owned):
                return wanted
            raise

    def present_type(self, before):
        p = self.module.params
        if p["count"] < 1:
            self.module.fail_json(msg="count must be at least 1, not %d" % p["count"],
                                  hint="use state=absent to take every device of the type back")
        wanted = params_list(p["params"])
        type_id = self.type_id(p["type"], before)
        mine = [a for a in before if a.type_id == type_id]
        if wanted is not None:
            differ = [a for a in mine if not same_params(a.params, wanted)]
            if differ:
                self.module.fail_json(
                    msg="VM %s has %s of type %s with vgpu_params %r, not %r"
                    % (self.vm, _n(differ), type_id, differ[0].params or "", " ".join(wanted)),
                    hint="vgpu_params are set when a device is created: release the VM's %s devices "
                    "(state: absent) and provision again" % type_id,
                    error="ConflictError",
                )
        changed = False
        extra = sorted(mine, key=lambda a: a.slot)[p["count"]:]
        for a in reversed(extra):
            changed |= self.destroy(a.uuid or a.address)
        if len(mine) < p["count"]:
            result = self.api.guest_create(
                self.root, self.vm, p["type"], p["count"], connect=self.connect, gpu=p["gpu"], policy=p["policy"],
                numa=p["numa"], display=p["display"], params=wanted or (), dry_run=self.check,
            )
            changed |= self.record(result)
        return changed

    def present_passthrough(self):
        p = self.module.params
        return self.record(
            self.api.guest_passthrough(
                self.root, p["passthrough"], self.vm, connect=self.connect, force=p["force"], dry_run=self.check
            )
        )

    def absent(self, before):
        p = self.module.params
        if p["passthrough"]:
            gpu = _pci(p["passthrough"])
            if any(a.mode == "pci" and _pci(a.parent or a.address) == gpu for a in before):
                return self.destroy(gpu)
            return False
        if p["type"]:
            type_id = self.type_id(p["type"], before)
            changed = False
            for a in sorted((a for a in before if a.type_id == type_id), key=lambda a: -a.slot):
                changed |= self.destroy(a.uuid or a.address)
            return changed
        return self.destroy() if before else False

    def run(self):
        p = self.module.params
        before = self.owned()
        if p["state"] == "present":
            changed = self.present_passthrough() if p["passthrough"] else self.present_type(before)
        else:
            changed = self.absent(before)
        if changed and not self.check:
            after = self.owned()
        else:
            gone = {(a.slot, a.uuid, a.address) for a in self.removed}
            after = sorted([a for a in before if (a.slot, a.uuid, a.address) not in gone] + self.added,
                           key=lambda a: a.slot)
        before_doc = [self.as_json(a) for a in before]
        after_doc = [self.as_json(a) for a in after]
        result = dict(
            changed=changed,
            vm=self.vm,
            devices=after_doc,
            added=[self.as_json(a) for a in self.added],
            removed=[self.as_json(a) for a in self.removed],
            plan=self.steps,
        )
        if self.module._diff:
            result["diff"] = dict(
                before=dict(vm=self.vm, devices=before_doc),
                after=dict(vm=self.vm, devices=after_doc),
                before_header="%s (vgpuadm metadata)" % self.vm,
                after_header="%s (vgpuadm metadata)" % self.vm,
            )
        return result


def allocation_doc(a):
    """One device a VM owns, as the module returns it (the fields of vgpuadm's metadata record)."""
    return dict(
        slot=a.slot,
        mode=a.mode,
        type_id=a.type_id,
        parent=a.parent,
        uuid=a.uuid,
        address=a.address,
        params=a.params,
        options=dict(sorted(a.extra.items())),
    )


def _n(devices):
    return "1 device" if len(devices) == 1 else "%d devices" % len(devices)


def _pci(address):
    """0000:65:00.0 from 65:00.0 or 0000:65:00.0 (as the metadata records addresses)."""
    text = (address or "").strip().lower()
    return text if text.count(":") == 2 else "0000:" + text


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
            **COMMON_ARGS
        ),
        mutually_exclusive=[("type", "passthrough")],
        required_if=[("state", "present", ("type", "passthrough"), True)],
        supports_check_mode=True,
    )
    require_vgpuadm(module)
    try:
        result = Allocator(module).run()
    except VgpuadmError as exc:
        fail_from(module, exc, vm=module.params["vm"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
