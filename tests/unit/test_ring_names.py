"""The poller and the names a writer's ring may take: the plain name, the
fallback names after a taken one, and the marker a writer left without a
ring. A writer that has no ring is reported once (an error entry tagged
with its pid and kind) when its marker says so, or when every name its ring
may take is held by something that is not a ring of ours; a taken name
with a free fallback is not such a writer."""
import os
import subprocess
import time

import pytest

from graphsignal.rings import layout as L
from graphsignal.rings import reader
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore

OTHER = 65534
RUN = "n0n0n0n0n0n0"
PID = (1 << 22) + 1  # above any pid_max: never a live process (of any uid)


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


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another uid")


def _take(tmp_path, pid, kind="probe", marker=False):
    base = "gs-%s-%d-%s" % (RUN, pid, kind)
    names = [base] + ["%s.%d" % (base, i) for i in range(1, reader.NAME_ATTEMPTS)] + ([base + ".none"] if marker else [])
    for n in names:
        (tmp_path / n).write_bytes(b"")
        os.chown(str(tmp_path / n), OTHER, OTHER)


@as_root
def test_thousands_of_names_another_user_made_cost_a_few_lines_and_no_real_error(tmp_path, caplog):
    # before: 20,000 names of uid 65534 gave 10,000 lines on the workload's stderr and pushed real errors out
    p = poller_in(tmp_path)
    p.store.add_error("warning", "a real warning", tags={"source": "test"})
    for pid in range(1000, 3000):
        path = tmp_path / ("gs-%s-%d-probe" % (RUN, pid))
        path.write_bytes(b"")
        os.chown(str(path), OTHER, OTHER)
    with caplog.at_level("WARNING", logger="graphsignal"):
        p.poll_once()
        p.poll_once()
    said = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert len(said) == Poller.MAX_REFUSED_SAID + 1, len(said)
    errors = p.store.snapshot().errors
    assert any(e["message"] == "a real warning" for e in errors)
    assert len(errors) <= Poller.MAX_REFUSED_SAID + 2
    (c,) = [m for m in p.store.snapshot().series if m.name == "graphsignal_refused_ring_names"]
    assert c.stats()["total"] == 2000


@as_root
def test_writers_without_a_ring_beyond_a_few_share_one_line_and_are_counted(tmp_path, caplog):
    p = poller_in(tmp_path)
    pids = [PID + 10 + i for i in range(40)]  # never live
    for pid in pids:
        _take(tmp_path, pid, marker=True)
    with caplog.at_level("WARNING", logger="graphsignal"):
        p.poll_once()
    assert len(reports(p.store)) == Poller.MAX_NO_RING_SAID
    assert len([r for r in caplog.records if "more writers could not create" in r.getMessage()]) == 1
    (c,) = [m for m in p.store.snapshot().series if m.name == "graphsignal_writers_without_ring"]
    assert c.stats()["total"] == len(pids)


@as_root
def test_names_taken_for_a_live_process_of_another_uid_say_nothing_of_our_writers(tmp_path):
    other = subprocess.Popen(["sleep", "60"], user=OTHER, group=OTHER)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.stat("/proc/%d" % other.pid).st_uid != OTHER:
            time.sleep(0.01)
        _take(tmp_path, other.pid, marker=True)
        p = poller_in(tmp_path)
        p.poll_once()
        assert reports(p.store) == []  # its "writer" could never have made a ring of ours
    finally:
        other.kill()
        other.wait()
