"""JSON text of an inventory or fleet document: stable key order, two-space indent, trailing newline."""

from __future__ import annotations

import json
from typing import Any


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"
