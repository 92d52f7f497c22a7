"""The poller and the names a writer's ring may take: the plain name, the
fallback names after a taken one, and the marker a writer left without a
ring. A writer that has no ring is reported once (an error entry tagged
with its pid and kind) when its marker says so, or when every name its ring
may take is held by something that is not a ring of ours; a taken name
with a free fallback is not such a writer."""
import os

import pytest

from graphsignal.rings import layout as L
from graphsignal.rings import reader
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore

OTHER = 65534
RUN = "n0n0n0n0n0n0"
PID = 4242


def reports(store):
    return [e for e in store.snapshot().errors if "could not create" in e["message"]]


def poller_in(tmp_path):
    return Poller(MetricStore(), RUN, shm_dir=str(tmp_path), gone_grace=0.0)


def name(slot=0, kind="probe"):
    base = "gs-%s-%d-%s" % (RUN, PID, kind)
    return base if slot == 0 else "%s.%s" % (base, slot)


def test_a_marker_says_once_which_writer_has_no_ring_and_why(tmp_path):
    p = poller_in(tmp_path)
    path = tmp_path / name(reader.MARKER)
    path.write_bytes(b"No space left on device within the ring budget\x1b[2J")
    os.chmod(path, 0o600)
    p.poll_once()
    p.poll_once()
    (e,) = reports(p.store)
    assert e["level"] == "error" and e["tags"] == {"process.pid": str(PID), "writer": "probe"}
    assert "process %d could not create its probe ring: No space left" % PID in e["message"]
    assert "\x1b" not in e["message"]  # the marker is the writer's text: control characters escaped
    assert e["count"] == 1
    p.cleanup_all()
    assert not path.exists()


def test_a_marker_that_is_not_ours_reports_nothing(tmp_path):
    p = poller_in(tmp_path)
    path = tmp_path / name(reader.MARKER)
    os.symlink("/etc/passwd", path)
    p.poll_once()
    assert reports(p.store) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another uid")
def test_every_name_taken_is_a_writer_without_a_ring_and_one_free_name_is_not(tmp_path):
    p = poller_in(tmp_path)
    for slot in range(reader.NAME_ATTEMPTS - 1):
        path = tmp_path / name(slot)
        path.write_bytes(b"")
        os.chown(path, OTHER, OTHER)
    os.mkdir(tmp_path / name(0, "cupti"))
    p.poll_once()
    assert reports(p.store) == []  # the last fallback name is still free
    os.symlink("/etc/passwd", tmp_path / name(reader.NAME_ATTEMPTS - 1))
    p.poll_once()
    (e,) = reports(p.store)
    assert e["tags"] == {"process.pid": str(PID), "writer": "probe"}
    assert "all %d names" % reader.NAME_ATTEMPTS in e["message"] and "owned by uid %d" % OTHER in e["message"]
    p.poll_once()
    assert len(reports(p.store)) == 1


def test_a_ring_under_a_fallback_name_is_read_as_its_writers():
    shm = "/dev/shm"
    run = "f" + os.urandom(5).hex()
    p = Poller(MetricStore(), run, shm_dir=shm, gone_grace=0.0)
    taken = "%s/gs-%s-%d-probe" % (shm, run, os.getpid())
    os.mkdir(taken)  # not a ring: the writer passes over it
    try:
        w = Writer(os.path.basename(taken), kind=L.KIND_PROBE, capacity=64)
        assert os.path.exists(taken + ".1")
        c = w.name("counter\x1ffallback_total", kind=L.NAME_INSTRUMENT)
        w.write(L.REC_COUNTER, name_id=c, value=3)
        p.poll_once()
        (st,) = p.rings.values()
        assert (st.pid, st.kind_name) == (os.getpid(), "probe")
        assert p.store.lookup("fallback_total")[0].total == 3
        assert reports(p.store) == []
        w.unmap()
    finally:
        p.cleanup_all()
        os.rmdir(taken)
    assert not os.path.exists(taken + ".1")
