"""Names for the CUPTI enum values that CUPTI records carry (copy kinds,
memory kinds, synchronization types), as they appear in frames and tags."""
from typing import Optional

_MEMCPY = {
    0: "unknown", 1: "host_to_device", 2: "device_to_host", 3: "host_to_array", 4: "array_to_host",
    5: "array_to_array", 6: "array_to_device", 7: "device_to_array", 8: "device_to_device",
    9: "host_to_host", 10: "peer_to_peer",
}
_MEMORY = {
    0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
    6: "device_static", 7: "managed_static",
}
# 32: not CUPTI's; the CUDA driver interposer's (--cuda-trace light) host wait in a synchronous copy
_SYNC = {0: "unknown", 1: "event", 2: "stream_wait_event", 3: "stream", 4: "context", 32: "synchronous_copy"}
SYNC_COPY = 32

# copy kinds whose source / destination is host memory
_HOST_SRC = {1, 3, 9}
_HOST_DST = {2, 4, 9}


def memcpy_kind(v: int) -> str:
    return _MEMCPY.get(v, "kind_%d" % v)


def memory_kind(v: int) -> str:
    return _MEMORY.get(v, "memory_%d" % v)


def sync_kind(v: int) -> str:
    return _SYNC.get(v, "sync_%d" % v)


def host_memory(copy_kind: int, src_kind: int, dst_kind: int) -> Optional[str]:
    """pinned / pageable / managed for the host side of a copy, or None
    when no host memory is involved or CUPTI did not say."""
    kinds = []
    if copy_kind in _HOST_SRC:
        kinds.append(src_kind)
    if copy_kind in _HOST_DST:
        kinds.append(dst_kind)
    names = [_MEMORY[k] for k in kinds if k in (1, 2, 5)]
    if not names:
        return None
    return names[0] if len(set(names)) == 1 else "+".join(names)
