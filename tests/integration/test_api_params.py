"""The API hooks' parameter decoding (csrc/cupti/api_params.h) from
hand-made parameter blocks, without libcupti, a driver or a GPU: the CUDA
headers' own parameter structs, filled by a test driver
(tests/support/cupti/api_params_shim.cpp) for a hooked callback id, decoded
by the library's free functions with the id's row of the hooked table and a
fake MemoryKinds; and the library's AddressKinds against a stand-in
cuPointerGetAttribute. Called in-process through ctypes.

Skips where no C++ compiler or CUPTI/CUDA headers are found (the driver is
built with the library's own build)."""
import ctypes

import pytest

from support.cbuild import cupti_shim

# Decoded
YES, NOTHING, UNSUPPORTED = 0, 1, 2
# CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind
HTOD, DTOH, DTOD, HTOH, PTOP = 1, 2, 8, 9, 10
PAGEABLE, PINNED, DEVICE, MANAGED = 1, 2, 3, 5
# cudaMemcpyKind; CUmemorytype
RT_HTOH, RT_HTOD, RT_DTOH, RT_DTOD, RT_DEFAULT = 0, 1, 2, 3, 4
MT_HOST, MT_DEVICE, MT_ARRAY, MT_UNIFIED = 1, 2, 3, 4
# CUDA_SUCCESS's memory types for the stand-in driver
CU_HOST, CU_DEVICE = 1, 2

RT, DR = 1, 0
HOST_A = 0x7F00_0000_0000  # host memory the tests pretend to own
DEV_A = 0x7E00_0000_0000  # "device" memory
STREAM = 0x5000


class Args(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in "dst src bytes width height depth stream exec graph".split()] + [
        (n, ctypes.c_int32) for n in "rt_kind src_type dst_type null_inner".split()]


class Out(ctypes.Structure):
    _fields_ = [("decoded", ctypes.c_int32), ("kind", ctypes.c_uint8), ("src", ctypes.c_uint8),
                ("dst", ctypes.c_uint8), ("pad", ctypes.c_uint8)] + [
        (n, ctypes.c_uint64) for n in "bytes stream base size exec graph".split()]


@pytest.fixture(scope="module")
def lib():
    u32, u64, i = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
    sigs = {
        "gs_params_reset": ([], None),
        "gs_params_range": ([u64, u64, i], None),
        "gs_params_device": ([u64, u64], None),
        "gs_params_unified_calls": ([], u64),
        "gs_params_row": ([i, ctypes.c_uint, ctypes.POINTER(u32)], i),
        "gs_params_decode": ([i, ctypes.c_uint, ctypes.POINTER(Args), ctypes.POINTER(Out)], i),
        "gs_params_wrong_op": ([i, ctypes.c_uint, ctypes.POINTER(Args)], i),
        "gs_addr_reset": ([u64, u64, i], None),
        "gs_addr_add": ([u64, u64, i], None),
        "gs_addr_unified": ([u64, ctypes.POINTER(i)], i),
        "gs_addr_range_kind": ([u64], i),
        "gs_addr_driver_calls": ([], u64),
    }
    return cupti_shim(sigs)


@pytest.fixture
def dec(lib):
    """decode(domain, cbid, **fields) -> Out, with a fresh fake memory map:
    device memory at DEV_A, nothing allocated."""
    lib.gs_params_reset()
    lib.gs_params_device(DEV_A, DEV_A + (1 << 40))

    def decode(domain, cbid, **fields):
        out = Out()
        assert lib.gs_params_decode(domain, cbid, ctypes.byref(Args(**fields)), ctypes.byref(out)) == 0, cbid
        return out

    decode.lib = lib
    return decode


def copy(o):
    return (o.decoded, o.kind, o.src, o.dst, o.bytes, o.stream)


def test_runtime_copies_take_direction_from_their_kind_and_memory_from_the_ranges(dec):
    assert copy(dec(RT, 31, dst=DEV_A, src=HOST_A, bytes=4096, rt_kind=RT_HTOD)) == (
        YES, HTOD, PAGEABLE, DEVICE, 4096, 0)
    dec.lib.gs_params_range(HOST_A, 1 << 20, PINNED)
    assert copy(dec(RT, 41, dst=HOST_A + 64, src=DEV_A, bytes=100, rt_kind=RT_DTOH, stream=STREAM)) == (
        YES, DTOH, DEVICE, PINNED, 100, STREAM)
    assert copy(dec(RT, 225, dst=DEV_A, src=DEV_A + 8, bytes=8, rt_kind=RT_DTOD, stream=STREAM)) == (
        YES, DTOD, DEVICE, DEVICE, 8, STREAM)
    assert copy(dec(RT, 31, dst=HOST_A, src=HOST_A + 4096, bytes=8, rt_kind=RT_HTOH))[:4] == (YES, HTOH, PINNED, PINNED)
    dec.lib.gs_params_range(DEV_A, 1 << 20, MANAGED)
    assert copy(dec(RT, 31, dst=DEV_A, src=HOST_A, bytes=1, rt_kind=RT_HTOD))[:4] == (YES, HTOD, PINNED, MANAGED)
    assert dec.lib.gs_params_unified_calls() == 0  # the kind said where each side is


