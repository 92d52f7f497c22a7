"""The host's CPU figure is what its names say: `host_cpu_usage_percent`
is a share of all the host's cores (100 = every core busy), so
/metrics' `graphsignal_host_cpu_usage_ratio` and OTLP's
`graphsignal.host_cpu_utilization` (unit `1`) are fractions 0-1 on any
number of cores; busy cores are their own series, `host_cpu_busy_cores`."""
import psutil
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from graphsignal import config
from graphsignal.sidecar import exposition, otlp
from graphsignal.sidecar.store import MetricStore
from graphsignal.sources.host import HostSource


def _poll(monkeypatch, percent, cores):
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: percent)
    store = MetricStore()
    src = HostSource(store, lambda: None)
    src.cpu_count = cores
    src.setup()
    src.poll()
    return store


def _gauge(store, name):
    (s,) = store.lookup(name, "gauge")
    return s.value


def _otlp_points(store):
    settings = config.from_environ({"GRAPHSIGNAL_OTLP": "1"}, ["python3", "w.py"])
    req = ExportMetricsServiceRequest.FromString(otlp.Builder(settings).request(store.snapshot()).SerializeToString())
    (rm,) = req.resource_metrics
    (sm,) = rm.scope_metrics
    return {m.name: (m.unit, [p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                               for p in m.gauge.data_points]) for m in sm.metrics}


def _prom(store, name):
    text = exposition.Exposition(store).render()[0]
    for fam in text_string_to_metric_families(text.decode()):
        for sample in fam.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError("%s not on /metrics" % name)


def test_a_64_core_host_fully_busy_reads_one_not_64(monkeypatch):
    store = _poll(monkeypatch, 100.0, 64)  # psutil: the share of all cores
    assert _gauge(store, "host_cpu_usage_percent") == 100.0
    assert _gauge(store, "host_cpu_busy_cores") == 64.0
    assert _prom(store, "graphsignal_host_cpu_usage_ratio") == 1.0
    assert _prom(store, "graphsignal_host_cpu_busy_cores") == 64.0
    pts = _otlp_points(store)
    assert pts["graphsignal.host_cpu_utilization"] == ("1", [1.0])
    assert pts["graphsignal.host_cpu_busy"] == ("{cpu}", [64.0])


def test_a_two_core_host_with_one_core_busy_is_half(monkeypatch):
    store = _poll(monkeypatch, 50.0, 2)
    assert _prom(store, "graphsignal_host_cpu_usage_ratio") == 0.5
    assert _prom(store, "graphsignal_host_cpu_busy_cores") == 1.0
    assert _otlp_points(store)["graphsignal.host_cpu_utilization"] == ("1", [0.5])


def test_the_real_reading_is_a_fraction_on_this_machine():
    store = MetricStore()
    src = HostSource(store, lambda: None)
    src.setup()
    sum(range(2_000_000))  # some CPU time between the two readings
    src.poll()
    pct, busy = _gauge(store, "host_cpu_usage_percent"), _gauge(store, "host_cpu_busy_cores")
    assert 0 <= pct <= 100
    assert abs(busy - pct * src.cpu_count / 100) < 0.01
    assert 0 <= _prom(store, "graphsignal_host_cpu_usage_ratio") <= 1
