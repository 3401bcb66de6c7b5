"""SimKernel: applies writes under a simulated root with the kernel's effects and errno. (Placeholder: plain
writes until the lifecycle work lands.)"""

from __future__ import annotations

import os


class SimKernel:
    def __init__(self, root: str) -> None:
        self.root = root

    def write(self, host_path: str, data: str) -> None:
        with open(os.path.join(self.root, host_path.lstrip("/")), "w") as f:
            f.write(data)
