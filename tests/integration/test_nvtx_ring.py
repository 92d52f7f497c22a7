"""The NVTX ring's records as the sidecar reads them, hand-built with the
header's own writer: profile frames the library aggregated
(GRAPHSIGNAL_REC_PROFILE_AGG: frame id | samples << 32, value the sum)
become exact frames and samples; counters are summed; a record naming an
instrument or a frame that was never sent is counted and said once, never
a series of its own."""
import logging
import os
import uuid

import orjson
import pytest

from graphsignal.rings import layout as L
from graphsignal.rings.reader import MAX_NAME_ID, Writer
from graphsignal.sidecar.aggregate import REJECTED_METRIC, UNNAMED
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore

HOST = "profile\x1fnvtx_ranges_nanoseconds\x1fnvtx.domain\x1e%s"
GPU = "profile\x1fnvtx_range_gpu_nanoseconds\x1fnvtx.domain\x1e%s"
MARKS = "counter\x1fnvtx_marks\x1fnvtx.domain\x1e%s"


@pytest.fixture
def ring():
    run_id = "n" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    w = Writer("%s%s-%d-nvtx" % (L.RING_PREFIX, run_id, os.getpid()), kind=L.KIND_NVTX, capacity=1 << 12,
               strings_size=1 << 14)
    yield w, store, poller
    poller.cleanup_all()


def series(store, name):
    return [m for m in orjson.loads(build_signals(store))["metrics"] if m["name"] == name]


def frames(store, name, domain="default"):
    return {f["name"]: (f["value"], f["samples"]) for m in series(store, name)
            if m["tags"]["nvtx.domain"] == domain for f in m["stats"]["frames"]}


def agg(w, inst, frame, ns, samples):
    assert w.write(L.REC_PROFILE_AGG, name_id=inst, value=ns, extra=frame | samples << 32)


def test_aggregated_frames_are_exact_per_domain(ring):
    w, store, poller = ring
    host, gpu, other = w.name(HOST % "default", L.NAME_INSTRUMENT), w.name(GPU % "default", L.NAME_INSTRUMENT), \
        w.name(HOST % "nccl", L.NAME_INSTRUMENT)
    marks = w.name(MARKS % "default", L.NAME_INSTRUMENT)
    step, fwd = w.name("step"), w.name("step/forward")
    agg(w, host, step, 3_000_000, 3)
    agg(w, host, fwd, 2_000_000, 3)
    agg(w, host, step, 1_000_000, 1)  # a later flush of the same frame adds up
    agg(w, gpu, fwd, 700_000, 12)
    agg(w, other, w.name("allreduce"), 5_000, 2)
    w.write(L.REC_COUNTER, name_id=marks, value=4)
    w.write(L.REC_COUNTER, name_id=marks, value=3)
    poller.poll_once()
    assert frames(store, "nvtx_ranges_nanoseconds") == {"step": (4_000_000, 4), "step/forward": (2_000_000, 3)}
    assert frames(store, "nvtx_range_gpu_nanoseconds") == {"step/forward": (700_000, 12)}
    assert frames(store, "nvtx_ranges_nanoseconds", "nccl") == {"allreduce": (5_000, 2)}
    (m,) = series(store, "nvtx_marks")
    assert m["stats"]["total"] == 7 and m["tags"]["process.pid"] == str(os.getpid())


def test_samples_beyond_32_bits_add_up_exactly(ring):
    w, store, poller = ring
    host, f = w.name(HOST % "default", L.NAME_INSTRUMENT), w.name("hot")
    most = (1 << 32) - 1
    agg(w, host, f, 0, most)  # the library splits a count that does not fit one record
    agg(w, host, f, (1 << 62) + 5, 7)
    poller.poll_once()
    assert frames(store, "nvtx_ranges_nanoseconds") == {"hot": ((1 << 62) + 5, most + 7)}


def test_records_naming_what_was_never_sent_are_counted_once(ring, caplog):
    w, store, poller = ring
    host = w.name(HOST % "default", L.NAME_INSTRUMENT)
    agg(w, host, 999, 10, 2)  # a frame id never sent
    agg(w, host, MAX_NAME_ID + 5, 10, 1)  # no writer hands out such an id
    agg(w, 777, w.name("x"), 10, 4)  # an instrument never registered
    agg(w, 777, w.name("y"), 10, 4)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
        poller.poll_once()
    assert frames(store, "nvtx_ranges_nanoseconds") == {UNNAMED: (20, 3)}
    poller._publish_ring_counters(next(iter(poller.rings.values())))
    rejected = {m["tags"]["reason"]: m["stats"]["total"] for m in series(store, REJECTED_METRIC)}
    assert rejected == {"unknown_name": 3, "unknown_instrument": 8}
    lines = [r.getMessage() for r in caplog.records]
    assert sum("unknown_instrument" in ln for ln in lines) == 1 and sum("unknown_name" in ln for ln in lines) == 1
