"""A real Prometheus server (Debian's `prometheus` package) scrapes the
sidecar's /metrics while graphsignal-run profiles a workload that writes
CUPTI kernel activity through the CUPTI test shim, counts requests and
records a latency histogram with probes; queries through Prometheus's HTTP
API return the series, the workload's process metrics under
client_python's names, and histogram_quantile() agrees with /signals'
quantiles. promtool (from the same package) lints the exposition. A second
test serves a store in-process (GPU telemetry from the fake NVML, a real
vLLM exposition) to check the GPU info join and an engine histogram's
quantiles."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from graphsignal.sidecar.exposition import Exposition
from graphsignal.sidecar.server import ServerThread, make_app
from graphsignal.sidecar.store import MetricStore
from graphsignal.sources import prometheus
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.nvml import Nvml, NvmlBackend
from support.cbuild import cupti_shim
from support.fakes.fake_nvml import FakeGpu, FakeNvml
from support.gsrun import GS_RUN, free_port, get_json, quiet_env, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = os.path.join(ROOT, "tests", "data", "shim_probe_child.py")
sys.path.insert(0, os.path.dirname(CHILD))
import shim_probe_child as child  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shim():
    return cupti_shim()


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def promtool_check(body):
    """promtool check metrics over an exposition: its complaints ("" when clean)."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("no promtool binary (Debian's prometheus package has it)")
    r = subprocess.run([tool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    return "" if r.returncode == 0 else (r.stdout + r.stderr).decode("utf-8", "replace") or "rc %d" % r.returncode


def quantile(prom_port, q, bucket_series):
    (r,) = query(prom_port, "histogram_quantile(%s, %s)" % (q, bucket_series))
    return float(r["value"][1])


@contextlib.contextmanager
def prometheus_server(tmp_path, scrape_configs):
    """A real Prometheus with these scrape_configs (YAML text); yields its port."""
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus; .ci/run tries)")
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                             "scrape_configs:\n" + scrape_configs)
    log = open(tmp_path / "prometheus.log", "wb")
    server = subprocess.Popen([prom, "--config.file=%s" % (tmp_path / "prometheus.yml"),
                               "--storage.tsdb.path=%s" % (tmp_path / "data"),
                               "--web.listen-address=127.0.0.1:%d" % prom_port], stdout=log, stderr=log)
    try:
        yield prom_port
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()


@contextlib.contextmanager
def prometheus_beside(tmp_path, run_cmd, env, scrape_configs):
    """graphsignal-run run_cmd, and a real Prometheus scraping it with
    scrape_configs (YAML text, %(port)d the listen port); yields
    (listen port, Prometheus's port); both stopped at the end."""
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus; .ci/run tries)")
    port, prom_port = free_port(), free_port()
    run = subprocess.Popen(GS_RUN + ["--listen-port", str(port)] + run_cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                             "scrape_configs:\n" + scrape_configs % {"port": port})
    log = open(tmp_path / "prometheus.log", "wb")
    server = subprocess.Popen([prom, "--config.file=%s" % (tmp_path / "prometheus.yml"),
                               "--storage.tsdb.path=%s" % (tmp_path / "data"),
                               "--web.listen-address=127.0.0.1:%d" % prom_port], stdout=log, stderr=log)
    try:
        yield port, prom_port
    finally:
        server.terminate()
        run.terminate()
        for p in (server, run):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        log.close()


