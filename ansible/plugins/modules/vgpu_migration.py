#!/usr/bin/python
# Copyright: vgpuadm developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ansible module: move a VM and its vGPUs to another host (live while it runs, else cold), prepare such a move, or
undo one that stopped half-way — `vgpuadm migrate run|prepare|abort` through vgpuadm.api in the module's interpreter, for the
reasons given in vgpu_allocation.py (data instead of scraped output, vgpuadm's errors as objects)."""


DOCUMENTATION = r"""
---
module: vgpu_migration
short_description: Move a VM and its vGPUs to another host with vgpuadm (live or cold)
version_added: 0.2.0
description:
  - Runs on the source host. V(moved) moves the VM (C(vgpuadm migrate run)) - the target's own vgpuadm makes
    devices of the same type through its planner (the mdevs keep their UUIDs where the target has them all free)
    and defines the domain there; a shut-off VM (or any with O(offline)) is then undefined here (cold), a running
    one is moved live by libvirt (post-copy off, its XML rewritten for the target's devices) when every device
    can move live; its devices here are freed. A failure before the domain has left the source leaves both hosts
    as they were (a running VM runs on).
  - V(prepared) does the first half only (C(vgpuadm migrate prepare)) - the devices are made on the target and
    recorded incoming there, outgoing here. V(aborted) undoes a move that stopped half-way on both hosts
    (C(vgpuadm migrate abort)).
  - The target is reached as its libvirt URI names it (O(to), over ssh; vgpuadm must be on its PATH), or is a
    simulated host on the same machine (O(target_root)).
  - Idempotent - a VM no longer on this host is V(moved) already (nothing to do); a move run again goes on from
    where it stands. Disks are not copied.
author:
  - vgpuadm developers (@vgpuadm)
requirements:
  - python >= 3.11
  - vgpuadm (importable by the module's Python), on both hosts
attributes:
  check_mode:
    support: full
    description: Prints every step on both hosts (C(--dry-run)); nothing changes.
  diff_mode:
    support: none
    description: The steps are the result.
options:
  vm:
    description: The libvirt domain to move (running or shut off).
    type: str
    required: true
  to:
    description: The target's libvirt URI, C(qemu+ssh://[user@]host/system). One of O(to) and O(target_root).
    type: str
  target_root:
    description: A simulated target host on this machine (a root C(vgpuadm sim build) made).
    type: path
  offline:
    description: Move the VM cold only (a running VM is then refused).
    type: bool
    default: false
  migrate_uri:
    description: A live move's data address on the target, C(tcp://HOST[:PORT]) (default the one its libvirt names).
    type: str
  state:
    description: V(moved) - the VM is on the target; V(prepared) - its devices are made there, the move not run;
      V(aborted) - a half-done move is undone.
    type: str
    choices: [moved, prepared, aborted]
    default: moved
  root:
    description: Host root vgpuadm reads; V(/) on a real host, a simulated host's directory otherwise.
    type: path
    default: /
  connect:
    description: libvirt URI of this host (default as vgpuadm chooses it).
    type: str
"""

EXAMPLES = r"""
- name: Move web01 to gpu2 (shut off)
  vgpuadm.vgpu.vgpu_migration:
    vm: web01
    to: qemu+ssh://root@gpu2/system

- name: Undo a move that stopped half-way
  vgpuadm.vgpu.vgpu_migration:
    vm: web01
    to: qemu+ssh://root@gpu2/system
    state: aborted
"""

RETURN = r"""
steps:
  description: What was done (or, in check mode, would be done), each step prefixed by the host it runs on.
  returned: always
  type: list
  elements: str
  sample: ["this host: step 1/1 record domain web01's devices as outgoing"]
state:
  description: Where the move stands afterwards - moved, outgoing (prepared), none (aborted).
  returned: success
  type: str
devices:
  description: What the domain records on the target afterwards (slot, mode, type_id, parent, uuid, address).
  returned: success
  type: list
  elements: dict
hint:
  description: On failure, vgpuadm's advice on what to do.
  returned: failure
  type: str
error:
  description: On failure, the vgpuadm error class.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vgpuadm.vgpu.plugins.module_utils.vgpuadm_common import (
    COMMON_ARGS,
    VgpuadmError,
    fail_from,
    require_vgpuadm,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vm=dict(type="str", required=True),
            to=dict(type="str"),
            target_root=dict(type="path"),
            offline=dict(type="bool", default=False),
            migrate_uri=dict(type="str"),
            state=dict(type="str", choices=["moved", "prepared", "aborted"], default="moved"),
            **COMMON_ARGS
        ),
        required_one_of=[("to", "target_root")],
        mutually_exclusive=[("to", "target_root")],
        supports_check_mode=True,
    )
    require_vgpuadm(module)
    p = module.params
    target = dict(to=p["to"], target_root=p["target_root"], connect=p["connect"], dry_run=module.check_mode)
    try:
        from vgpuadm import api

        if p["state"] == "aborted":
            result = api.migrate_abort(p["root"], p["vm"], **target)
        else:
            result = api.migrate_move(p["root"], p["vm"], finish=p["state"] == "moved", offline=p["offline"],
                                      migrate_uri=p["migrate_uri"], **target)
    except VgpuadmError as exc:
        if p["state"] == "moved" and type(exc).__name__ == "NotFoundError" and _gone(api, p):
            module.exit_json(changed=False, steps=[], state="moved", devices=[], msg="domain %s is not here" % p["vm"])
        fail_from(module, exc)
    doc = result.to_json()
    module.exit_json(changed=bool(doc["steps"]), steps=doc["steps"], state=doc["state"], devices=doc["devices"])


def _gone(api, p):
    """The domain is not on this host (moved already): libvirt here has no such domain."""
    try:
        api.show_vm(p["root"], p["vm"], connect=p["connect"])
    except VgpuadmError:
        return True
    return False


if __name__ == "__main__":
    main()