def test_the_default_kind_asks_where_each_side_lives(dec):
    o = dec(RT, 31, dst=HOST_A, src=DEV_A, bytes=64, rt_kind=RT_DEFAULT)
    assert copy(o) == (YES, DTOH, DEVICE, PAGEABLE, 64, 0)
    assert dec.lib.gs_params_unified_calls() == 2
    assert copy(dec(DR, 305, dst=DEV_A, src=DEV_A + 4, bytes=4))[:4] == (YES, DTOD, DEVICE, DEVICE)  # cuMemcpy
    dec.lib.gs_params_range(HOST_A, 64, MANAGED)
    assert copy(dec(DR, 306, dst=HOST_A, src=HOST_A + 128, bytes=4, stream=STREAM)) == (
        YES, HTOD, PAGEABLE, MANAGED, 4, STREAM)  # managed memory is not the host side of a copy


def test_a_synchronous_copy_has_no_stream_and_zero_bytes_count_nothing(dec):
    # cudaMemcpy's block ends before a stream field: nothing may be read there
    assert dec(RT, 31, dst=DEV_A, src=HOST_A, bytes=8, rt_kind=RT_HTOD, stream=STREAM).stream == 0
    assert dec(RT, 31, dst=DEV_A, src=HOST_A, bytes=0, rt_kind=RT_HTOD).decoded == NOTHING
    assert dec(DR, 276, dst=DEV_A, src=HOST_A, bytes=0).decoded == NOTHING
    assert dec(RT, 160, dst=DEV_A, src=DEV_A, bytes=0).decoded == NOTHING


def test_2d_and_3d_runtime_copies_count_their_extent_and_refuse_arrays(dec):
    assert copy(dec(RT, 32, dst=DEV_A, src=HOST_A, width=100, height=3, rt_kind=RT_HTOD)) == (
        YES, HTOD, PAGEABLE, DEVICE, 300, 0)
    assert dec(RT, 44, dst=DEV_A, src=HOST_A, width=100, height=3, rt_kind=RT_HTOD, stream=STREAM).stream == STREAM
    assert copy(dec(RT, 145, dst=HOST_A, src=DEV_A, width=10, height=2, depth=5, rt_kind=RT_DTOH, stream=STREAM)) == (
        YES, DTOH, DEVICE, PAGEABLE, 100, STREAM)
    assert dec(RT, 144, dst=HOST_A, src=DEV_A, width=10, height=2, depth=5, rt_kind=RT_DTOH,
               src_type=MT_ARRAY).decoded == UNSUPPORTED
    assert dec(RT, 144, width=10, height=2, depth=5, null_inner=1).decoded == NOTHING


def test_symbol_copies_know_the_symbol_is_device_memory(dec):
    assert copy(dec(RT, 39, dst=0x1234, src=HOST_A, bytes=16, rt_kind=RT_HTOD)) == (YES, HTOD, PAGEABLE, DEVICE, 16, 0)
    # the default kind: only the pointer side is asked about
    assert copy(dec(RT, 39, dst=0x1234, src=DEV_A, bytes=16, rt_kind=RT_DEFAULT))[:4] == (YES, DTOD, DEVICE, DEVICE)
    assert dec.lib.gs_params_unified_calls() == 1
    assert copy(dec(RT, 48, dst=HOST_A, src=0x1234, bytes=16, rt_kind=RT_DEFAULT, stream=STREAM)) == (
        YES, DTOH, DEVICE, PAGEABLE, 16, STREAM)


def test_peer_copies_are_device_to_device(dec):
    assert copy(dec(RT, 160, dst=DEV_A, src=DEV_A + 64, bytes=4096)) == (YES, PTOP, DEVICE, DEVICE, 4096, 0)
    assert copy(dec(RT, 161, dst=DEV_A, src=DEV_A, bytes=1, stream=STREAM)) == (YES, PTOP, DEVICE, DEVICE, 1, STREAM)
    assert copy(dec(DR, 318, dst=DEV_A, src=DEV_A, bytes=7)) == (YES, PTOP, DEVICE, DEVICE, 7, 0)
    assert copy(dec(DR, 319, dst=DEV_A, src=DEV_A, bytes=7, stream=STREAM))[5] == STREAM


