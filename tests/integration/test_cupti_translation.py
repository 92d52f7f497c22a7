"""The CUPTI injection library's translation, without a GPU: hand-built
CUPTI activity records (the CUPTI headers' own structs, filled by a tiny
C++ test driver) go through the same Translator the library runs, into a
real ring, and the sidecar's poller turns them into the metrics agents
read. Also: what the built library exports.

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import collections
import ctypes
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from support.cbuild import cache_dir, cupti_shim
from support.gsrun import rings_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
import cupti_build  # noqa: E402

from graphsignal.sidecar.poller import Poller  # noqa: E402
from graphsignal.rings import layout as L  # noqa: E402
from graphsignal.rings.reader import Ring  # noqa: E402
from graphsignal.sidecar.store import MetricStore  # noqa: E402

# CUPTI enum values, as in cupti_activity.h
MEMCPY_HTOD, MEMCPY_DTOH, MEMCPY_DTOD, MEMCPY_PTOP = 1, 2, 8, 10
MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE, MEM_MANAGED = 1, 2, 3, 5
SYNC_EVENT, SYNC_STREAM_WAIT_EVENT, SYNC_STREAM, SYNC_CONTEXT = 1, 2, 3, 4

UUID0 = "GPU-2c44f54a-9fd0-dfe6-9927-372066286df5"
UUID1 = "GPU-0b7e2d2e-44aa-1c3b-8a5f-10d1a7c6e001"
ADD = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"


@pytest.fixture(scope="module")
def shim():
    u32, u64, vp, s = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p
    sigs = {
        "gs_test_open": ([s, u64, ctypes.c_int], vp),
        "gs_test_close": ([vp], None),
        "gs_test_set_uuid": ([vp, u32, s], None),
        "gs_test_note_context": ([vp, u32, u32], None),
        "gs_test_write_meta": ([vp], None),
        "gs_test_kernel": ([vp, s, u32, u32, u64, u64, u32, ctypes.c_int], None),
        "gs_test_memcpy": ([vp, u32, u32, u32, u64, u32, u64, u64], None),
        "gs_test_peer_copy": ([vp, u64, u32, u32, u32, u64, u64], None),
        "gs_test_memset": ([vp, u32, u64, u32, u64, u64], None),
        "gs_test_sync": ([vp, u32, u32, u64, u64, ctypes.c_int], None),
        "gs_test_graph": ([vp, u32, u32, u32, u64, u64], None),
        "gs_test_context": ([vp, u32, u32], None),
        "gs_test_other": ([vp], None),
        "gs_test_translate": ([vp], ctypes.c_size_t),
        "gs_test_stats": ([vp, ctypes.POINTER(u64)], None),
        "gs_test_ignore_stream": ([vp, u32], ctypes.c_int),
        "gs_test_last_stream": ([vp, u32], None),
        "gs_test_copies_elsewhere": ([vp, ctypes.c_int], None),
        "gs_test_register_graph": ([vp, u32, u32, s], None),
        "gs_test_estimate": ([vp, u32, u32, u64], u64),
    }
    return cupti_shim(sigs)


class Harness:
    """One translator writing into one real ring, as one workload process."""

    def __init__(self, lib, node_mode=False, capacity=1 << 16):
        self.lib = lib
        self.run_id = uuid.uuid4().hex[:12]
        self.name = "gs-%s-%d-cupti" % (self.run_id, os.getpid())
        self.h = lib.gs_test_open(self.name.encode(), capacity, 1 if node_mode else 0)
        assert self.h, "cannot create ring %s" % self.name
        self.store = MetricStore()
        self.poller = Poller(self.store, self.run_id)

    def __getattr__(self, verb):
        fn = getattr(self.lib, "gs_test_" + verb)
        return lambda *a: fn(self.h, *[x.encode() if isinstance(x, str) else x for x in a])

    def stats(self):
        out = (ctypes.c_uint64 * 10)()
        self.lib.gs_test_stats(self.h, out)
        keys = ("records", "kernels", "graphs", "memcpys", "memsets", "syncs", "graph_kernels_skipped", "other",
                "ignored", "copy_samples")
        return dict(zip(keys, list(out)))

    def drain(self):
        self.poller.poll_once()

    def profile(self, metric, **tags):
        """{frame: (value, samples)} summed over the series matching tags."""
        out = {}
        for s in self.store.lookup(metric, "profile", tags):
            for frame, (v, n) in s.frames.items():
                pv, pn = out.get(frame, (0, 0))
                out[frame] = (pv + v, pn + n)
        return out

    def series_tags(self, metric):
        return [s.tags for s in self.store.lookup(metric)]

    def counter(self, metric, **tags):
        return sum(s.total for s in self.store.lookup(metric, "counter", tags))

    def close(self):
        self.lib.gs_test_close(self.h)
        self.poller.stop(final=False)
        self.poller.cleanup_all()


@pytest.fixture
def harness(shim):
    made = []

    def make(**kw):
        h = Harness(shim, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_kernel_samples_are_exact_and_symbols_interned_once(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    total = 0
    for batch in range(5):  # five completed buffers
        for i in range(2000):
            start = 1_000_000 * batch + 100 * i
            dur = 1000 + (i % 7)
            t.kernel(ADD, 0, 1, start, start + dur, 0, 0)
            total += dur
        t.kernel(GEMM, 0, 1, 10, 5010, 0, 0)
        assert t.translate() == 2001
    ring = Ring("/dev/shm/" + t.name)
    recs = ring.drain()
    names = collections.Counter(text for _, _, text in ring.learn_names(recs[recs["type"] == L.REC_NAME]))
    assert names == {ADD: 1, GEMM: 1, UUID0: 1}
    kernels = recs[recs["type"] == L.REC_KERNEL]
    assert kernels.size == 10005
    assert int(kernels["value"][kernels["name_id"] == kernels["name_id"][0]].sum()) == total
    ring.close()


def test_kernel_profile_through_the_poller(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    for i in range(3000):
        t.kernel(ADD, 0, 1, 10 * i, 10 * i + 700, 0, 0)
    for i in range(20):
        t.kernel(GEMM, 0, 1, 0, 250_000, 0, 0)
    t.translate()
    t.drain()
    prof = t.profile("cuda_kernels_nanoseconds", **{"device.cuda_index": "0"})
    assert prof == {ADD: (3000 * 700, 3000), GEMM: (20 * 250_000, 20)}
    tags = t.series_tags("cuda_kernels_nanoseconds")
    assert tags == [{"process.pid": str(os.getpid()), "device.cuda_index": "0", "device.uuid": UUID0}]


def test_each_device_is_tagged_with_its_uuid_before_its_first_record(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    t.set_uuid(1, UUID1)
    for dev in (1, 0, 1):
        t.kernel(ADD, dev, 1 + dev, 0, 100, 0, 0)
    t.translate()
    ring = Ring("/dev/shm/" + t.name)
    recs = ring.drain()
    types, devs = recs["type"].tolist(), recs["device"].tolist()
    for dev in (0, 1):
        first = next(i for i, (ty, d) in enumerate(zip(types, devs)) if d == dev and ty != L.REC_NAME)
        assert types[first] == L.REC_DEVICE
        assert types.count(L.REC_DEVICE) == 2  # once per device
    ring.close()
    t2 = harness()
    t2.set_uuid(0, UUID0)
    t2.set_uuid(1, UUID1)
    for dev in (1, 0, 1):
        t2.kernel(ADD, dev, 1 + dev, 0, 100, 0, 0)
    t2.translate()
    t2.drain()
    assert t2.profile("cuda_kernels_nanoseconds", **{"device.cuda_index": "1", "device.uuid": UUID1}) == {ADD: (200, 2)}
    assert t2.profile("cuda_kernels_nanoseconds", **{"device.cuda_index": "0", "device.uuid": UUID0}) == {ADD: (100, 1)}


def test_device_without_a_known_uuid_is_tagged_by_index_only(harness):
    t = harness()
    t.kernel(ADD, 3, 1, 0, 100, 0, 0)
    t.translate()
    t.drain()
    assert t.series_tags("cuda_kernels_nanoseconds") == [{"process.pid": str(os.getpid()), "device.cuda_index": "3"}]


def test_older_record_versions_translate_the_same(harness):
    # A libcupti of another minor emits another struct version; the fields
    # read keep their offsets (records.h), so both count alike.
    t = harness()
    t.set_uuid(0, UUID0)
    for legacy in (0, 1, 0, 1):
        t.kernel(ADD, 0, 1, 0, 500, 0, legacy)
        t.sync(SYNC_STREAM, 1, 0, 40, legacy)
    t.note_context(1, 0)
    t.translate()
    t.drain()
    assert t.profile("cuda_kernels_nanoseconds") == {ADD: (2000, 4)}
    assert t.profile("cuda_sync_nanoseconds") == {"stream": (160, 4)}


def test_memcpy_bytes_and_times_by_kind_and_host_memory(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    t.set_uuid(1, UUID1)
    mib = 1 << 20
    for _ in range(10):
        t.memcpy(MEMCPY_HTOD, MEM_PINNED, MEM_DEVICE, 64 * mib, 0, 0, 3000)
        t.memcpy(MEMCPY_HTOD, MEM_PAGEABLE, MEM_DEVICE, 8 * mib, 0, 0, 9000)
        t.memcpy(MEMCPY_DTOH, MEM_DEVICE, MEM_PINNED, 32 * mib, 0, 0, 1500)
        t.memcpy(MEMCPY_DTOD, MEM_DEVICE, MEM_DEVICE, 4 * mib, 0, 0, 100)
    t.peer_copy(16 * mib, 1, 1, 0, 0, 700)
    t.translate()
    t.drain()
    assert t.counter("cuda_memcpy_bytes", kind="host_to_device") == 10 * 72 * mib
    assert t.counter("cuda_memcpy_bytes", kind="host_to_device", host_memory="pinned") == 10 * 64 * mib
    assert t.counter("cuda_memcpy_bytes", kind="host_to_device", host_memory="pageable") == 10 * 8 * mib
    assert t.counter("cuda_memcpy_bytes", kind="device_to_host", host_memory="pinned") == 10 * 32 * mib
    assert t.counter("cuda_memcpy_bytes", kind="device_to_device") == 10 * 4 * mib
    assert t.counter("cuda_memcpy_bytes", kind="peer_to_peer", **{"device.cuda_index": "1"}) == 16 * mib
    assert t.profile("cuda_memcpy_nanoseconds", host_memory="pageable") == {"host_to_device": (90000, 10)}
    assert t.profile("cuda_memcpy_nanoseconds", host_memory="pinned") == {
        "host_to_device": (30000, 10), "device_to_host": (15000, 10)}
    assert t.profile("cuda_memcpy_nanoseconds", **{"device.cuda_index": "0"})["device_to_device"] == (1000, 10)
    assert t.stats()["memcpys"] == 41


def test_memset_bytes_and_times_by_memory_kind(harness):
    t = harness()
    for _ in range(7):
        t.memset(MEM_DEVICE, 1 << 20, 0, 0, 250)
    t.memset(MEM_MANAGED, 4096, 0, 0, 50)
    t.translate()
    t.drain()
    assert t.profile("cuda_memset_nanoseconds") == {"device": (1750, 7), "managed": (50, 1)}
    assert t.counter("cuda_memset_bytes", kind="device") == 7 << 20
    assert t.counter("cuda_memset_bytes", kind="managed") == 4096


def test_sync_kinds_on_the_device_of_their_context(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    t.set_uuid(1, UUID1)
    t.note_context(7, 1)  # as the context-created callback reports it
    t.context(9, 0)  # as a CONTEXT activity record reports it
    for kind, dur in ((SYNC_EVENT, 10), (SYNC_STREAM_WAIT_EVENT, 20), (SYNC_STREAM, 30), (SYNC_CONTEXT, 40)):
        t.sync(kind, 7, 1000, 1000 + dur, 0)
    t.sync(SYNC_CONTEXT, 9, 0, 5, 0)
    t.translate()
    t.drain()
    assert t.profile("cuda_sync_nanoseconds", **{"device.cuda_index": "1", "device.uuid": UUID1}) == {
        "event": (10, 1), "stream_wait_event": (20, 1), "stream": (30, 1), "context": (40, 1)}
    assert t.profile("cuda_sync_nanoseconds", **{"device.cuda_index": "0"}) == {"context": (5, 1)}


def test_graph_mode_times_replays_whole_and_skips_their_nodes(harness):
    t = harness()
    t.set_uuid(0, UUID0)
    t.write_meta()
    for replay in range(100):
        t.graph(3, 0, 1, replay * 1000, replay * 1000 + 800)
        # nodes of a replay, should CUPTI report them too: already in the graph's time
        t.kernel(ADD, 0, 1, replay * 1000, replay * 1000 + 10, 3, 0)
    for replay in range(25):
        t.graph(5, 0, 1, 0, 300)
    t.kernel(GEMM, 0, 1, 0, 1000, 0, 0)  # eager
    t.translate()
    t.drain()
    assert t.profile("cuda_graphs_nanoseconds") == {"graph_3": (80000, 100), "graph_5": (7500, 25)}
    assert t.profile("cuda_kernels_nanoseconds") == {GEMM: (1000, 1)}
    assert t.stats()["graph_kernels_skipped"] == 100
    mode = t.store.lookup("cuda_graph_trace_mode", "gauge")
    assert [g.value for g in mode] == [0]


def test_node_mode_reports_graph_kernels_per_node(harness):
    t = harness(node_mode=True)
    t.write_meta()
    for replay in range(50):
        for node in range(64):
            t.kernel("node_kernel_%d" % (node % 4), 0, 1, 0, 10 + node % 4, 3, 0)
    t.translate()
    t.drain()
    prof = t.profile("cuda_kernels_nanoseconds")
    assert prof == {"node_kernel_%d" % k: ((10 + k) * 16 * 50, 16 * 50) for k in range(4)}
    assert t.profile("cuda_graphs_nanoseconds") == {}
    assert [g.value for g in t.store.lookup("cuda_graph_trace_mode", "gauge")] == [1]


def test_graph_record_on_host_uses_its_context_device(harness):
    t = harness()
    t.note_context(4, 1)
    t.graph(8, 0x7FFFFFFF, 4, 0, 100)
    t.translate()
    t.drain()
    assert t.profile("cuda_graphs_nanoseconds", **{"device.cuda_index": "1"}) == {"graph_8": (100, 1)}


def test_other_kinds_are_skipped_and_bad_timestamps_count_with_zero_time(harness):
    t = harness()
    t.other()
    t.kernel(ADD, 0, 1, 0, 0, 0, 0)  # CUPTI: no timestamps collected
    t.kernel(ADD, 0, 1, 500, 100, 0, 0)  # end before start: never a huge unsigned value
    t.kernel(None, 0, 1, 0, 10, 0, 0)
    assert t.translate() == 4
    t.drain()
    assert t.profile("cuda_kernels_nanoseconds") == {ADD: (0, 2), "<unknown kernel>": (10, 1)}
    assert t.stats()["other"] == 1


def test_full_ring_drops_and_counts(harness):
    t = harness(capacity=64)
    for i in range(200):
        t.kernel(ADD, 0, 1, 0, 100, 0, 0)
    t.translate()
    t.drain()
    kept = t.profile("cuda_kernels_nanoseconds")[ADD][1]
    dropped = t.counter("graphsignal_dropped_records")
    assert kept + dropped == 200
    assert dropped > 0


def test_graph_records_take_the_names_graphs_were_given(harness):
    t = harness()
    t.register_graph(21, 3, "graph_00000000000000aa_n3")
    for _ in range(4):
        t.graph(21, 0, 1, 0, 100)
    t.graph(22, 0, 1, 0, 50)  # not named (yet): CUPTI's id
    t.translate()
    t.register_graph(22, 4, "graph_00000000000000aa_n3")  # a re-capture of the same step
    t.graph(22, 0, 1, 0, 50)
    t.graph(4, 0, 1, 0, 7)  # an id only the source graph map holds
    t.translate()
    t.drain()
    assert t.profile("cuda_graphs_nanoseconds") == {"graph_00000000000000aa_n3": (457, 6), "graph_22": (50, 1)}
    assert {s.tags["graph"]: s.total for s in t.store.lookup("cuda_graph_captures", "counter")} == {
        "graph_00000000000000aa_n3": 2}


def test_copy_records_only_time_copies_counted_by_callbacks(harness):
    t = harness()
    t.copies_elsewhere(1)
    for _ in range(4):
        t.memcpy(MEMCPY_HTOD, MEM_PINNED, MEM_DEVICE, 64, 0, 0, 2000)
    t.memcpy(MEMCPY_HTOD, MEM_PINNED, MEM_DEVICE, 8 << 20, 0, 0, 400_000)
    t.memset(MEM_DEVICE, 4096, 0, 0, 900)
    t.kernel(ADD, 0, 1, 0, 100, 0, 0)
    assert t.translate() == 7
    t.drain()
    assert t.stats()["copy_samples"] == 6 and t.stats()["memcpys"] == 0
    assert t.store.lookup("cuda_memcpy_nanoseconds") == [] and t.store.lookup("cuda_memset_nanoseconds") == []
    assert t.profile("cuda_kernels_nanoseconds") == {ADD: (100, 1)}
    assert t.estimate(MEMCPY_HTOD, MEM_PINNED, 64) == 2000
    assert t.estimate(MEMCPY_HTOD, MEM_PINNED, 127) == 2000  # the same log2 bucket
    assert t.estimate(MEMCPY_HTOD, MEM_PINNED, 1000) == 2000  # the nearest sampled bucket: latency-bound
    assert t.estimate(MEMCPY_HTOD, MEM_PINNED, 4 << 20) == 200_000  # bandwidth-bound: per byte
    assert t.estimate(MEMCPY_HTOD, MEM_PAGEABLE, 64) == 0  # never sampled
    assert t.estimate(15, MEM_DEVICE, 4096) == 900  # memsets


def test_sampled_record_types_are_the_headers():
    import re
    from graphsignal.sidecar import aggregate as poller  # the record types the aggregator reads
    text = open(os.path.join(ROOT, "include", "graphsignal", "probe.h")).read()
    got = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define GRAPHSIGNAL_REC_(\w+) (\d+)u", text)}
    assert got["MEMCPY_SAMPLED"] == poller.REC_MEMCPY_SAMPLED and got["MEMSET_SAMPLED"] == poller.REC_MEMSET_SAMPLED
    assert got["SYNC_AGG"] == poller.REC_SYNC_AGG
    assert len(set(got.values())) == len(got)


def test_sampled_copy_records_are_tagged_as_estimates():
    # What the library's callbacks write: records of the sampled types,
    # through the poller, as a real ring carries them.
    from graphsignal.sidecar import poller
    from graphsignal.sidecar.aggregate import REC_MEMCPY_SAMPLED, REC_MEMSET_SAMPLED, REC_SYNC_AGG, Aggregator
    from graphsignal.report import Reporter
    from graphsignal.rings import layout as L
    import numpy as np
    recs = np.zeros(5, dtype=L.RECORD_DTYPE)
    # a thread's table flushed twice (3 calls, then 1), a memset record of 2 calls, syncs of 40 and 2 calls
    recs["type"] = [REC_MEMCPY_SAMPLED, REC_MEMCPY_SAMPLED, REC_MEMSET_SAMPLED, REC_SYNC_AGG, REC_SYNC_AGG]
    recs["sub"] = [MEMCPY_HTOD, MEMCPY_HTOD, MEM_DEVICE, SYNC_STREAM, SYNC_CONTEXT]
    recs["name_id"] = [MEM_PINNED | MEM_DEVICE << 8 | 3 << 16, MEM_PINNED | MEM_DEVICE << 8 | 1 << 16, 2, 40, 2]
    recs["value"] = [6000, 2000, 900, 40_000, 7]
    recs["extra"] = [192, 64, 4096, 0, 0]

    class Ring:
        names = {}
        kind = L.KIND_CUPTI
    st = poller.RingState.__new__(poller.RingState)
    st.ring, st.pid, st.base_tags, st.devices, st.instruments = Ring(), 1, {"process.pid": "1"}, {}, {}
    store = MetricStore()
    Aggregator(store, Reporter()).aggregate(st, recs)
    [cp] = store.lookup("cuda_memcpy_nanoseconds")
    assert cp.tags == {"process.pid": "1", "device.cuda_index": "0", "host_memory": "pinned", "duration": "sampled"}
    assert {k: tuple(v) for k, v in cp.frames.items()} == {"host_to_device": (8000, 4)}
    [b] = store.lookup("cuda_memcpy_bytes")
    assert b.total == 256 and b.tags["duration"] == "sampled"
    [ms] = store.lookup("cuda_memset_nanoseconds")
    assert ms.tags["duration"] == "sampled" and {k: tuple(v) for k, v in ms.frames.items()} == {"device": (900, 2)}
    [sy] = store.lookup("cuda_sync_nanoseconds")
    assert "duration" not in sy.tags  # host time is measured, not estimated
    assert {k: tuple(v) for k, v in sy.frames.items()} == {"stream": (40_000, 40), "context": (7, 2)}


# -- the built library --------------------------------------------------------
@pytest.fixture(scope="module")
def injection_lib():
    """A built variant: graphsignal/lib's if present, else one built here."""
    for major in (13, 12):
        p = os.path.join(ROOT, "graphsignal", "lib", cupti_build.library_name(major))
        if os.path.exists(p):
            return p
    out = cache_dir("cupti")
    built = cupti_build.build_cupti_variants(out, log=lambda m: None)
    if not built:
        pytest.skip("no CUPTI headers with libcupti here to build the library")
    return built[-1]


