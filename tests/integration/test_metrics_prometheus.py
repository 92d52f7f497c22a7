"""A real Prometheus server (Debian's `prometheus` package) scrapes the
sidecar's /metrics while graphsignal-run profiles a workload that writes
CUPTI kernel activity through the CUPTI test shim and counts requests with
a probe; queries through Prometheus's HTTP API return both series."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from support.cbuild import build_cupti_shim
from support.gsrun import GS_RUN, free_port, quiet_env, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = os.path.join(ROOT, "tests", "data", "shim_probe_child.py")
sys.path.insert(0, os.path.dirname(CHILD))
import shim_probe_child as child  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shim():
    path = build_cupti_shim(os.path.join(tempfile.gettempdir(), "graphsignal-test-cupti-%d" % os.getuid()),
                            log=lambda m: sys.stderr.write(m + "\n"))
    if path is None:
        pytest.skip("no C++ compiler or CUPTI/CUDA headers here (the CUPTI test shim cannot be built)")
    return path


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


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
    with prometheus_beside(tmp_path, [sys.executable, CHILD], quiet_env(GS_SHIM=shim, GS_CHILD_SECONDS=120),
                           jobs) as (port, prom_port):
        def ready():
            try:
                up = query(prom_port, 'up{job="graphsignal"}')
            except OSError:
                return None
            return up and up[0]["value"][1] == "1" and query(prom_port, "graphsignal_myapp_requests_total")
        assert wait_for(ready, 90.0, 0.5), (tmp_path / "prometheus.log").read_text()[-3000:]
        # a few scrapes later both series have grown
        time.sleep(3)
        (req,) = query(prom_port, 'graphsignal_myapp_requests_total{route="/v1"}')
        assert req["metric"]["process_pid"].isdigit() and req["metric"]["job"] == "graphsignal"
        assert float(req["value"][1]) >= 2 * child.COUNTER_PER_TICK
        assert float(req["value"][1]) % child.COUNTER_PER_TICK == 0
        kern = query(prom_port, 'graphsignal_cuda_kernels_seconds_total{frame="%s"}' % child.KERNEL)
        assert len(kern) == 1, kern
        assert kern[0]["metric"]["device_uuid"] == child.UUID and kern[0]["metric"]["device_cuda_index"] == "0"
        seconds = float(kern[0]["value"][1])
        (n,) = query(prom_port, 'graphsignal_cuda_kernels_seconds_count_total{frame="%s"}' % child.KERNEL)
        count = float(n["value"][1])
        assert count >= child.KERNELS_PER_TICK and count % child.KERNELS_PER_TICK == 0
        # same scrape, same instant: time per kernel is exact
        assert seconds == pytest.approx(count * child.KERNEL_NS / 1e9, rel=1e-9)
        rate = query(prom_port, 'rate(graphsignal_cuda_kernels_seconds_total[5s])')
        assert rate and float(rate[0]["value"][1]) > 0
        # Prometheus ingested the whole scrape (it drops a scrape it cannot parse)
        (scraped,) = query(prom_port, 'scrape_samples_scraped{job="graphsignal"}')
        assert float(scraped["value"][1]) > 10


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