def test_driver_copies_take_direction_from_the_entry_point(dec):
    dec.lib.gs_params_range(HOST_A, 4096, PINNED)
    assert copy(dec(DR, 276, dst=DEV_A, src=HOST_A, bytes=512)) == (YES, HTOD, PINNED, DEVICE, 512, 0)
    assert copy(dec(DR, 279, dst=HOST_A + 8192, src=DEV_A, bytes=512, stream=STREAM)) == (
        YES, DTOH, DEVICE, PAGEABLE, 512, STREAM)
    assert copy(dec(DR, 280, dst=DEV_A, src=DEV_A + 512, bytes=512)) == (YES, DTOD, DEVICE, DEVICE, 512, 0)
    assert dec.lib.gs_params_unified_calls() == 0


def test_driver_descriptors_say_each_sides_memory(dec):
    o = dec(DR, 287, dst=DEV_A, src=HOST_A, width=64, height=4, src_type=MT_HOST, dst_type=MT_DEVICE)
    assert copy(o) == (YES, HTOD, PAGEABLE, DEVICE, 256, 0)
    o = dec(DR, 289, dst=HOST_A, src=DEV_A, width=64, height=4, src_type=MT_UNIFIED, dst_type=MT_UNIFIED,
            stream=STREAM)
    assert copy(o) == (YES, DTOH, DEVICE, PAGEABLE, 256, STREAM)
    o = dec(DR, 290, dst=DEV_A, src=DEV_A, width=8, height=8, depth=8, src_type=MT_DEVICE, dst_type=MT_DEVICE)
    assert copy(o) == (YES, DTOD, DEVICE, DEVICE, 512, 0)
    assert dec(DR, 287, dst=DEV_A, src=0x99, width=64, height=4, src_type=MT_ARRAY,
               dst_type=MT_DEVICE).decoded == UNSUPPORTED
    assert dec(DR, 290, dst=0x99, src=DEV_A, width=8, height=8, depth=8, src_type=MT_DEVICE,
               dst_type=MT_ARRAY).decoded == UNSUPPORTED
    assert dec(DR, 287, width=64, height=4, src_type=MT_HOST, dst_type=MT_DEVICE, null_inner=1).decoded == NOTHING


def test_memsets_count_elements_times_their_size(dec):
    dec.lib.gs_params_range(DEV_A, 4096, MANAGED)
    o = dec(RT, 49, dst=DEV_A + (1 << 20), bytes=1000)
    assert (o.decoded, o.kind, o.bytes, o.stream) == (YES, DEVICE, 1000, 0)
    o = dec(RT, 51, dst=DEV_A, bytes=1000, stream=STREAM)
    assert (o.decoded, o.kind, o.bytes, o.stream) == (YES, MANAGED, 1000, STREAM)
    assert dec(RT, 52, dst=DEV_A, width=10, height=10, stream=STREAM).bytes == 100
    assert dec(RT, 142, dst=DEV_A, width=10, height=10, depth=10).bytes == 1000
    assert dec(DR, 249, dst=DEV_A, bytes=100).bytes == 100  # cuMemsetD8: 100 bytes
    o = dec(DR, 220, dst=DEV_A, bytes=100, stream=STREAM)  # cuMemsetD32Async: 100 words
    assert (o.bytes, o.stream) == (400, STREAM)
    assert dec(DR, 253, dst=DEV_A, width=10, height=3).bytes == 60  # cuMemsetD2D16
    assert dec(DR, 226, dst=DEV_A, width=10, height=3, stream=STREAM).bytes == 120
    assert dec(RT, 49, dst=DEV_A, bytes=0).decoded == NOTHING


def test_syncs_name_a_stream_only_where_their_block_has_one(dec):
    assert (dec(RT, 131, stream=STREAM).decoded, dec(RT, 131, stream=STREAM).stream) == (1, STREAM)
    assert (dec(DR, 126, stream=STREAM).decoded, dec(DR, 126, stream=STREAM).stream) == (1, STREAM)
    assert dec(RT, 137, src=0x77).decoded == 0  # an event
    assert dec(RT, 165).decoded == 0  # the device: no parameters at all