def test_records_on_an_ignored_stream_are_left_out(harness):
    t = harness()
    assert t.ignore_stream(7) == 1
    t.memcpy(1, 2, 3, 4096, 0, 100, 200)  # HtoD pinned on stream 0: the workload's
    t.memcpy(2, 3, 2, 15392, 0, 300, 400)
    t.last_stream(7)  # the probe reader's copy
    t.memset(3, 64, 0, 10, 20)
    t.last_stream(7)
    t.kernel(ADD, 0, 1, 500, 600, 0, 0)
    t.kernel(GEMM, 0, 1, 700, 800, 0, 0)
    t.last_stream(7)
    assert t.translate() == 5
    assert t.stats()["ignored"] == 3
    t.drain()
    assert t.counter("cuda_memcpy_bytes", kind="host_to_device") == 4096
    assert t.counter("cuda_memcpy_bytes", kind="device_to_host") == 0  # no such series
    assert t.profile("cuda_kernels_nanoseconds") == {ADD: (100, 1)}


def test_library_exports_only_its_entry_points(injection_lib):
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("no nm here")
    out = subprocess.run([nm, "-D", "--defined-only", injection_lib], capture_output=True, text=True, check=True)
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    # InitializeInjection for CUDA; InitializeInjectionNvtx2 for NVTX (NVTX_INJECTION64_PATH);
    # graphsignal_cupti_ignore_stream for probe_cuda.h's reader
    assert symbols == {"InitializeInjection", "InitializeInjectionNvtx2", "graphsignal_cupti_ignore_stream"}
    # nor does it hold the test driver's code (tests/support/cupti/test_shim.cpp), not even as local symbols
    every = subprocess.run([nm, injection_lib], capture_output=True, text=True, check=True).stdout
    assert "InitializeInjection" in every and "gs_test_" not in every


