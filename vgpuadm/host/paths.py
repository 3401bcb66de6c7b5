"""The host paths (as shown to users) of everything vgpuadm keeps or reads besides sysfs. Constants only, no I/O:
the pure core names them in messages and steps; host/root.py joins them to a root."""

DEFAULT_ROOT = "/"
LOCK = "/run/vgpuadm/lock"  # in a 0700 directory: no other user can open it (flock works on any descriptor)
STATE_DIR = "/var/lib/vgpuadm"
JOURNAL = f"{STATE_DIR}/journal.json"
DRIVERS = f"{STATE_DIR}/drivers.json"
EMBED_LIBVIRT = f"{STATE_DIR}/libvirt"  # libvirt's embedded driver root on a simulated host
MACHINE_ID = "/etc/machine-id"
HOSTNAME = "/etc/hostname"
PROC_CMDLINE = "/proc/cmdline"
MDEVCTL_DIR = "/etc/mdevctl.d"
SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"  # NVIDIA's VF enable script (reference §3.1)
NVIDIA_SMI = "/usr/bin/nvidia-smi"
PCI_IDS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")  # the PCI ID database (Debian, then Fedora)
# Where libvirt keeps its QEMU domains' XML: (persistent definitions, running domains' status files), for the system
# daemon and for the embedded driver of a simulated root. The hook reads them: it must not call libvirt.
LIBVIRT_DOMAIN_DIRS = (
    ("/etc/libvirt/qemu", "/run/libvirt/qemu"),
    (f"{EMBED_LIBVIRT}/etc/qemu", f"{EMBED_LIBVIRT}/run/qemu"),
)
UNIT_DIR = "/etc/systemd/system"  # vgpuadm's systemd unit (io/unitfile.py)
# The files that keep NVIDIA host policies across a reboot and the on-demand MIG record (io/policyfile.py), by name.
POLICY_FILES = {
    "modprobe": "/etc/modprobe.d/vgpuadm-nvidia.conf",
    "state": f"{STATE_DIR}/gpus.json",
    "on-demand-mig": f"{STATE_DIR}/on-demand-mig.json",
}
LIBVIRT_HOOKS = "/etc/libvirt/hooks"  # where libvirtd looks for its qemu hook (the file qemu, the directory qemu.d)
UDEV_RULES_DIR = "/etc/udev/rules.d"  # vgpuadm's udev rule (io/udevfile.py)
# The udev runs waiting or running, one empty file per GPU or mdev parent (ops/udevrun.py): the debounce.
UDEV_PENDING = "/run/vgpuadm/udev"
