"""The ring protocol against a simple model (hypothesis): random
interleavings of writes, reserves, out-of-order commits and drains across
wrap-around; full-ring drops counted exactly; an uncommitted slot stops the
reader until it is committed; bad headers are refused."""
import os
import struct
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsignal.rings import layout as L
from graphsignal.rings.reader import Ring, RingError, Writer


@pytest.fixture
def ring_name():
    name = "gs-test%s-%d-test" % (uuid.uuid4().hex[:8], os.getpid())
    yield name
    try:
        os.unlink("/dev/shm/" + name)
    except FileNotFoundError:
        pass


def _pair(name, capacity):
    w = Writer(name, capacity=capacity)
    r = Ring("/dev/shm/" + name)
    return w, r


ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 40)),
        st.tuples(st.just("reserve"), st.just(0)),
        st.tuples(st.just("commit"), st.integers(0, 7)),
        st.tuples(st.just("drain"), st.integers(1, 50)),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, cap_bits=st.integers(2, 5))
def test_ring_matches_model_under_random_interleavings(ops, cap_bits):
    name = "gs-hyp%s-%d-test" % (uuid.uuid4().hex[:8], os.getpid())
    cap = 1 << cap_bits
    w, r = _pair(name, cap)
    try:
        next_value = 0
        # model: slots in index order; each is [value, committed]
        model = []
        model_read = 0
        dropped = 0
        pending = []  # (slot, index, value) reserved but not committed
        drained = []
        for op, arg in ops:
            if op == "write":
                for _ in range(arg):
                    ok = w.write(L.REC_TEST, value=next_value)
                    if len(model) - model_read >= cap:
                        assert not ok
                        dropped += 1
                    else:
                        assert ok
                        model.append([next_value, True])
                    next_value += 1
            elif op == "reserve":
                slot, idx = w.reserve()
                if len(model) - model_read >= cap:
                    assert slot is None
                    dropped += 1
                else:
                    assert idx == len(model)
                    model.append([next_value, False])
                    pending.append((slot, idx, next_value))
                    next_value += 1
            elif op == "commit" and pending:
                slot, idx, value = pending.pop(arg % len(pending))
                w.fill_commit(slot, idx, L.REC_TEST, value=value)
                model[idx][1] = True
            elif op == "drain":
                got = r.drain(max_records=arg)
                expect = []
                i = model_read
                while i < len(model) and i < model_read + arg and model[i][1]:
                    expect.append(model[i][0])
                    i += 1
                assert got["value"].tolist() == expect
                assert (got["type"] == L.REC_TEST).all()
                model_read = i
                drained.extend(expect)
            assert r.dropped == dropped
        # commit what is left, then everything drains in order
        for slot, idx, value in pending:
            w.fill_commit(slot, idx, L.REC_TEST, value=value)
            model[idx][1] = True
        rest = r.drain()
        assert rest["value"].tolist() == [v for v, _ in model[model_read:]]
        assert drained + rest["value"].tolist() == [v for v, _ in model]
    finally:
        r.close()
        r.unlink()
        w.unmap()


def test_full_ring_drops_are_counted_exactly(ring_name):
    w, r = _pair(ring_name, 16)
    results = [w.write(L.REC_TEST, value=i) for i in range(100)]
    assert sum(results) == 16
    assert r.dropped == 84
    assert r.drain()["value"].tolist() == list(range(16))
    assert w.write(L.REC_TEST, value=1000) == 1
    assert r.drain()["value"].tolist() == [1000]
    assert r.dropped == 84
    r.close()


def _read_hint(r):
    """The writers' copy of the read index (probe.h's read_hint, on the
    write index's cache line)."""
    return struct.unpack_from("<Q", r._mm, L.HEADER_OFFSETS["write_index"] + 8)[0]


