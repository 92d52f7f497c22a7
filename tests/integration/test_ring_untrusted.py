"""Rings are untrusted input: whatever a ring file holds or becomes (a buggy
workload, another process, another user), the sidecar validates it once,
then trusts only its own copies, drops a ring that stops making sense with
one line, counts what it refuses, and allocates within bounds."""
import logging
import os
import struct
import tracemalloc
import uuid

import numpy as np
import orjson
import pytest
from werkzeug.test import Client

from support.cbuild import compile_c
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.aggregate import REJECTED_METRIC
from graphsignal.sidecar.poller import Poller
from graphsignal.rings import layout as L
from graphsignal.rings import reader
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.server import make_app
from graphsignal.sidecar.store import MetricStore
from support.gsrun import metrics, quiet_env, run_wrapped

SHM = "/dev/shm"
NOBODY = 65534


@pytest.fixture
def run():
    run_id = "u" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    yield run_id, store, poller
    poller.cleanup_all()


def ring_path(run_id, kind="probe", pid=None):
    return "%s/gs-%s-%d-%s" % (SHM, run_id, pid or os.getpid(), kind)


def writer(run_id, kind="probe", capacity=1 << 16, strings_size=1 << 16):
    return Writer(os.path.basename(ring_path(run_id, kind)), kind=L.KIND_PROBE if kind == "probe" else L.KIND_CUPTI,
                  capacity=capacity, strings_size=strings_size)


def instrument(w, type_, name):
    return w.name("%s\x1f%s" % (type_, name), kind=L.NAME_INSTRUMENT)


def poke(path, field, fmt, value):
    with open(path, "r+b") as f:
        f.seek(L.HEADER_OFFSETS[field])
        f.write(struct.pack(fmt, value))


