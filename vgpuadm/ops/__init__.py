"""Orchestration: each verb opens one Session (lock, snapshot, libvirt, one domain scan), plans, executes."""
