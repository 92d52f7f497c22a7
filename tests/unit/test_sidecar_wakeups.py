"""The sidecar's threads wake for work, not to look at the clock: the
/signals server sleeps until a request comes or stop() wakes it (it used
to wake ten times a second to look for a stop)."""
import sys
import time
import urllib.request

import pytest

from graphsignal.sidecar import server as server_mod
from graphsignal.sidecar.server import ServerThread, make_app
from graphsignal.sidecar.store import MetricStore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _sleeps(tid):
    """Voluntary context switches of thread tid of this process: the times
    it slept and woke."""
    with open("/proc/self/task/%d/status" % tid) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_the_server_sleeps_until_a_request_or_stop(monkeypatch):
    # a stop that waited for the loop's own look would hang this long: stop() must wake it
    monkeypatch.setattr(server_mod, "POLL_INTERVAL", 60.0)
    srv = ServerThread(make_app(MetricStore()), "127.0.0.1", 0)
    srv.start()
    assert srv.bound.wait(10) and srv.failed is None
    time.sleep(0.3)  # into its wait
    before = _sleeps(srv.native_id)
    time.sleep(1.0)
    woke = _sleeps(srv.native_id) - before
    assert woke <= 1, "the serving thread woke %d times in a second with nothing to do" % woke
    with urllib.request.urlopen("http://127.0.0.1:%d/health" % srv.port, timeout=10) as r:
        assert r.status == 200
    srv.stop()
    assert not srv.is_alive()


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_stop_wakes_a_server_bound_to_every_address(monkeypatch, host):
    monkeypatch.setattr(server_mod, "POLL_INTERVAL", 60.0)
    try:
        srv = ServerThread(make_app(MetricStore()), host, 0)
        srv.start()
        assert srv.bound.wait(10)
    except OSError:
        pytest.skip("no %s here" % host)
    if srv.failed:
        pytest.skip(srv.failed)
    srv.stop()
    assert not srv.is_alive()


def test_the_clock_leaves_prerendering_to_another_that_does_it():
    """While /signals is read, the clock prerenders every interval; while
    something else prerenders, the clock sleeps to the next history
    snapshot; when that stops, the clock's next tick takes it back."""
    from graphsignal.sidecar.clock import StoreClock

    store = MetricStore()
    store.metrics_json()  # what serving /signals does
    clock = StoreClock(store, interval=0.05, history_interval=1.0)
    clock.tick()
    assert clock._delay(time.monotonic()) <= 0.05  # read, and no one else prerenders
    store.prerender()  # someone else
    clock.tick()
    assert 0.5 <= clock._delay(time.monotonic()) <= 1.0
    clock.tick()  # a second without the others' prerenders
    assert clock._delay(time.monotonic()) <= 0.05


def test_the_poller_leaves_serialization_to_the_clock():
    """Drained records never cost the poller JSON, even while /signals is
    read: the drain's time is what keeps the rings from filling (issue 36)."""
    import os
    import uuid

    from graphsignal.rings.reader import Writer
    from graphsignal.rings import layout as L
    from graphsignal.sidecar.poller import Poller

    run_id = "wk" + uuid.uuid4().hex[:8]
    store = MetricStore()
    store.metrics_json()  # read: prerender would have work to do
    poller = Poller(store, run_id)
    w = Writer("gs-%s-%d-cupti" % (run_id, os.getpid()), kind=L.KIND_CUPTI, capacity=1 << 12)
    try:
        poller.start()
        k = w.name("k")
        before = store.prerenders
        w.write(L.REC_KERNEL, name_id=k, value=4)
        deadline = time.monotonic() + 10
        while poller.records_total < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert poller.records_total >= 2  # the name and the kernel
        time.sleep(0.1)  # a few more cycles
        assert store.prerenders == before
    finally:
        poller.stop()
        poller.cleanup_all()
        w.unmap()


def test_a_poller_that_does_not_stop_is_left_alone_not_raced(monkeypatch, caplog):
    """At SCHED_IDLE on a busy host the poller's thread may not come round
    to its halt in time: stop() then says so and neither drains nor unmaps
    the rings under it (a second drain would race it, an unmapped ring
    would crash it)."""
    import threading
    import uuid

    from graphsignal.sidecar.poller import Poller

    store = MetricStore()
    poller = Poller(store, "st" + uuid.uuid4().hex[:8])
    poller.STOP_WAIT = 0.2
    inside, release = threading.Event(), threading.Event()
    calls = []
    real = poller.poll_once

    def stuck(final=False):
        calls.append((threading.current_thread().name, final))
        if not final and threading.current_thread().name == "graphsignal-poller":
            inside.set()
            release.wait(10)  # a cycle that cannot finish for now
        real(final)

    monkeypatch.setattr(poller, "poll_once", stuck)
    poller.start()
    assert inside.wait(10)
    with caplog.at_level("WARNING", logger="graphsignal"):
        poller.stop(final=True)
    assert [c for c in calls if c[1]] == []  # no final drain beside the running cycle
    assert any("did not stop within 0.2 s" in r.getMessage() for r in caplog.records)
    release.set()
    poller._thread.join(10)
    assert not poller._thread.is_alive()
    poller.cleanup_all()
