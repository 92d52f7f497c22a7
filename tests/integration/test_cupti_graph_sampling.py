"""Sampled CUDA graph timing without a GPU: graph launches counted as the
launch callbacks count them (graph_launches.h, driven by hand through the
test driver), hand-built CUPTI records with correlation ids going through
the same Translator, the estimates the library writes at a flush, and what
the sidecar's poller makes of them (tags duration=sampled, count=estimated).

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import ctypes

import numpy as np
import pytest

from graphsignal.report import Reporter
from graphsignal.rings import layout as L
from graphsignal.sidecar import poller as poller_mod
from graphsignal.sidecar.aggregate import REC_GRAPH_AGG, REC_KERNEL_AGG, Aggregator
from graphsignal.sidecar.store import MetricStore
from test_cupti_translation import GEMM, UUID0, Harness, shim  # noqa: F401  # shim: the fixture, built once

MEMCPY_DTOD, MEM_DEVICE = 8, 3
EXEC, EXEC2 = 0x7000, 0x7100
NAME = "graph_00000000000000aa_n3"
SAMPLED = {"duration": "sampled"}
ESTIMATED = {"duration": "sampled", "count": "estimated"}


@pytest.fixture(scope="module")
def gshim(shim):  # noqa: F811
    u32, u64, vp, s, i = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    sigs = {
        "gs_test_last_corr": ([vp, u32, u32], None),
        "gs_test_graph_launches": ([vp], None),
        "gs_test_bind": ([vp, ctypes.c_size_t, u32, s, s, i, i], None),
        "gs_test_launch": ([vp, ctypes.c_size_t, u32, u32, i], i),
        "gs_test_exec_event": ([vp, ctypes.c_size_t, i], None),
        "gs_test_sampling": ([vp, i], i),
        "gs_test_evidence": ([vp, ctypes.POINTER(u64)], None),
        "gs_test_flush_graphs": ([vp, i], None),
    }
    for name, (args, res) in sigs.items():
        f = getattr(shim, name)
        f.argtypes, f.restype = args, res
    return shim


class Sampling(Harness):
    """A translator with graph launches counted by callbacks."""

    def __init__(self, lib, node_mode=False):
        super().__init__(lib, node_mode=node_mode)
        self.set_uuid(0, UUID0)
        self.graph_launches()
        self.corr = 0

    def launches(self, exec_, n):
        first = self.corr + 1
        self.corr += n
        return self.launch(exec_, 0, first, n), list(range(first, first + n))

    def begin(self):
        if not self.corr:
            self.launches(EXEC, 1)  # a launch callback has carried an id: accounting can start after it
        assert self.sampling(0) == 1

    def window(self, open_):
        self.sampling(2 if open_ else 3)

    def evidence(self):
        out = (ctypes.c_uint64 * 5)()
        self.lib.gs_test_evidence(self.h, out)
        return dict(zip(("window_launches", "window_samples", "quiet_launches", "quiet_records", "stray_nodes"),
                        list(out)))

    def graph_records(self, corrs, ns, graph_id=21):
        for c in corrs:
            self.graph(graph_id, 0, 1, 1000, 1000 + ns)
            self.last_corr(c, 0)

    def by_tags(self, metric):
        """{frozenset(extra tags): {frame: (value, samples)}}"""
        out = {}
        for s in self.store.lookup(metric, "profile"):
            if not s.frames:
                continue  # the device's profiles, measured empty
            extra = frozenset((k, v) for k, v in s.tags.items() if k in ("duration", "count"))
            fr = out.setdefault(extra, {})
            for f, (v, n) in s.frames.items():
                pv, pn = fr.get(f, (0, 0))
                fr[f] = (pv + v, pn + n)
        return out


@pytest.fixture
def sampling(gshim):
    made = []

    def make(**kw):
        h = Sampling(gshim, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


EXACT, EST_TIME, EST_COUNT = frozenset(), frozenset(SAMPLED.items()), frozenset(ESTIMATED.items())


def test_replays_counted_by_callbacks_are_timed_by_the_window_mean(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    # before accounting: records count themselves, as in the activity collection (and teach the mean)
    n, corrs = t.launches(EXEC, 10)
    assert n == 10
    t.graph_records(corrs, 1000)
    assert t.translate() == 10
    t.begin()
    t.window(True)
    _, win = t.launches(EXEC, 5)
    t.window(False)
    _, quiet = t.launches(EXEC, 100)
    t.graph_records(win, 800)  # only the window's launches have records
    assert t.translate() == 5
    assert t.evidence() == {"window_launches": 5, "window_samples": 5, "quiet_launches": 100, "quiet_records": 0,
                            "stray_nodes": 0}
    t.sampling(4)  # fold
    t.flush_graphs(0)
    t.drain()
    got = t.by_tags("cuda_graphs_nanoseconds")
    mean = (10 * 1000 + 5 * 800) / 15
    assert got == {EXACT: {NAME: (10_000, 10)}, EST_TIME: {NAME: (round(105 * mean), 105)}}
    st = t.stats()
    assert st["graphs"] == 10 and st["records"] == 15


def test_a_record_of_a_counted_launch_outside_every_window_is_evidence_not_a_count(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    t.begin()
    t.window(True)
    _, win = t.launches(EXEC, 3)
    t.window(False)
    _, quiet = t.launches(EXEC, 40)
    t.window(True)
    _, win2 = t.launches(EXEC, 2)
    t.window(False)
    # the quiet state did not stop CUPTI: records for quiet launches too; late
    # records of an earlier window still count as its samples
    t.graph_records(win + quiet[:7] + win2, 500)
    t.translate()
    ev = t.evidence()
    assert ev["quiet_records"] == 7 and ev["window_samples"] == 5 and ev["window_launches"] == 5
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_graphs_nanoseconds") == {EST_TIME: {NAME: (45 * 500, 45)}}  # counted once each


def test_a_frame_counted_before_any_sample_gets_its_time_when_one_comes(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    t.begin()
    t.launches(EXEC, 50)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_graphs_nanoseconds") == {EST_TIME: {NAME: (0, 50)}}  # counted, not timed yet
    t.window(True)
    _, win = t.launches(EXEC, 4)
    t.window(False)
    t.graph_records(win, 2000)
    t.translate()
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_graphs_nanoseconds") == {EST_TIME: {NAME: (54 * 2000, 54)}}


def test_ending_accounting_leaves_later_launches_to_their_records(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    t.begin()
    t.window(True)
    _, win = t.launches(EXEC, 4)
    t.window(False)
    _, quiet = t.launches(EXEC, 10)
    t.sampling(1)  # end: ids after the last one seen count by their records again
    _, later = t.launches(EXEC, 6)
    t.graph_records(win, 300)
    t.graph_records(later, 700)
    t.translate()
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_graphs_nanoseconds") == {EST_TIME: {NAME: (14 * 300, 14)}, EXACT: {NAME: (6 * 700, 6)}}
    assert t.stats()["graphs"] == 6


def test_without_correlation_ids_accounting_never_starts(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    for _ in range(5):
        assert t.launch(EXEC, 0, 0, 1) == 1  # callbacks that carry id 0
    assert t.sampling(0) == 0


def test_a_launch_of_an_executable_never_bound_asks_to_be_bound(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "", 0, 0)
    t.begin()
    assert t.launches(EXEC2, 3)[0] == 0
    t.bind(EXEC2, 22, "graph_22", "", 0, 0)
    assert t.launches(EXEC2, 3)[0] == 3
    t.exec_event(EXEC2, 1)  # destroyed
    assert t.launches(EXEC2, 1)[0] == 0


def test_graph_mode_node_records_of_quiet_launches_are_evidence(sampling):
    t = sampling()
    t.bind(EXEC, 21, NAME, "k;k;k", 1, 0)
    t.begin()
    _, quiet = t.launches(EXEC, 5)
    for c in quiet:
        t.kernel("k", 0, 1, 0, 10, 21, 0)
        t.last_corr(c, 21)
    t.kernel(GEMM, 0, 1, 0, 1000, 0, 0)  # eager: exact
    t.translate()
    assert t.evidence()["stray_nodes"] == 5
    t.drain()
    assert t.profile("cuda_kernels_nanoseconds") == {GEMM: (1000, 1)}


def node_window(t, exec_, n, per_replay):
    """n launches in a window, each with its node records: per_replay = [(symbol, ns), ...]."""
    t.window(True)
    _, win = t.launches(exec_, n)
    t.window(False)
    for c in win:
        for sym, ns in per_replay:
            if sym == "memcpy":
                t.memcpy(MEMCPY_DTOD, MEM_DEVICE, MEM_DEVICE, 4096, 0, 0, ns)
            else:
                t.kernel(sym, 0, 1, 0, ns, 21, 0)
            t.last_corr(c, 21)
    t.translate()
    t.evidence()  # the window judged: its replays and records folded in
    t.sampling(4)
    return win


def test_node_mode_counts_kernels_from_the_walk_and_times_them_by_samples(sampling):
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "k_a;k_b;k_a", 1, 0)
    t.begin()
    node_window(t, EXEC, 2, [("k_a", 100), ("k_b", 300), ("k_a", 140), ("memcpy", 50)])
    t.launches(EXEC, 98)
    t.kernel(GEMM, 0, 1, 0, 1000, 0, 0)  # an eager kernel beside: exact
    t.translate()
    t.flush_graphs(0)
    t.drain()
    got = t.by_tags("cuda_kernels_nanoseconds")
    # 100 replays x the walk (k_a twice, k_b once): exact counts, time x the mean per node
    assert got[EST_TIME] == {"k_a": (200 * 120, 200), "k_b": (100 * 300, 100)}
    assert got[EXACT] == {GEMM: (1000, 1)}
    assert EST_COUNT not in got
    # copies inside the graph: per replay as the windows saw them, estimated
    assert t.by_tags("cuda_memcpy_nanoseconds") == {EST_COUNT: {"device_to_device": (100 * 50, 100)}}
    assert t.counter("cuda_memcpy_bytes", count="estimated") == 100 * 4096
    assert t.by_tags("cuda_graphs_nanoseconds") == {}  # node mode: no graph frames


def test_node_mode_kernel_records_the_walk_does_not_name_are_counted_per_replay(sampling):
    # a memset node CUPTI reports as a kernel, say: the walk has no kernel node for it
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "k_a", 1, 0)
    t.begin()
    node_window(t, EXEC, 4, [("k_a", 100), ("memset32", 20)])
    t.launches(EXEC, 6)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EST_TIME: {"k_a": (1000, 10)}, EST_COUNT: {"memset32": (200, 10)}}


def test_node_mode_counts_of_varying_graphs_are_estimated_from_the_windows(sampling):
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "k_a", 1, 0)
    t.bind(EXEC2, 21, NAME, "k_a", 1, 1)  # a conditional node: the body's kernels are not in the walk
    t.begin()
    t.exec_event(EXEC, 0)  # node parameters set on the executable: its kernels may differ from the walk
    # 4 replays in the window ran 6 k_c nodes: 1.5 a replay
    t.window(True)
    _, win = t.launches(EXEC, 4)
    t.window(False)
    for c in win:
        for _ in range(2 if c % 2 else 1):
            t.kernel("k_c", 0, 1, 0, 40, 21, 0)
            t.last_corr(c, 21)
    t.translate()
    t.evidence()
    t.sampling(4)
    t.launches(EXEC, 6)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EST_COUNT: {"k_c": (15 * 40, 15)}}
    t.launches(EXEC2, 2)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EST_COUNT: {"k_c": (18 * 40, 18)}}


def test_node_mode_window_records_of_an_unknown_graph_belong_to_the_launch_they_came_from(sampling):
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "k_a", 1, 1)  # conditional: its body runs k_body under a graph id of its own
    t.begin()
    t.window(True)
    _, win = t.launches(EXEC, 3)
    t.window(False)
    for c in win:
        t.kernel("k_a", 0, 1, 0, 10, 21, 0)
        t.last_corr(c, 21)
        t.kernel("k_body", 0, 1, 0, 30, 999, 0)
        t.last_corr(c, 999)
    t.translate()
    t.evidence()
    t.sampling(4)
    t.launches(EXEC, 7)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EST_COUNT: {"k_a": (100, 10), "k_body": (300, 10)}}


def test_node_mode_replays_before_sampling_teach_what_one_runs(sampling):
    # a short program: sampling began, but no window came before the end
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "k_a", 1, 0)
    _, before = t.launches(EXEC, 5)
    for c in before:  # left to their records (exact), which still teach
        t.kernel("k_a", 0, 1, 0, 100, 21, 0)
        t.last_corr(c, 21)
        t.memcpy(MEMCPY_DTOD, MEM_DEVICE, MEM_DEVICE, 512, 0, 0, 30)
        t.last_corr(c, 21)
    t.translate()
    t.begin()
    t.launches(EXEC, 10)
    t.flush_graphs(1)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EXACT: {"k_a": (500, 5)}, EST_TIME: {"k_a": (1000, 10)}}
    assert t.by_tags("cuda_memcpy_nanoseconds") == {EXACT: {"device_to_device": (150, 5)},
                                                    EST_COUNT: {"device_to_device": (300, 10)}}


def test_node_mode_dynamic_replays_wait_for_a_window(sampling):
    t = sampling(node_mode=True)
    t.bind(EXEC, 21, NAME, "", 0, 0)  # not walked: only windows say what a replay runs
    t.begin()
    t.launches(EXEC, 10)
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {}
    node_window(t, EXEC, 2, [("k_d", 70)])
    t.flush_graphs(0)
    t.drain()
    assert t.by_tags("cuda_kernels_nanoseconds") == {EST_COUNT: {"k_d": (12 * 70, 12)}}


# -- the sidecar's side ---------------------------------------------------------
class _Ring:
    name = "gs-test-1-cupti"
    names = {5: NAME, 6: "k_a"}
    kind = L.KIND_CUPTI


def _state():
    st = poller_mod.RingState.__new__(poller_mod.RingState)
    st.ring, st.pid, st.base_tags, st.devices, st.instruments = _Ring(), 1, {"process.pid": "1"}, {}, {}
    st.rejected, st.said = {}, set()
    return st


def test_aggregated_graph_and_kernel_records_are_tagged_by_their_flags():
    recs = np.zeros(6, dtype=L.RECORD_DTYPE)
    recs["type"] = [REC_GRAPH_AGG, REC_GRAPH_AGG, REC_GRAPH_AGG, REC_KERNEL_AGG, REC_KERNEL_AGG, REC_KERNEL_AGG]
    recs["sub"] = [1, 1, 0, 1, 3, 4]  # sampled, sampled, exact, sampled, sampled + count estimated, unknown flag
    recs["name_id"] = [5, 5, 5, 6, 6, 6]
    recs["value"] = [9000, 1000, 70, 500, 30, 1]
    recs["extra"] = [10, 0, 1, 5, 3, 1]  # a record of time without calls backfills a frame
    store = MetricStore()
    st = _state()
    Aggregator(store, Reporter()).aggregate(st, recs)
    graphs = {frozenset(s.tags.items()): {k: tuple(v) for k, v in s.frames.items()}
              for s in store.lookup("cuda_graphs_nanoseconds")}
    base = {("process.pid", "1"), ("device.cuda_index", "0")}
    assert graphs == {frozenset(base | {("duration", "sampled")}): {NAME: (10_000, 10)},
                      frozenset(base): {NAME: (70, 1)}}
    kernels = {frozenset(s.tags.items()): {k: tuple(v) for k, v in s.frames.items()}
               for s in store.lookup("cuda_kernels_nanoseconds")}
    assert kernels == {frozenset(base | {("duration", "sampled")}): {"k_a": (500, 5)},
                       frozenset(base | {("duration", "sampled"), ("count", "estimated")}): {"k_a": (30, 3)}}
    assert st.rejected == {"bad_field": 1}