def test_a_real_prometheus_scrapes_probe_counters_and_kernel_time(shim, tmp_path):
    jobs = ("  - job_name: graphsignal\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            "    static_configs:\n      - targets: ['127.0.0.1:%(port)d']\n")
    env = quiet_env(GS_SHIM=shim, GS_CHILD_SECONDS=120, GS_CHILD_HISTOGRAM="1")
    with prometheus_beside(tmp_path, [sys.executable, CHILD], env, jobs) as (port, prom_port):
        def ready():
            try:
                up = query(prom_port, 'up{job="graphsignal"}')
            except OSError:
                return None
            return (up and up[0]["value"][1] == "1" and query(prom_port, "graphsignal_myapp_requests_total")
                    and query(prom_port, "graphsignal_myapp_latency_seconds_count"))
        assert wait_for(ready, 90.0, 0.5), (tmp_path / "prometheus.log").read_text()[-3000:]
        # a few scrapes later both series have grown
        time.sleep(3)
        (req,) = query(prom_port, 'graphsignal_myapp_requests_total{route="/v1"}')
        pid = req["metric"]["pid"]
        assert pid.isdigit() and req["metric"]["job"] == "graphsignal"
        assert float(req["value"][1]) >= 2 * child.COUNTER_PER_TICK
        assert float(req["value"][1]) % child.COUNTER_PER_TICK == 0
        kern = query(prom_port, 'graphsignal_cuda_kernels_seconds_total{frame="%s"}' % child.KERNEL)
        assert len(kern) == 1, kern
        labels = kern[0]["metric"]
        assert labels["UUID"] == child.UUID and labels["cuda_index"] == "0" and labels["pid"] == pid
        assert labels["kernel"] == "vectorized_elementwise_kernel<CUDAFunctor_add>" and labels["category"]
        seconds = float(kern[0]["value"][1])
        (n,) = query(prom_port, 'graphsignal_cuda_kernel_launches_total{frame="%s"}' % child.KERNEL)
        count = float(n["value"][1])
        assert count >= child.KERNELS_PER_TICK and count % child.KERNELS_PER_TICK == 0
        # same scrape, same instant: time per kernel is exact
        assert seconds == pytest.approx(count * child.KERNEL_NS / 1e9, rel=1e-9)
        rate = query(prom_port, 'rate(graphsignal_cuda_kernels_seconds_total[5s])')
        assert rate and float(rate[0]["value"][1]) > 0
        # the workload's process metrics, by client_python's names
        (cpu,) = query(prom_port, 'graphsignal_process_cpu_seconds_total{pid="%s"}' % pid)
        assert 0 < float(cpu["value"][1]) < 600
        (rss,) = query(prom_port, 'graphsignal_process_resident_memory_bytes{pid="%s"}' % pid)
        assert float(rss["value"][1]) > 1 << 20
        assert query(prom_port, 'rate(graphsignal_process_cpu_seconds_total{pid="%s"}[5s])' % pid)
        # Prometheus's quantiles agree with /signals' within 5 %
        doc = get_json("http://127.0.0.1:%d/signals" % port)[1]
        (hist,) = [m for m in doc["metrics"] if m["name"] == "myapp_latency_nanoseconds"]
        assert hist["stats"]["count"] == child.HIST_VALUES
        for q in ("0.5", "0.95", "0.99"):
            want = hist["stats"]["p" + q[2:].ljust(2, "0")] / 1e9
            got = quantile(prom_port, q, 'graphsignal_myapp_latency_seconds_bucket{route="/v1"}')
            print("probe histogram q%s: Prometheus %.6f s, /signals %.6f s (%+.2f %%)" % (q, got, want,
                                                                                      100 * (got / want - 1)))
            assert got == pytest.approx(want, rel=0.05), (q, got, want)
        # what the old one-bucket-per-octave layout gave, for the record: p95 28 % off
        # Prometheus ingested the whole scrape (it drops a scrape it cannot parse)
        (scraped,) = query(prom_port, 'scrape_samples_scraped{job="graphsignal"}')
        assert float(scraped["value"][1]) > 10
        # and promtool finds nothing to say about the exposition
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            body = r.read()
        assert b"graphsignal_myapp_latency_seconds_bucket" in body
        assert promtool_check(body) == ""


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_gpu_info_joins_and_engine_quantiles_agree_in_a_real_prometheus(tmp_path):
    nv = FakeNvml([FakeGpu(0), FakeGpu(1)])
    store = MetricStore()
    clock = _Clock()
    src = GpuTelemetry(store, [NvmlBackend(Nvml(module=nv), slow_every=1, clock=clock)], {}, clock=clock)
    src.setup()
    for _ in range(3):
        clock.t += 1
        src.poll()
    store.set_context(**{"host.name": "node-7"})
    with open(os.path.join(ROOT, "tests", "data", "engines", "vllm_1.txt"), encoding="utf-8") as f:
        text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
    keys = prometheus.apply(store, prometheus.parse_exposition(text))
    exp = Exposition(store, engine_keys=lambda: keys, engine=True, identity={"service": "vllm-a"})
    body, _ = exp.render()
    assert promtool_check(body) == ""
    server = ServerThread(make_app(store, exposition=exp), "127.0.0.1", 0)
    server.start()
    assert server.bound.wait(10) and not server.failed
    jobs = ("  - job_name: sidecar\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % server.port)
    try:
        with prometheus_server(tmp_path, jobs) as prom_port:
            def ready():
                try:
                    return query(prom_port, "graphsignal_gpu_info") and query(
                        prom_port, "graphsignal_vllm_time_to_first_token_seconds_bucket")
                except OSError:
                    return None
            assert wait_for(ready, 90.0, 0.5), (tmp_path / "prometheus.log").read_text()[-3000:]
            info = query(prom_port, "graphsignal_gpu_info")
            assert sorted(r["metric"]["gpu"] for r in info) == ["0", "1"]
            assert {r["metric"]["UUID"] for r in info} == {g.uuid for g in nv.gpus}
            assert all(r["metric"]["Hostname"] == "node-7" and r["metric"]["model_name"] for r in info)
            # a GPU series joins the info on UUID (as it would DCGM exporter's DCGM_FI_* series)
            joined = query(prom_port, "graphsignal_gpu_power_usage_watts * on(UUID) group_left(driver_version) "
                                      "graphsignal_gpu_info")
            assert len(joined) == 2 and all(r["metric"]["driver_version"] for r in joined)
            # DCGM exporter spells the model modelName: one label_replace
            dcgm = query(prom_port, 'label_replace(graphsignal_gpu_utilization_ratio, "modelName", "$1", '
                                    '"model_name", "(.*)")')
            assert {r["metric"]["modelName"] for r in dcgm} == {r["metric"]["model_name"] for r in info}
            # the engine's histogram keeps its buckets: the quantiles are /signals'
            (ttft,) = [s for s in store.snapshot().series if s.name == "vllm:time_to_first_token_seconds"
                       and s.type == "histogram"]
            st = ttft.stats()
            for q in ("0.5", "0.95", "0.99"):
                want = st["p" + q[2:].ljust(2, "0")]
                got = quantile(prom_port, q, "graphsignal_vllm_time_to_first_token_seconds_bucket")
                print("engine histogram q%s: Prometheus %.6f s, /signals %.6f s" % (q, got, want))
                assert got == pytest.approx(want, rel=0.05), (q, got, want)
    finally:
        server.stop()


def test_a_real_prometheus_scrapes_with_the_token_and_is_refused_without(tmp_path):
    token = "prom-" + "3c2b1a09" * 4
    (tmp_path / "token").write_text(token + "\n")
    jobs = ("  - job_name: with_token\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            "    authorization:\n      credentials_file: %s\n"
            "    static_configs:\n      - targets: ['127.0.0.1:%%(port)d']\n"
            "  - job_name: without_token\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            "    static_configs:\n      - targets: ['127.0.0.1:%%(port)d']\n" % (tmp_path / "token"))
    with prometheus_beside(tmp_path, [sys.executable, "-c", "import time; time.sleep(120)"],
                           quiet_env(GRAPHSIGNAL_SIGNALS_TOKEN=token), jobs) as (port, prom_port):
        def both_scraped():
            try:
                up = {r["metric"]["job"]: r["value"][1] for r in query(prom_port, "up")}
            except OSError:
                return None
            return up if len(up) == 2 and up.get("with_token") == "1" else None
        up = wait_for(both_scraped, 90.0, 0.5)
        assert up, (tmp_path / "prometheus.log").read_text()[-3000:]
        assert up["without_token"] == "0"  # 401: the scrape fails
        assert query(prom_port, '{job="with_token", __name__=~"graphsignal_.+"}')
        assert query(prom_port, '{job="without_token", __name__=~"graphsignal_.+"}') == []
