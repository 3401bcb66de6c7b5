"""Knowledge about hardware, no I/O: vGPU type names, NVIDIA board tables, and the sharing rules (capacity)."""
