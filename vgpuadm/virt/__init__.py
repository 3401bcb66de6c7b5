"""libvirt: hostdev/metadata XML (xml.py) and the one class that talks to libvirt (conn.py)."""
