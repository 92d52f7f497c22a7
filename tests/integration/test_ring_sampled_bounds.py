"""The records the CUPTI library's API callbacks write (copies and memsets
counted with sampled durations, syncs counted and timed) are checked like
their exact twins: a device or a kind out of range from an untrusted ring
is counted as bad_field and said once, and never becomes a series."""
import logging
import os
import uuid

import orjson
import pytest

from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.aggregate import MAX_DEVICES, MAX_KIND, REJECTED_METRIC
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore

MEMCPY_HTOD, MEM_PINNED, MEM_DEVICE, SYNC_STREAM = 1, 2, 3, 3  # cupti_activity.h


@pytest.fixture
def ring():
    """A CUPTI ring of this process, its store, and a poller that reads it."""
    run_id = "s" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    w = Writer("%s%s-%d-cupti" % (L.RING_PREFIX, run_id, os.getpid()), kind=L.KIND_CUPTI, capacity=1 << 12,
               strings_size=1 << 12)
    yield w, store, poller
    poller.cleanup_all()


def series(store, name):
    doc = orjson.loads(build_signals(store))
    return [m for m in doc["metrics"] if m["name"] == name]


def rejected(store):
    return {m["tags"]["reason"]: m["stats"]["total"] for m in series(store, REJECTED_METRIC)}


def frames(store, name):
    """{(device, frame): (value, samples)} of a profile's series."""
    return {(m["tags"]["device.cuda_index"], f["name"]): (f["value"], f["samples"])
            for m in series(store, name) for f in m["stats"]["frames"]}


def poll(poller, caplog):
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poller.poll_once()
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_sampled_copies_out_of_range_are_bad_fields(ring, caplog):
    w, store, poller = ring
    mem = MEM_PINNED | MEM_DEVICE << 8
    w.write(L.REC_MEMCPY_SAMPLED, sub=MEMCPY_HTOD, name_id=mem | 3 << 16, value=600, extra=192)
    w.write(L.REC_MEMCPY_SAMPLED, sub=MEMCPY_HTOD, device=MAX_DEVICES, name_id=mem | 2 << 16, value=5, extra=7)
    w.write(L.REC_MEMCPY_SAMPLED, sub=MAX_KIND, name_id=mem | 2 << 16, value=5, extra=7)
    w.write(L.REC_MEMCPY_SAMPLED, sub=MEMCPY_HTOD, name_id=MAX_KIND | MEM_DEVICE << 8 | 1 << 16, value=5, extra=7)
    w.write(L.REC_MEMCPY_SAMPLED, sub=MEMCPY_HTOD, name_id=MEM_PINNED | MAX_KIND << 8 | 1 << 16, value=5, extra=7)
    lines = poll(poller, caplog)
    [cp] = series(store, "cuda_memcpy_nanoseconds")
    assert cp["tags"]["host_memory"] == "pinned" and cp["tags"]["duration"] == "sampled"
    assert frames(store, "cuda_memcpy_nanoseconds") == {("0", "host_to_device"): (600, 3)}
    assert [m["stats"]["total"] for m in series(store, "cuda_memcpy_bytes")] == [192]
    assert rejected(store) == {"bad_field": 4}
    assert len(lines) == 1 and "memcpy kind" in lines[0]


def test_sampled_memsets_out_of_range_are_bad_fields(ring, caplog):
    w, store, poller = ring
    w.write(L.REC_MEMSET_SAMPLED, sub=MEM_DEVICE, name_id=2, value=900, extra=4096)
    w.write(L.REC_MEMSET_SAMPLED, sub=MEM_DEVICE, device=60000, name_id=2, value=5, extra=7)
    w.write(L.REC_MEMSET_SAMPLED, sub=255, name_id=2, value=5, extra=7)
    lines = poll(poller, caplog)
    assert frames(store, "cuda_memset_nanoseconds") == {("0", "device"): (900, 2)}
    assert [m["stats"]["total"] for m in series(store, "cuda_memset_bytes")] == [4096]
    assert rejected(store) == {"bad_field": 2}
    assert len(lines) == 1 and "memory kind" in lines[0]


def test_sampled_syncs_out_of_range_are_bad_fields(ring, caplog):
    w, store, poller = ring
    w.write(L.REC_SYNC_AGG, sub=SYNC_STREAM, name_id=40, value=40_000)
    w.write(L.REC_SYNC_AGG, sub=SYNC_STREAM, device=MAX_DEVICES, name_id=4, value=5)
    w.write(L.REC_SYNC_AGG, sub=MAX_KIND, device=1, name_id=4, value=5)
    lines = poll(poller, caplog)
    assert frames(store, "cuda_sync_nanoseconds") == {("0", "stream"): (40_000, 40)}
    assert rejected(store) == {"bad_field": 2}
    assert len(lines) == 1 and "sync kind" in lines[0]


def test_sampled_records_in_range_at_the_bounds_are_kept(ring, caplog):
    w, store, poller = ring
    last_dev, last_kind = MAX_DEVICES - 1, MAX_KIND - 1
    w.write(L.REC_MEMCPY_SAMPLED, sub=last_kind, device=last_dev, name_id=last_kind | last_kind << 8 | 1 << 16,
            value=5, extra=7)
    w.write(L.REC_MEMSET_SAMPLED, sub=last_kind, device=last_dev, name_id=1, value=6, extra=8)
    w.write(L.REC_SYNC_AGG, sub=last_kind, device=last_dev, name_id=1, value=7)
    assert poll(poller, caplog) == []
    assert rejected(store) == {}
    dev = str(last_dev)
    assert frames(store, "cuda_memcpy_nanoseconds") == {(dev, "kind_%d" % last_kind): (5, 1)}
    assert frames(store, "cuda_memset_nanoseconds") == {(dev, "memory_%d" % last_kind): (6, 1)}
    assert frames(store, "cuda_sync_nanoseconds") == {(dev, "sync_%d" % last_kind): (7, 1)}