def test_allocations_and_frees_give_their_range(dec):
    o = dec(RT, 27, dst=HOST_A, bytes=4096)
    assert (o.decoded, o.base, o.size) == (1, HOST_A, 4096)
    assert dec(RT, 27, dst=HOST_A, bytes=4096, null_inner=1).decoded == 0  # no out pointer: nothing to learn
    o = dec(RT, 206, dst=DEV_A, bytes=64)
    assert (o.decoded, o.base, o.size) == (1, DEV_A, 64)
    o = dec(RT, 152, dst=HOST_A, bytes=100)
    assert (o.decoded, o.base, o.size) == (1, HOST_A, 100)
    o = dec(RT, 26, dst=HOST_A)
    assert (o.decoded, o.base, o.size) == (1, HOST_A, 0)
    o = dec(DR, 39, dst=HOST_A, bytes=10)
    assert (o.decoded, o.base, o.size) == (1, HOST_A, 10)
    o = dec(DR, 379, dst=HOST_A, bytes=10)
    assert (o.decoded, o.base, o.size) == (1, HOST_A, 10)
    assert (dec(DR, 38, dst=HOST_A).decoded, dec(DR, 38, dst=HOST_A).base) == (1, HOST_A)


def test_instantiations_give_the_executable_and_its_graph(dec):
    o = dec(RT, 443, exec=0xE1, graph=0x61)
    assert (o.decoded, o.exec, o.graph) == (1, 0xE1, 0x61)
    assert dec(RT, 443, exec=0xE1, graph=0x61, null_inner=1).decoded == 0
    o = dec(RT, 335, exec=0xE2, graph=0x62)
    assert (o.decoded, o.exec, o.graph) == (1, 0xE2, 0x62)
    o = dec(DR, 578, exec=0xE3, graph=0x63)
    assert (o.decoded, o.exec, o.graph) == (1, 0xE3, 0x63)
    assert dec(DR, 696, exec=0, graph=0x64).decoded == 0


def test_a_decoder_handed_another_ops_row_reads_nothing(dec):
    for domain, cbid in ((RT, 31), (RT, 49), (DR, 287), (DR, 249)):
        assert dec.lib.gs_params_wrong_op(domain, cbid, ctypes.byref(Args(bytes=8, width=8, height=8))) == NOTHING


def test_address_kinds_ask_the_driver_once_per_region(lib):
    region = 1 << 21
    lib.gs_addr_reset(DEV_A, DEV_A + 4 * region, CU_DEVICE)
    kind = ctypes.c_int()
    assert lib.gs_addr_unified(DEV_A + 5, ctypes.byref(kind)) == 0 and kind.value == DEVICE
    assert lib.gs_addr_unified(DEV_A + 999, ctypes.byref(kind)) == 0 and kind.value == DEVICE
    assert lib.gs_addr_driver_calls() == 1  # the region's answer is kept
    assert lib.gs_addr_unified(HOST_A, ctypes.byref(kind)) == 1 and kind.value == PAGEABLE  # unknown to CUDA
    assert lib.gs_addr_unified(HOST_A + 8, ctypes.byref(kind)) == 1 and kind.value == PAGEABLE
    assert lib.gs_addr_driver_calls() == 2
    # ranges learned from allocations win, and are never asked of the driver
    lib.gs_addr_add(HOST_A + 10 * region, 4096, PINNED)
    lib.gs_addr_add(DEV_A + 10 * region, 4096, MANAGED)
    assert lib.gs_addr_unified(HOST_A + 10 * region + 1, ctypes.byref(kind)) == 1 and kind.value == PINNED
    assert lib.gs_addr_unified(DEV_A + 10 * region + 1, ctypes.byref(kind)) == 0 and kind.value == MANAGED
    assert lib.gs_addr_range_kind(HOST_A + 10 * region + 4095) == PINNED
    assert lib.gs_addr_range_kind(HOST_A + 10 * region + 4096) == 0
    assert lib.gs_addr_driver_calls() == 2


def test_address_kinds_pinned_memory_the_driver_knows_and_answers_it_cannot_give(lib):
    kind = ctypes.c_int()
    lib.gs_addr_reset(HOST_A, HOST_A + (1 << 21), CU_HOST)  # registered before the library saw it
    assert lib.gs_addr_unified(HOST_A + 1, ctypes.byref(kind)) == 1 and kind.value == PINNED
    lib.gs_addr_reset(HOST_A, HOST_A + (1 << 21), -1)  # the driver fails: pageable, asked again next time
    assert lib.gs_addr_unified(HOST_A + 1, ctypes.byref(kind)) == 1 and kind.value == PAGEABLE
    assert lib.gs_addr_unified(HOST_A + 2, ctypes.byref(kind)) == 1
    assert lib.gs_addr_driver_calls() == 2
