"""The poller's aggregation, record type by record type, against exact
expectations; discovery, bad rings, retirement."""
import logging
import os
import time
import uuid

import numpy as np
import orjson
import pytest

from graphsignal import histo
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.aggregate import REJECTED_METRIC, parse_instrument
from graphsignal.sidecar.grouping import group_sums
from graphsignal.sidecar.poller import Poller, rank_tags
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.clock import StoreClock
from graphsignal.sidecar.store import MetricStore

DEAD_PID = 4_000_000  # above pid_max: never alive


@pytest.fixture
def run():
    run_id = "t" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    yield run_id, store, poller
    poller.cleanup_all()


def writer(run_id, kind_name="cupti", kind=L.KIND_CUPTI, pid=None, capacity=1 << 16):
    return Writer("gs-%s-%d-%s" % (run_id, pid or os.getpid(), kind_name), kind=kind, capacity=capacity)


def payload(store):
    return orjson.loads(build_signals(store))


def find(store, name, **tags):
    p = payload(store)
    return [m for m in p["metrics"] if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]


def test_kernels_per_symbol_and_device_are_exact(run):
    run_id, store, poller = run
    w = writer(run_id)
    a, b = w.name("_Z6kernelAv"), w.name("_Z6kernelBv")
    uuid0 = w.name("GPU-aaaa")
    w.write(L.REC_DEVICE, device=0, name_id=uuid0)
    for i in range(1000):
        w.write(L.REC_KERNEL, device=0, name_id=a, value=i)
    for _ in range(7):
        w.write(L.REC_KERNEL, device=1, name_id=b, value=1 << 40)
    poller.poll_once()
    pid = str(os.getpid())
    dev0 = find(store, "cuda_kernels_nanoseconds", **{"device.cuda_index": "0"})
    assert dev0[0]["tags"] == {"process.pid": pid, "device.cuda_index": "0", "device.uuid": "GPU-aaaa"}
    assert dev0[0]["stats"]["frames"] == [{"name": "_Z6kernelAv", "value": 999 * 1000 // 2, "samples": 1000,
                                           "display_name": "_Z6kernelAv", "category": "other"}]  # not valid C++: kept
    dev1 = find(store, "cuda_kernels_nanoseconds", **{"device.cuda_index": "1"})
    assert dev1[0]["stats"]["frames"] == [{"name": "_Z6kernelBv", "value": 7 << 40, "samples": 7,
                                           "display_name": "_Z6kernelBv", "category": "other"}]
    # the device in use has all five profiles, measured (empty ones too)
    assert find(store, "cuda_graphs_nanoseconds", **{"device.cuda_index": "0"})[0]["stats"]["frames"] == []


def test_huge_values_sum_exactly_beyond_float_precision(run):
    run_id, store, poller = run
    w = writer(run_id)
    k = w.name("k")
    vals = [(1 << 62) + 3, (1 << 62) + 5, 7]
    for v in vals:
        w.write(L.REC_KERNEL, name_id=k, value=v)
    poller.poll_once()
    frames = find(store, "cuda_kernels_nanoseconds")[0]["stats"]["frames"]
    assert frames[0]["value"] == sum(vals)


