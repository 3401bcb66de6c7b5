"""Data-only Steps and the Plan they form; the executor is the only thing that carries them out."""
