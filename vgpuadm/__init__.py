"""vgpuadm: give GPUs (mdev vGPUs, NVIDIA vendor-VFIO VFs, whole-GPU passthrough) to libvirt/KVM guests."""

__version__ = "0.1.0"