def test_memcpy_memset_sync_graph_and_mode(run):
    run_id, store, poller = run
    w = writer(run_id)
    g = w.name("graph_1")
    for _ in range(3):
        w.write(L.REC_MEMCPY, sub=1, name_id=2 | (3 << 8), value=100, extra=4096)  # HtoD pinned
    w.write(L.REC_MEMCPY, sub=2, name_id=3 | (1 << 8), value=50, extra=10)  # DtoH pageable
    w.write(L.REC_MEMCPY, sub=8, name_id=3 | (3 << 8), value=5, extra=1 << 33)  # DtoD
    w.write(L.REC_MEMSET, sub=3, value=9, extra=512)
    w.write(L.REC_SYNC, sub=4, value=11)
    w.write(L.REC_SYNC, sub=3, value=12)
    w.write(L.REC_SYNC, sub=3, value=13)
    w.write(L.REC_GRAPH, name_id=g, value=1000)
    w.write(L.REC_META, sub=L.META_CUDA_GRAPH_TRACE_MODE, value=1)
    poller.poll_once()
    pinned = find(store, "cuda_memcpy_nanoseconds", host_memory="pinned")[0]["stats"]["frames"]
    assert pinned == [{"name": "host_to_device", "value": 300, "samples": 3}]
    assert find(store, "cuda_memcpy_bytes", kind="host_to_device")[0]["stats"]["total"] == 3 * 4096
    assert find(store, "cuda_memcpy_bytes", kind="device_to_host", host_memory="pageable")[0]["stats"]["total"] == 10
    dtod = find(store, "cuda_memcpy_bytes", kind="device_to_device")
    assert dtod[0]["stats"]["total"] == 1 << 33 and "host_memory" not in dtod[0]["tags"]
    assert find(store, "cuda_memset_bytes", kind="device")[0]["stats"]["total"] == 512
    sync = find(store, "cuda_sync_nanoseconds")[0]["stats"]["frames"]
    assert sync == [{"name": "stream", "value": 25, "samples": 2}, {"name": "context", "value": 11, "samples": 1}]
    assert find(store, "cuda_graphs_nanoseconds")[0]["stats"]["frames"][0] == {"name": "graph_1", "value": 1000,
                                                                              "samples": 1}
    assert find(store, "cuda_graph_trace_mode")[0]["stats"]["value"] == 1


def test_interposer_copies_carry_host_memory_as_cupti_copies_do(run, caplog):
    """--cuda-trace light's copy counts (MEMCPY_COUNT: name_id src | dst << 8, CUPTI's memory kinds) are tagged
    host_memory with the CUPTI collection's values; a record without them (an older interposer, or a side the
    registry could not tell) has no tag, and a memory kind out of range is a bad field."""
    run_id, store, poller = run
    w = writer(run_id, "interpose", L.KIND_INTERPOSE)
    w.write(L.REC_MEMCPY_COUNT, sub=1, name_id=1, value=5, extra=500)  # host_to_device from pageable memory
    w.write(L.REC_MEMCPY_COUNT, sub=1, name_id=2, value=3, extra=300)  # ... from pinned
    w.write(L.REC_MEMCPY_COUNT, sub=1, name_id=2, value=1, extra=100)  # (a later flush's growth)
    w.write(L.REC_MEMCPY_COUNT, sub=2, name_id=5 << 8, value=7, extra=70)  # device_to_host into managed
    w.write(L.REC_MEMCPY_COUNT, sub=9, name_id=2 | 1 << 8, value=2, extra=20)  # host_to_host pinned -> pageable
    w.write(L.REC_MEMCPY_COUNT, sub=1, name_id=0, value=4, extra=40)  # host memory unknown
    w.write(L.REC_MEMCPY_COUNT, sub=8, name_id=0, value=6, extra=60)  # device_to_device
    w.write(L.REC_MEMCPY_COUNT, sub=1, name_id=200, value=9, extra=9)  # a memory kind out of range
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
    calls = {(m["tags"].get("host_memory"), f["name"]): (f["value"], f["samples"])
             for m in find(store, "cuda_memcpy_calls") for f in m["stats"]["frames"]}
    assert calls == {("pageable", "host_to_device"): (5, 5), ("pinned", "host_to_device"): (4, 4),
                     ("managed", "device_to_host"): (7, 7), ("pinned+pageable", "host_to_host"): (2, 2),
                     (None, "host_to_device"): (4, 4), (None, "device_to_device"): (6, 6)}
    nbytes = {(m["tags"].get("host_memory"), m["tags"]["kind"]): m["stats"]["total"]
              for m in find(store, "cuda_memcpy_bytes")}
    assert nbytes == {("pageable", "host_to_device"): 500, ("pinned", "host_to_device"): 400,
                      ("managed", "device_to_host"): 70, ("pinned+pageable", "host_to_host"): 20,
                      (None, "host_to_device"): 40, (None, "device_to_device"): 60}
    assert [m["stats"]["total"] for m in find(store, REJECTED_METRIC, reason="bad_field")] == [1]
    # the CUPTI collection's records of the same copies: the same tags
    c = writer(run_id)
    c.write(L.REC_MEMCPY, sub=1, name_id=2 | 3 << 8, value=10, extra=300)
    c.write(L.REC_MEMCPY, sub=2, name_id=3 | 5 << 8, value=10, extra=70)
    poller.poll_once()
    cupti = {(m["tags"].get("host_memory"), f["name"]) for m in find(store, "cuda_memcpy_nanoseconds")
             for f in m["stats"]["frames"]}
    assert cupti == {("pinned", "host_to_device"), ("managed", "device_to_host")} <= set(calls)