def test_library_links_libcupti_by_soname_without_rpath(injection_lib):
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("no readelf here")
    out = subprocess.run([readelf, "-d", injection_lib], capture_output=True, text=True, check=True).stdout
    assert "RPATH" not in out and "RUNPATH" not in out
    major = injection_lib.rsplit("_cu", 1)[1].split(".")[0]
    assert "[libcupti.so.%s]" % major in out


INERT = r"""
import ctypes, os, sys
ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[1])
print(lib.InitializeInjection(), lib.InitializeInjection())
"""


def _libcupti_for(lib_path):
    major = int(lib_path.rsplit("_cu", 1)[1].split(".")[0])
    hs = cupti_build.pick(cupti_build.find_header_sets(), major)
    return hs.libcupti if hs else None


def test_library_is_inert_outside_graphsignal_run(injection_lib):
    libcupti = _libcupti_for(injection_lib)
    if not libcupti:
        pytest.skip("no libcupti here")
    env = {k: v for k, v in os.environ.items() if k != "GRAPHSIGNAL_RUN_ID"}
    proc = subprocess.Popen([sys.executable, "-c", INERT, injection_lib, libcupti], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stdout.split() == ["1", "1"]
    assert stderr == ""
    assert rings_of(proc.pid) == set()


def test_library_without_a_usable_gpu_says_so_once_and_never_fails_cuinit(injection_lib):
    if os.environ.get("GRAPHSIGNAL_TEST_NO_GPU") is None:
        from conftest import HAS_GPU
        if HAS_GPU:
            pytest.skip("a GPU is here: CUPTI would trace")
    libcupti = _libcupti_for(injection_lib)
    if not libcupti:
        pytest.skip("no libcupti here")
    run_id = uuid.uuid4().hex[:12]
    env = dict(os.environ, GRAPHSIGNAL_RUN_ID=run_id)
    p = subprocess.run([sys.executable, "-c", INERT, injection_lib, libcupti], env=env, capture_output=True,
                       text=True, timeout=60)
    try:
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["1", "1"]
        assert p.stderr.count("runs unprofiled") == 1
    finally:
        for f in os.listdir("/dev/shm"):
            if f.startswith("gs-%s-" % run_id):
                os.unlink(os.path.join("/dev/shm", f))
