"""Simulated hosts: hardware-shaped sysfs trees (profiles.py) and a kernel that reacts to writes (kernel.py)."""
