"""The driver package's tools on a simulated host (NVIDIA's sriov-manage, nvidia-smi): each is a small shell
wrapper under the root running `python -m vgpuadm.sim.<module> ROOT ARGS…`, as `vgpuadm sim build` installs them.
A wrapper finds its host root from its own location, so a copied root keeps working."""

from __future__ import annotations

import os
import shlex
import sys

from vgpuadm.host.root import write_beneath


def install_tool(root: str, host_path: str, module: str, comment: str) -> str:
    """Write the wrapper for `module` at <root>/<host_path> (mode 0755; no link followed at any component, OSError
    else); returns its real path."""
    up = "/".join([".."] * (host_path.strip("/").count("/")))
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = (
        "#!/bin/sh\n"
        f"# {comment}\n"
        f'root=$(cd "$(dirname "$0")/{up}" && pwd)\n'
        f"PYTHONPATH={shlex.quote(package_parent)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        f'exec {shlex.quote(sys.executable)} -m {module} "$root" "$@"\n'
    )
    # by descriptor beneath the root: an imported snapshot's links never carry the tool outside it
    write_beneath(root, host_path, text.encode(), mode=0o755, sync=False)
    return os.path.join(root, host_path.lstrip("/"))
