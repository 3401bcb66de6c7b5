#!/usr/bin/python
# Copyright: vgpuadm developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ansible module: one host's vGPU inventory document (vgpuadm-inventory/1), read-only, for fleet reports.

Calls vgpuadm.api.inventory in the module's interpreter (the same function `vgpuadm inventory --format json`
prints), for the reasons given in vgpu_allocation.py: data instead of scraped output, vgpuadm's errors as objects.
"""


DOCUMENTATION = r"""
---
module: vgpu_inventory
short_description: Read a host's vGPU inventory with vgpuadm
version_added: 0.1.0
description:
  - Returns the host's inventory document (schema C(vgpuadm-inventory/1)) as C(vgpuadm inventory --format json)
    prints it. GPUs and VFs, per type the used, free and maximum instances, every device with its owning domain
    (or marked unowned, a leak), and how many more of each type fit and where.
  - Ownership comes from the libvirt domains' vgpuadm metadata.
  - Optionally writes the document to O(dest) on the managed host. Feed the documents to
    C(vgpuadm inventory merge) for a fleet report (see the collection's fleet-report playbook).
author:
  - vgpuadm developers (@vgpuadm)
requirements:
  - python >= 3.11
  - vgpuadm (importable by the module's Python)
attributes:
  check_mode:
    support: full
    description: Reads only. With O(dest), check mode reports whether the file would change.
  diff_mode:
    support: none
    description: Reads only; the document is the result.
options:
  host:
    description: The host name the document carries (the fleet merge refuses duplicates). Default as vgpuadm
      chooses it (the root's C(/etc/hostname), else the machine's host name).
    type: str
  domains:
    description:
      - Only these libvirt domains count as this host's guests. Default every domain of the connection. For labs
        whose hosts share one libvirtd.
    type: list
    elements: str
  use_libvirt:
    description: Read ownership from libvirt. V(false) reports ownership as unknown (never as leaks).
    type: bool
    default: true
  dest:
    description: Also write the document (JSON) to this file on the managed host.
    type: path
  root:
    description: Host root vgpuadm reads; V(/) on a real host, a simulated host's directory otherwise.
    type: path
    default: /
  connect:
    description: libvirt URI (default as vgpuadm chooses it).
    type: str
"""

EXAMPLES = r"""
- name: Read this host's vGPU inventory
  vgpuadm.vgpu.vgpu_inventory:
    host: "{{ inventory_hostname }}"
  register: vgpu

- name: Show how many more nvidia-63 fit
  ansible.builtin.debug:
    msg: "{{ vgpu.inventory.types | selectattr('type_id', 'eq', 'nvidia-63') | list }}"

- name: Keep a copy on the host
  vgpuadm.vgpu.vgpu_inventory:
    dest: /var/lib/vgpuadm/inventory.json
"""

RETURN = r"""
inventory:
  description: The inventory document (schema vgpuadm-inventory/1, see vgpuadm/schemas/inventory-v1.schema.json).
  returned: success
  type: dict
  sample: {"schema": "vgpuadm-inventory/1", "host": "gpu-p4", "summary": {"gpus": 2, "devices": 3}}
hint:
  description: On failure, vgpuadm's advice on what to do.
  returned: failure
  type: str
error:
  description: On failure, the vgpuadm error class.
  returned: failure
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vgpuadm.vgpu.plugins.module_utils.vgpuadm_common import (
    COMMON_ARGS,
    VgpuadmError,
    fail_from,
    require_vgpuadm,
)


def _same_document(path, doc):
    """True when `path` holds `doc` apart from its generation time (so a re-run is not a change)."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(old, dict) and _timeless(old) == _timeless(doc)


def _timeless(doc):
    return {k: v for k, v in doc.items() if k != "generated_at"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str"),
            domains=dict(type="list", elements="str"),
            use_libvirt=dict(type="bool", default=True),
            dest=dict(type="path"),
            **COMMON_ARGS
        ),
        supports_check_mode=True,
    )
    require_vgpuadm(module)
    p = module.params
    try:
        from vgpuadm import api

        doc = api.inventory(
            p["root"], connect=p["connect"], use_libvirt=p["use_libvirt"], host=p["host"], domains=p["domains"]
        )
    except VgpuadmError as exc:
        fail_from(module, exc)
    changed = False
    if p["dest"] and not _same_document(p["dest"], doc):
        changed = True
        if not module.check_mode:
            tmp = "%s.tmp%d" % (p["dest"], os.getpid())
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
            module.atomic_move(tmp, p["dest"])
    module.exit_json(changed=changed, inventory=doc)


if __name__ == "__main__":
    main()
