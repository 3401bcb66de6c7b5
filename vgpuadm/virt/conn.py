"""The one class that talks to libvirt (libvirt-python, imported lazily). Filled in by the libvirt work."""