def find(store, name, **tags):
    doc = orjson.loads(build_signals(store))
    return [m for m in doc["metrics"] if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# -- the header after attach ----------------------------------------------------------
def test_header_rewritten_after_attach_drops_the_ring_with_one_line(run, caplog):
    run_id, store, poller = run
    w = writer(run_id, capacity=64, strings_size=4096)
    c = instrument(w, "counter", "hostile_total")
    for _ in range(300):  # the read index goes round the ring: beyond the map once masked by a bogus capacity
        for _ in range(50):
            w.write(L.REC_COUNTER, name_id=c, value=1)
        poller.poll_once()
    path = ring_path(run_id)
    # what the issue reproduced: capacity 2^40, indices 2^34 (the sidecar died of SIGSEGV)
    poke(path, "capacity", "<Q", 1 << 40)
    poke(path, "strings_offset", "<Q", 1 << 45)
    poke(path, "write_index", "<Q", 1 << 34)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        for _ in range(3):
            poller.poll_once()
    assert poller.rings == {}
    lines = warnings(caplog)
    assert len(lines) == 1 and "no longer makes sense" in lines[0]
    assert find(store, "hostile_total")[0]["stats"]["total"] == 15000  # what it delivered before stays
    assert os.path.exists(path)  # never unlinked by the poller while it runs; cleanup_all does at exit


def test_a_rewritten_capacity_alone_is_ignored_by_the_reader(run):
    run_id, store, poller = run
    w = writer(run_id, capacity=64)
    c = instrument(w, "counter", "steady_total")
    path = ring_path(run_id)
    poller.poll_once()  # attached and validated
    for _ in range(10):
        poke(path, "capacity", "<Q", 64)  # the writer masks with the header's capacity: give it back
        for _ in range(50):
            w.write(L.REC_COUNTER, name_id=c, value=1)
        poke(path, "capacity", "<Q", 1 << 40)  # the reader keeps its own copy (64)
        poller.poll_once()
    assert find(store, "steady_total")[0]["stats"]["total"] == 500
    assert len(poller.rings) == 1
    poke(path, "capacity", "<Q", 64)


def test_a_ring_cut_short_under_the_reader_is_dropped(run, caplog):
    run_id, store, poller = run
    w = writer(run_id)
    c = instrument(w, "counter", "cut_total")
    w.write(L.REC_COUNTER, name_id=c, value=1)
    poller.poll_once()
    w.write(L.REC_COUNTER, name_id=c, value=1)
    os.truncate(ring_path(run_id), 4096)  # reading the slots now would be SIGBUS
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
    assert poller.rings == {} and any("cut from" in m for m in warnings(caplog))


def test_header_rewritten_by_the_workload_under_graphsignal_run():
    exe = compile_c("ring_vandal.c")
    # a small ring, so that the read index has gone round it before the header is rewritten
    proc, signals = run_wrapped([exe], env=quiet_env(GRAPHSIGNAL_RING_CAPACITY=256))
    # before: the sidecar died of SIGSEGV (rc 139) and took the workload's stdout with it
    assert proc.returncode == 0
    assert proc.stdout.decode().count("after the vandalism\n") == 2000
    total = metrics(signals, "vandal_events_total")[0]["stats"]["total"]
    dropped = metrics(signals, "graphsignal_dropped_records")[0]["stats"]["total"]
    assert total + dropped == 500
    assert sum("no longer makes sense" in e["message"] for e in signals["errors"]) == 1


# -- the file itself ------------------------------------------------------------------
def test_a_world_writable_ring_is_refused(run, caplog):
    run_id, store, poller = run
    w = writer(run_id)
    c = instrument(w, "counter", "injected_total")
    w.write(L.REC_COUNTER, name_id=c, value=999_999)
    os.chmod(ring_path(run_id), 0o666)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
        poller.poll_once()
    assert poller.rings == {} and not find(store, "injected_total")
    lines = warnings(caplog)
    assert len(lines) == 1 and "mode 666" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid")
def test_a_ring_of_another_uid_is_refused(run, caplog):
    run_id, store, poller = run
    w = writer(run_id)
    c = instrument(w, "counter", "injected_total")
    w.write(L.REC_COUNTER, name_id=c, value=999_999)
    os.chown(ring_path(run_id), NOBODY, NOBODY)  # an unprivileged user's file, mode 0600
    try:
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            poller.poll_once()
        assert poller.rings == {} and not find(store, "injected_total")
        assert any("owned by uid %d" % NOBODY in m for m in warnings(caplog))
        poller.cleanup_all()
        assert os.lstat(ring_path(run_id)).st_uid == NOBODY  # root's cleanup removes only its own files
    finally:
        w.unmap()
        os.unlink(ring_path(run_id))


def test_a_symlink_is_not_followed_and_its_target_is_not_written(run, caplog):
    run_id, store, poller = run
    target = "gs-elsewhere%s-%d-probe" % (uuid.uuid4().hex[:6], os.getpid())
    w = Writer(target, kind=L.KIND_PROBE, capacity=64)
    try:
        c = instrument(w, "counter", "elsewhere_total")
        w.write(L.REC_COUNTER, name_id=c, value=3)
        os.symlink(SHM + "/" + target, ring_path(run_id))
        before = open(SHM + "/" + target, "rb").read(256)
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            poller.poll_once()
        assert poller.rings == {} and not find(store, "elsewhere_total")
        assert any("symlink" in m for m in warnings(caplog))
        assert open(SHM + "/" + target, "rb").read(256) == before  # its read index is untouched
    finally:
        w.unmap()
        os.unlink(SHM + "/" + target)


def test_a_sparse_ring_is_refused(run, caplog):
    run_id, store, poller = run
    model = "gs-model%s-%d-probe" % (uuid.uuid4().hex[:6], os.getpid())
    w = Writer(model, kind=L.KIND_PROBE, capacity=1 << 12)
    header, size = bytes(L.ffi.buffer(L.ffi.cast("char*", w.h), L.HEADER_SIZE)), w.size
    w.unmap()
    os.unlink(SHM + "/" + model)
    # a valid header on a file that reserves nothing: on a full /dev/shm, touching a page is a SIGBUS
    fd = os.open(ring_path(run_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    os.pwrite(fd, header, 0)
    os.close(fd)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
    assert poller.rings == {} and any("not reserved" in m for m in warnings(caplog))


def test_rings_made_by_the_header_are_reserved_and_0600_whatever_the_umask(run):
    run_id, store, poller = run
    old = os.umask(0o277)
    try:
        w = writer(run_id, capacity=1 << 12)
    finally:
        os.umask(old)
    st = os.stat(ring_path(run_id))
    assert st.st_mode & 0o777 == 0o600 and st.st_blocks * 512 >= st.st_size
    poller.poll_once()
    assert len(poller.rings) == 1
    w.unmap()


# -- what a ring can make the reader do ----------------------------------------------
def test_unknown_name_ids_are_counted_and_logged_once_per_ring(run, caplog):
    run_id, store, poller = run
    w = writer(run_id, capacity=1 << 16)
    sent = 0
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        while sent < 199_000:  # before: one warning line each on the workload's stderr
            for _ in range(min(60_000, 199_000 - sent)):
                w.write(L.REC_COUNTER, name_id=1000 + sent, value=1)
                sent += 1
            poller.poll_once()
    lines = warnings(caplog)
    assert len(lines) == 1 and "unknown counter instrument 1000" in lines[0]
    rejected = find(store, REJECTED_METRIC, reason="unknown_instrument")
    assert rejected[0]["stats"]["total"] == 199_000


def test_a_flood_of_names_is_capped_and_counted(run, caplog, monkeypatch):
    monkeypatch.setattr(reader, "MAX_NAMES", 5000)
    run_id, store, poller = run
    w = writer(run_id, capacity=1 << 16)
    w.name("abcd")  # bytes at offset 0 that every flooding record points at
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        for start in range(2, 40_002, 20_000):
            for i in range(start, start + 20_000):
                w.write(L.REC_NAME, name_id=i, value=0, extra=4)
            poller.poll_once()
    st = next(iter(poller.rings.values()))
    assert len(st.ring.names) == 5000
    assert find(store, REJECTED_METRIC, reason="names_over_cap")[0]["stats"]["total"] == 40_001 - 5000
    assert len(warnings(caplog)) == 1


def test_name_records_cannot_make_the_reader_keep_more_than_the_string_area(run):
    run_id, store, poller = run
    w = writer(run_id, capacity=1 << 12, strings_size=1 << 16)
    w.name("x" * 60000)  # a legitimate long name: 60000 of the 65536 string bytes
    for i in range(100, 300):  # the same long bytes under 200 more ids: 12 MB of names from a 64 KB area
        w.write(L.REC_NAME, name_id=i, value=0, extra=60000)
    poller.poll_once()
    st = next(iter(poller.rings.values()))
    assert st.ring.name_bytes <= 1 << 16 and len(st.ring.names) == 1
    assert find(store, REJECTED_METRIC, reason="names_over_cap")[0]["stats"]["total"] == 200


def test_bad_types_and_out_of_range_fields_are_counted_and_the_rest_aggregated(run, caplog):
    run_id, store, poller = run
    w = writer(run_id, kind="cupti")
    k = w.name("_Z1kv")
    w.write(L.REC_KERNEL, name_id=k, value=10)
    w.write(L.REC_KERNEL, name_id=k, device=60000, value=10)  # no process has 60000 GPUs
    w.write(77, value=1)  # no such record type
    w.write(L.REC_MEMCPY, sub=1, name_id=0xFFFF, value=5, extra=100)  # memory kinds out of range
    w.write(L.REC_KERNEL, name_id=4242, value=3)  # a name never sent: counted, kept as "(unnamed)"
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
    frames = {f["name"]: f["value"] for f in find(store, "cuda_kernels_nanoseconds")[0]["stats"]["frames"]}
    assert frames == {"_Z1kv": 10, "(unnamed)": 3}
    by_reason = {m["tags"]["reason"]: m["stats"]["total"] for m in find(store, REJECTED_METRIC)}
    assert by_reason == {"bad_field": 2, "bad_type": 1, "unknown_name": 1}
    assert len(warnings(caplog)) == 3  # one per reason, this ring


def test_histogram_agg_bin_beyond_the_bins_is_a_bad_field_not_a_crash(run):
    run_id, store, poller = run
    w = writer(run_id)
    h = instrument(w, "histogram", "agg_nanoseconds")
    w.write(L.REC_HISTOGRAM_AGG, sub=L.AGG_BIN, name_id=h, value=1, extra=1 << 63)
    w.write(L.REC_HISTOGRAM_AGG, sub=L.AGG_BIN, name_id=h, value=2, extra=40)
    w.write(L.REC_HISTOGRAM_AGG, sub=L.AGG_MIN_MAX, name_id=h, value=40, extra=40)
    w.write(L.REC_HISTOGRAM_AGG, sub=L.AGG_COUNT_SUM, name_id=h, value=2, extra=80)
    poller.poll_once()
    s = find(store, "agg_nanoseconds")[0]["stats"]
    assert s["count"] == 2 and s["sum"] == 80
    assert find(store, REJECTED_METRIC, reason="bad_field")[0]["stats"]["total"] == 1


def test_many_histograms_in_one_batch_never_make_a_dense_bins_matrix(run):
    run_id, store, poller = run
    store.max_series = 100_000
    w = writer(run_id, capacity=1 << 17, strings_size=4 << 20)
    ids = [instrument(w, "histogram", "h%d_nanoseconds" % i) for i in range(20_000)]
    for i, h in enumerate(ids):
        w.write(L.REC_HISTOGRAM, name_id=h, value=1 + i)
    tracemalloc.start()
    try:
        poller.poll_once()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # a dense instruments x bins matrix would be 20,000 x 1920 x 8 bytes = 307 MB at once;
    # each histogram's own dense bins (15 KB) are what the store keeps
    assert peak < 20_000 * 15_360 * 1.5
    assert len(find(store, "h19999_nanoseconds")) == 1


# -- numbers ----------------------------------------------------------------------------
def test_sums_beyond_64_bits_are_exact_and_the_payload_always_serializes(run, tmp_path):
    run_id, store, poller = run
    w = writer(run_id)
    h = instrument(w, "histogram", "huge_nanoseconds")
    c = instrument(w, "counter", "huge_total")
    p = instrument(w, "profile", "huge_profile_nanoseconds")
    f = w.name("frame")
    big = (1 << 64) - 1000
    for _ in range(2):  # one batch: the uint64 sum used to wrap to 18446744073709549616
        w.write(L.REC_HISTOGRAM, name_id=h, value=big)
        w.write(L.REC_COUNTER, name_id=c, value=big)
        w.write(L.REC_PROFILE, name_id=p, extra=f, value=big)
    poller.poll_once()
    hs = store.lookup("huge_nanoseconds")[0]
    assert hs.sum == 2 * big == 36893488147419101232 and hs.count == 2
    assert store.lookup("huge_total")[0].total == 2 * big
    assert store.lookup("huge_profile_nanoseconds")[0].frames["frame"] == (2 * big, 2)
    client = Client(make_app(store))
    r = client.get("/signals")
    assert r.status_code == 200  # before: HTTP 500 for the rest of the run
    doc = orjson.loads(r.data)
    got = [m for m in doc["metrics"] if m["name"] == "huge_nanoseconds"][0]["stats"]
    assert got["sum"] == pytest.approx(float(2 * big)) and got["count"] == 2 and got["max"] == big
    assert [m for m in doc["metrics"] if m["name"] == "huge_total"][0]["stats"]["total"] == float(2 * big)


def test_exact_bincount_beyond_64_bits():
    from graphsignal.sidecar.grouping import group_sums

    keys = np.array([0, 0, 1, 0], dtype=np.int64)
    vals = np.array([(1 << 64) - 1] * 3 + [5], dtype=np.uint64)
    uniq, counts, (sums,) = group_sums(keys, vals)
    assert sums.tolist() == [2 * ((1 << 64) - 1) + 5, (1 << 64) - 1] and counts.tolist() == [3, 1]
