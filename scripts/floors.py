"""Print a pip constraints file pinning every runtime dependency of pyproject.toml at its declared floor.

`name>=X` becomes `name==X`; scripts/test-floors.sh installs the package with it (`pip install -c floors.txt .`) to
prove that the floors pyproject declares are true."""

import re
import sys
import tomllib

FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*$")


def floors(pyproject: str) -> list[str]:
    with open(pyproject, "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    out = []
    for dep in deps:
        m = FLOOR.match(dep)
        if not m:
            sys.exit(f"floors.py: {dep!r} has no plain `>=` floor; give every runtime dependency one")
        out.append(f"{m.group(1)}=={m.group(2)}")
    return out


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")))