def test_probe_instruments_gauge_counter_histogram_profile(run):
    run_id, store, poller = run
    w = writer(run_id, "probe", L.KIND_PROBE)
    gauge = w.name("gauge\x1fq_depth\x1fqueue\x1ein", L.NAME_INSTRUMENT)
    counter = w.name("counter\x1fitems_total", L.NAME_INSTRUMENT)
    hist = w.name("histogram\x1fbatch_ns", L.NAME_INSTRUMENT)
    prof = w.name("profile\x1fops_ns", L.NAME_INSTRUMENT)
    f1, f2 = w.name("matmul"), w.name("softmax")
    for v in (1.5, 2.5, -3.25):
        w.write(L.REC_GAUGE, name_id=gauge, value=int(np.float64(v).view(np.uint64)))
    for _ in range(10):
        w.write(L.REC_COUNTER, name_id=counter, value=3)
    values = list(range(1, 1001))
    for v in values:
        w.write(L.REC_HISTOGRAM, name_id=hist, value=v)
    for _ in range(4):
        w.write(L.REC_PROFILE, name_id=prof, extra=f1, value=10)
    w.write(L.REC_PROFILE, name_id=prof, extra=f2, value=100)
    poller.poll_once()
    pid = str(os.getpid())
    g = find(store, "q_depth")[0]
    assert g["type"] == "gauge" and g["stats"] == {"value": -3.25}
    assert g["tags"] == {"queue": "in", "process.pid": pid}
    assert find(store, "items_total")[0]["stats"] == {"total": 30}
    h = find(store, "batch_ns")[0]["stats"]
    assert (h["count"], h["sum"], h["min"], h["max"]) == (1000, 500500, 1, 1000)
    assert h["mean"] == 500.5
    for q, exact in (("p50", 500), ("p95", 950), ("p99", 990)):
        assert abs(h[q] - exact) <= exact / 64 + 1
    assert sum(h["counts"]) == 1000
    assert find(store, "ops_ns")[0]["stats"]["frames"] == [
        {"name": "softmax", "value": 100, "samples": 1}, {"name": "matmul", "value": 40, "samples": 4}]


def test_records_of_an_unknown_instrument_are_reported_once(run, caplog):
    run_id, store, poller = run
    w = writer(run_id, "probe", L.KIND_PROBE)
    for _ in range(5):
        w.write(L.REC_COUNTER, name_id=77, value=1)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
        poller.poll_once()
    assert sum("unknown counter instrument 77" in r.message for r in caplog.records) == 1


