"""Layout C (NVIDIA vendor-specific VFIO) types as VgpuType records: a VF's creatable list plus NVIDIA's tables."""

from __future__ import annotations

from vgpuadm.catalog.boards import equal_size_max
from vgpuadm.model import Layout, VgpuType, describe_nvidia_name, nvidia_type_id

TYPE_CHECKING = False  # `collections` stays off the fast path of the read commands (bench/bench_cold_start.py)
if TYPE_CHECKING:
    from collections.abc import Iterable


def vendor_vf_types(address: str, creatable: Iterable[tuple[int, str]]) -> tuple[VgpuType, ...]:
    """Layout C: a listed creatable type can be made once on VF `address` while it runs nothing. The driver publishes no
    per-GPU maximum, so it comes from NVIDIA's tables (vgpuadm/catalog/boards.py); None for boards not in them."""
    out = []
    for type_num, name in creatable:
        info = describe_nvidia_name(name)
        out.append(
            VgpuType(
                parent=address,
                layout=Layout.VENDOR_VFIO,
                type_id=nvidia_type_id(type_num),
                name=name,
                profile=info.profile,
                available_instances=1,
                max_instances=equal_size_max(info),
                framebuffer_mib=info.framebuffer_mib,
                device_api="vfio-pci",
                description="",
                attributes=info.attributes(),
            )
        )
    return tuple(out)
