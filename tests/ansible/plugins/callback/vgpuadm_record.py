"""Test-only Ansible callback: records every task result per host as JSON, so the Ansible lane asserts on
`changed`, `failed`, `msg`, `diff` … instead of scraping the human output (ansible-core ships no json callback).

Enabled by tests/ansible/conftest.py with ANSIBLE_CALLBACK_PLUGINS + ANSIBLE_CALLBACKS_ENABLED; writes to
$VGPUADM_RECORD_FILE when the playbook ends."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: vgpuadm_record
type: aggregate
short_description: record task results as JSON for the vgpuadm Ansible tests
description: Writes every task result (per host) and the final stats to the file named by VGPUADM_RECORD_FILE.
requirements: [VGPUADM_RECORD_FILE in the environment]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vgpuadm_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.results: list[dict[str, Any]] = []

    def _record(self, status: str, result: Any) -> None:
        self.results.append(
            {
                "host": result._host.get_name(),
                "task": result._task.get_name(),
                "status": status,
                "result": _plain(result._result),
            }
        )

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record("changed" if result._result.get("changed") else "ok", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record("failed", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record("skipped", result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record("unreachable", result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        hosts = sorted(stats.processed)
        summary = {h: stats.summarize(h) for h in hosts}
        path = os.environ.get("VGPUADM_RECORD_FILE")
        if path:
            with open(path, "w") as f:
                json.dump({"results": self.results, "stats": summary}, f, indent=1, default=str)


def _plain(value: Any) -> Any:
    """Ansible wraps results in its own str/dict subclasses (and may mark values unsafe): make plain JSON."""
    return json.loads(json.dumps(value, default=str))
