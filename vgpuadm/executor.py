"""Runs a Plan: host-wide lock, atomic journal, undo stack; rolls back on the first failure."""
