"""The periodic driver of the uploader and the OTLP exporter
(graphsignal.sidecar.periodic): a snapshot handed to the exporter on each
due tick and only then, the final export within the deadline at stop, and
a step that raises said once without stopping the driver."""
import logging
import threading
import time

from graphsignal.sidecar.periodic import FINAL_DEADLINE, PeriodicDriver, final_timeout


class FakeExporter:
    name = "graphsignal-test-export"
    what = "test export"
    tick = 0.001

    def __init__(self, due_every=1, fail_first=0):
        self.looks = 0
        self.exported = []
        self.finals = []
        self.due_every = due_every
        self.fail_first = fail_first
        self.enough = threading.Event()

    def due(self):
        self.looks += 1
        return self.looks % self.due_every == 0

    def snapshot(self):
        return ("snapshot", self.looks)

    def export(self, snapshot):
        if self.fail_first:
            self.fail_first -= 1
            raise RuntimeError("a bug")
        self.exported.append(snapshot)
        if len(self.exported) >= 5:
            self.enough.set()
        return True

    def shutdown(self, deadline):
        self.finals.append(deadline)
        return True


def test_a_snapshot_goes_to_the_exporter_on_due_ticks_only_and_the_final_export_at_stop():
    ex = FakeExporter(due_every=3)
    d = PeriodicDriver(ex)
    assert d.name == "graphsignal-test-export" and d.daemon
    d.start()
    assert ex.enough.wait(30)
    t0 = time.monotonic()
    d.stop(FINAL_DEADLINE)
    assert not d.is_alive()
    assert all(n % 3 == 0 for _, n in ex.exported)  # taken on the due looks, never between
    (deadline,) = ex.finals
    assert t0 < deadline <= t0 + FINAL_DEADLINE + 0.01


def test_a_step_that_raises_is_said_once_and_the_driver_goes_on(caplog):
    ex = FakeExporter(fail_first=3)
    d = PeriodicDriver(ex)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        d.start()
        assert ex.enough.wait(30)
        d.stop(0.0)  # no time left: no final export
    lines = [r.getMessage() for r in caplog.records if "test export failed" in r.getMessage()]
    assert lines == ["graphsignal: test export failed: RuntimeError: a bug"]
    assert ex.finals == []


def test_the_final_requests_timeouts_end_by_the_deadline():
    connect, read = final_timeout(time.monotonic() + 1.5, 3.0)
    assert 1.4 < connect == read <= 1.5
    connect, read = final_timeout(time.monotonic() + 10, 2.0)
    assert connect == 2.0 and 9.9 < read <= 10
    assert final_timeout(time.monotonic() - 1, 2.0) == (0.0, 0.0)