def test_bad_ring_is_skipped_with_one_log_line_and_others_go_on(run, caplog):
    run_id, store, poller = run
    bad = "/dev/shm/gs-%s-%d-probe" % (run_id, os.getpid())
    with open(os.open(bad, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(b"\x01" * 4096)
    w = writer(run_id)
    k = w.name("k")
    w.write(L.REC_KERNEL, name_id=k, value=5)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
        poller.poll_once()
    assert sum("bad magic" in r.message for r in caplog.records) == 1
    assert find(store, "cuda_kernels_nanoseconds")[0]["stats"]["frames"][0]["value"] == 5
    os.unlink(bad)


def test_dropped_records_are_a_metric(run):
    run_id, store, poller = run
    w = writer(run_id, capacity=64)
    for _ in range(100):
        w.write(L.REC_TEST)
    poller.poll_once()
    assert find(store, "graphsignal_dropped_records", writer="cupti")[0]["stats"]["total"] == 36


def test_ring_of_a_dead_writer_is_drained_then_removed(run):
    run_id, store, poller = run
    w = writer(run_id, pid=DEAD_PID)
    k = w.name("late")
    w.write(L.REC_KERNEL, name_id=k, value=9)
    path = "/dev/shm/gs-%s-%d-cupti" % (run_id, DEAD_PID)
    poller.poll_once()
    assert not os.path.exists(path)
    assert find(store, "cuda_kernels_nanoseconds", **{"process.pid": str(DEAD_PID)})[0]["stats"]["frames"][0][
        "value"] == 9


def test_a_ring_its_live_writer_closed_is_drained_then_removed(run):
    # FLAG_CLOSED: the writer will not write again; its process runs on
    run_id, store, poller = run
    w = writer(run_id)
    k = w.name("last")
    w.write(L.REC_KERNEL, name_id=k, value=11)
    path = "/dev/shm/gs-%s-%d-cupti" % (run_id, os.getpid())
    poller.poll_once()
    assert os.path.exists(path) and len(poller.rings) == 1  # open: kept while its writer lives
    w.write(L.REC_KERNEL, name_id=k, value=4)
    w.close()
    poller.poll_once()
    assert not os.path.exists(path) and poller.rings == {}
    assert find(store, "cuda_kernels_nanoseconds", **{"process.pid": str(os.getpid())})[0]["stats"]["frames"][0][
        "value"] == 15
    assert str(os.getpid()) in store.pids()  # the process has not exited: its series are not folded
    w.unmap()


def test_rings_of_other_runs_are_ignored(run):
    run_id, store, poller = run
    other = Writer("gs-other%s-%d-cupti" % (uuid.uuid4().hex[:6], os.getpid()), kind=L.KIND_CUPTI)
    poller.poll_once()
    assert poller.rings == {}
    other.unmap()
    for f in os.listdir("/dev/shm"):
        if f.startswith("gs-other") and f.endswith("-%d-cupti" % os.getpid()):
            os.unlink("/dev/shm/" + f)


def test_history_snapshot_is_taken_once_a_second():
    # the sidecar's clock takes the history (not the poller)
    store = MetricStore()
    clock = StoreClock(store, history_interval=3600)
    clock.tick()
    clock.tick()
    assert len(store.history) == 1


def test_the_clock_ticks_fast_only_while_someone_reads():
    # unread, the clock sleeps to the next history snapshot (no prerender to
    # do); once /signals is served it ticks every interval to prerender
    store = MetricStore()
    clock = StoreClock(store, interval=0.05, history_interval=1.0)
    t0 = time.monotonic()
    clock.tick()
    assert 0.5 <= clock._delay(t0) <= 1.0
    store.metrics_json()  # what serving /signals does
    assert store.being_read()
    assert clock._delay(time.monotonic()) <= 0.05


def test_group_sums_dense_and_sparse_paths_agree():
    rng = np.random.default_rng(1)
    vals = rng.integers(0, 1 << 40, 10000, dtype=np.uint64)
    for keys in (rng.integers(0, 50, 10000), rng.integers(0, 1 << 40, 10000) % 37 * (1 << 30)):
        keys = keys.astype(np.int64)
        uniq, counts, (sums,) = group_sums(keys, vals)
        for k, c, s in zip(uniq, counts, sums):
            sel = keys == k
            assert c == sel.sum() and int(s) == sum(int(v) for v in vals[sel])


def test_instrument_strings_and_rank_tags():
    assert parse_instrument("histogram\x1fx_ns\x1fa\x1e1\x1fb\x1e") == ("histogram", "x_ns", {"a": "1", "b": ""})
    assert parse_instrument("bogus\x1fx") is None and parse_instrument("gauge") is None
    assert rank_tags({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}) == {
        "rank": "3", "local_rank": "1", "world_size": "8"}
    assert rank_tags({"SLURM_PROCID": "5", "OMPI_COMM_WORLD_SIZE": "16"}) == {"rank": "5", "world_size": "16"}
    assert rank_tags({"RANK": "x"}) == {}


def test_histogram_bins_bound_every_value():
    v = np.array([0, 1, 31, 32, 33, 1000, 123456789, (1 << 53) + 1, (1 << 64) - 1], dtype=np.uint64)
    for x, b in zip(v.tolist(), histo.bin_index(v).tolist()):
        lo, hi = histo.bin_bounds(b)
        assert lo <= x <= hi and (hi - lo) <= max(0, lo // 32)


def test_with_no_ring_the_thread_sleeps_until_one_appears():
    # An idle sidecar's CPU is mostly wakeups: with nothing to drain the poller
    # waits for inotify (or the next history tick), and a ring that appears is
    # still drained at once.
    run_id = "t" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, interval=0.05, retire_interval=60.0)
    poller.start()
    try:
        time.sleep(1.0)
        idle_cycles = poller.cycles
        w = writer(run_id, "probe", L.KIND_PROBE)
        w.write(L.REC_COUNTER, name_id=w.name("counter\x1fwoke_counter", L.NAME_INSTRUMENT), value=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "woke_counter" not in build_signals(store).decode():
            time.sleep(0.01)
        assert "woke_counter" in build_signals(store).decode()
        poller.cleanup_all()
        time.sleep(0.3)  # the ring is gone: back to the long idle wait
    finally:
        poller.stop()
        poller.cleanup_all()
    # 20 a second at interval=0.05 without the idle rule
    assert idle_cycles <= 3, idle_cycles
    # stop() cut the 60 s idle wait short (join gives up after 5 s otherwise)
    assert not poller._thread.is_alive()


def test_files_of_other_runs_do_not_wake_an_idle_poller():
    # before: any file made in /dev/shm (another run's rings, a DataLoader's segments) woke it for a cycle,
    # and the idle test above failed whenever other tests ran beside it
    run_id = "t" + uuid.uuid4().hex[:10]
    poller = Poller(MetricStore(), run_id, interval=0.05, retire_interval=60.0)
    poller.start()
    others = ["/dev/shm/gs-o%s-%d-probe" % (uuid.uuid4().hex[:10], i) for i in range(40)]
    try:
        time.sleep(0.3)
        start = poller.cycles
        for path in others:
            with open(path, "wb"):
                pass
            time.sleep(0.01)
        time.sleep(0.3)
        woken = poller.cycles - start
    finally:
        for path in others:
            os.unlink(path)
        poller.stop()
    assert woken == 0, woken


def test_records_lost_to_a_full_ring_are_said_with_their_count(run, caplog):
    """A writer that outruns the drain loses records: one line with the
    count the first time, no more while it grows within the minute, again
    at the final drain, and one `errors` entry counted each time; not only
    a counter nobody reads (issue 36)."""
    run_id, store, _ = run
    # as the sidecar wires it (process._Poller): entries go to the store through the sidecar's reporter
    poller = Poller(store, run_id, gone_grace=0.0, on_error=lambda msg: store.add_error("warning", msg))
    w = writer(run_id, capacity=1 << 10)
    try:
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for _ in range(3000):
                w.write(L.REC_TEST)
            poller.poll_once()
            for _ in range(2000):
                w.write(L.REC_TEST)
            poller.poll_once()  # more lost within the minute: counted, not said again
            lines = [r.getMessage() for r in caplog.records if "records dropped" in r.getMessage()]
            assert lines == ["graphsignal: %d records dropped so far: a writer outran the drain (its ring was full); "
                             "the numbers are incomplete (graphsignal_dropped_records)" % (3000 - 1024)]
            for _ in range(2000):
                w.write(L.REC_TEST)
            poller.poll_once(final=True)
        lines = [r.getMessage() for r in caplog.records if "records dropped" in r.getMessage()]
        assert len(lines) == 2 and lines[1].startswith("graphsignal: %d records dropped so far" % (
            3000 - 1024 + 2000 - 1024 + 2000 - 1024))
        doc = payload(store)
        (entry,) = [e for e in doc["errors"] if "records were dropped" in e["message"]]
        assert entry["count"] == 2
        (m,) = [m for m in doc["metrics"] if m["name"] == "graphsignal_dropped_records"]
        assert m["stats"]["total"] == 3000 - 1024 + 2000 - 1024 + 2000 - 1024
    finally:
        poller.cleanup_all()
        w.unmap()