def test_ring_filled_to_the_brim_with_a_slow_reader_loses_nothing(ring_name):
    """The writer reserves against its cached copy of the read index and
    refreshes it only when the ring looks full: after each slow drain it
    must fill exactly the freed slots (a stale copy refusing one is a lost
    record), refuse exactly the one past the brim, and never hold a copy
    ahead of the reader."""
    cap = 64
    w, r = _pair(ring_name, cap)
    try:
        value = 0
        refused = 0
        seen = []
        for step in range(3 * cap):
            room = cap - r.pending()
            for _ in range(room):
                assert w.write(L.REC_TEST, value=value) == 1, "a free slot was refused"
                value += 1
            assert r.pending() == cap
            assert w.write(L.REC_TEST, value=-1 & 0xFFFFFFFFFFFFFFFF) == 0
            refused += 1
            assert r.dropped == refused
            assert _read_hint(r) <= r.read_index
            if room:
                assert _read_hint(r) == r.read_index  # refreshed when it looked full, not before
            seen.extend(r.drain(max_records=1 + step % cap)["value"].tolist())  # a slow reader: a few at a time
        seen.extend(r.drain()["value"].tolist())
        assert seen == list(range(value))
        assert value > 50 * cap  # many times round the ring
    finally:
        r.close()


def test_uncommitted_slot_stops_reader_until_committed(ring_name):
    w, r = _pair(ring_name, 8)
    w.write(L.REC_TEST, value=1)
    slot, idx = w.reserve()
    w.write(L.REC_TEST, value=3)
    assert r.drain()["value"].tolist() == [1]
    assert r.drain().size == 0  # slot 1 reserved, not committed
    w.fill_commit(slot, idx, L.REC_TEST, value=2)
    assert r.drain()["value"].tolist() == [2, 3]
    r.close()


def test_slot_abandoned_by_a_dead_writer_thread_is_skipped_after_timeout(ring_name):
    now = [0.0]
    w = Writer(ring_name, capacity=8)
    r = Ring("/dev/shm/" + ring_name, stall_timeout=5.0, clock=lambda: now[0])
    w.reserve()  # never committed
    w.write(L.REC_TEST, value=7)
    assert r.drain().size == 0
    now[0] = 4.9
    assert r.drain().size == 0
    now[0] = 5.0
    assert r.drain().size == 0  # skips the abandoned slot
    assert r.skipped == 1
    assert r.drain()["value"].tolist() == [7]
    r.close()


def test_wraparound_keeps_order_across_the_end_of_the_slots(ring_name):
    w, r = _pair(ring_name, 8)
    seen = []
    for round_ in range(10):
        for i in range(5):
            assert w.write(L.REC_TEST, value=round_ * 5 + i)
        seen.extend(r.drain()["value"].tolist())
    assert seen == list(range(50))
    r.close()


def test_names_travel_through_the_string_area(ring_name):
    w, r = _pair(ring_name, 64)
    long_name = "_ZN" + "x" * 5000
    ids = [w.name("kernel_a"), w.name(long_name), w.name("ünïcode")]
    recs = r.drain()
    learned = r.learn_names(recs)
    assert [(i, s) for i, _, s in learned] == list(zip(ids, ["kernel_a", long_name, "ünïcode"]))
    r.close()


def _corrupt(path, offset, fmt, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(fmt, value))


@pytest.mark.parametrize("field,fmt,value,needle", [
    ("magic", "<Q", 0x1234, "bad magic"),
    ("version", "<I", 99, "ABI version 99"),
    ("record_size", "<I", 64, "header/record size"),
    ("header_size", "<I", 128, "header/record size"),
    ("capacity", "<Q", 12, "not a power of two"),
    ("capacity", "<Q", 1 << 20, "too small"),
    ("capacity", "<Q", 1 << 40, "not a power of two up to"),
])
def test_bad_headers_are_refused_with_a_precise_reason(ring_name, field, fmt, value, needle):
    w = Writer(ring_name, capacity=16)
    w.unmap()
    path = "/dev/shm/" + ring_name
    _corrupt(path, L.HEADER_OFFSETS[field], fmt, value)
    with pytest.raises(RingError, match=needle):
        Ring(path)


def test_truncated_segment_is_refused(ring_name):
    path = "/dev/shm/" + ring_name
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(b"\0" * 100)
    with pytest.raises(RingError, match="smaller than a ring header"):
        Ring(path)


def test_numpy_dtype_matches_the_c_layout():
    L.check_layout()  # raises on any mismatch
    assert L.RECORD_DTYPE.itemsize == 32 and L.HEADER_DTYPE.itemsize == 256
    assert np.dtype(L.RECORD_DTYPE).fields["value"][1] == 16
