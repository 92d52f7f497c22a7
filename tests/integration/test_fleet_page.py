"""graphsignal-server's page (/), in a real headless Chromium: a server
holding a recorded H200 llama.cpp run (replayed as 45 minutes of uploads)
and a real graphsignal-run that uploaded to it, the page asked for with
the key in the URL fragment: the instance list, the charts drawn (uPlot
canvases with pixels on them), the top kernels, the stages, the current
errors, and a screenshot at the path printed. Skips with one line where
chromium is missing."""
import json
import os
import subprocess
import sys

import pytest

from support import browser as sb
from support.fleet import ServerProc, replay_payload, request
from support.gsrun import GS_RUN, free_port, quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = os.path.join(ROOT, "tests", "data", "h200", "llamacpp_graph_c4.signals.json")

FAILING = """
import sys, time
from graphsignal import probes
stage_ns = probes.profile("demo_stage_nanoseconds")
latency = probes.histogram("demo_request_latency_nanoseconds")
tokens = probes.counter("demo_tokens_total")
queue = probes.gauge("demo_queue_depth")
for i in range(600):
    for stage, seconds in (("load", 0.002), ("compute", 0.004)):
        t0 = probes.now_ns()
        time.sleep(seconds)
        stage_ns.add(stage, probes.now_ns() - t0)
    latency.record(probes.now_ns() - t0)
    tokens.add(10)
    queue.set(i % 7)
raise RuntimeError("demo: the batch did not fit")
"""

# every chart's canvas: how many of its pixels are drawn (not transparent, not white)
INKED = """(() => {
  const out = {};
  for (const div of document.querySelectorAll('#charts .chart')) {
    const c = div.querySelector('canvas');
    if (!c) { out[div.id] = {drawn: div.dataset.drawn, inked: 0}; continue; }
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240)) n++;
    out[div.id] = {drawn: div.dataset.drawn, points: Number(div.dataset.points || 0), inked: n};
  }
  return out;
})()"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if sb.find() is None:
        pytest.skip("no chromium (apt-get install chromium) for the fleet page test")
    d = tmp_path_factory.mktemp("fleet")
    with open(RECORDED) as f:
        recorded = json.load(f)
    replayed = replay_payload(d / "fleet.db", recorded, minutes=45)
    srv = ServerProc(d / "fleet.db", keys=("key-a",)).start()
    try:
        env = quiet_env(GRAPHSIGNAL_API_KEY="key-a", GRAPHSIGNAL_API_BASE=srv.base)
        run = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", FAILING], env=env,
                             capture_output=True, timeout=120)
        assert run.returncode == 1, run.stderr
        status, doc, _ = request(srv.port, "GET", "/api/v1/instances", key="key-a")
        assert status == 200 and len(doc["instances"]) == 2, doc
        live = next(i["instance_id"] for i in doc["instances"] if i["instance_id"] != replayed)
        yield srv, replayed, live, d
    finally:
        srv.cleanup()


def test_the_page_and_its_files_are_served_through_the_front_without_a_key(fleet):
    srv, _, _, _ = fleet
    for path, ctype in (("/", "text/html"), ("/static/app.js", "text/javascript"),
                        ("/static/vendor/uPlot.iife.min.js", "text/javascript")):
        status, _, headers = request(srv.port, "GET", path)
        assert status == 200 and headers["Content-Type"].startswith(ctype), path
        assert "default-src 'none'" in headers["Content-Security-Policy"]
    for path in ("/static/../db.py", "/static/nope.js", "/static/", "/static/vendor/../../pages.py"):
        assert request(srv.port, "GET", path)[0] == 404, path
    # the data is not public
    assert request(srv.port, "GET", "/api/v1/history?instance_id=x")[0] == 401


def test_the_history_endpoint_gives_per_minute_points_of_the_selected_series(fleet):
    srv, replayed, _, _ = fleet
    status, doc, _ = request(srv.port, "GET", "/api/v1/history?instance_id=%s&seconds=3600" % replayed, key="key-a")
    assert status == 200, doc
    h = doc["history"]
    assert h["interval_seconds"] == 60 and 44 <= len(h["times_ns"]) <= 46
    util = next(s for s in h["series"] if s["name"] == "gpu_utilization_percent")
    assert all(v is not None for v in util["values"])
    tokens = next(s for s in h["series"] if s["name"] == "llamacpp:tokens_predicted_total")
    recorded = json.load(open(RECORDED))
    total = next(m["stats"]["total"] for m in recorded["metrics"] if m["name"] == "llamacpp:tokens_predicted_total")
    # the replay goes on at the recorded run's rate
    span = (recorded["payload_ns"] - recorded["start_ns"]) / 1e9
    assert tokens["values"][0] is None
    assert sorted(tokens["values"][1:])[len(tokens["values"]) // 2] == pytest.approx(total / span, rel=0.02)
    assert request(srv.port, "GET", "/api/v1/history?instance_id=%s&seconds=5" % replayed, key="key-a")[0] == 400
    assert request(srv.port, "GET", "/api/v1/history?instance_id=nope", key="key-a")[0] == 404


@pytest.mark.slow
def test_the_page_lists_instances_and_draws_an_instance(fleet):
    srv, replayed, live, d = fleet
    shots = []
    with sb.Browser.start(width=1400, height=1100) as b:
        # without a key: the page asks for one and shows nothing
        page = b.open(srv.base + "/", width=1400, height=1100)
        assert page.wait_for("document.body.dataset.state === 'needs-key'", 30)
        assert page.evaluate("document.getElementById('keyform').hidden") is False
        assert page.evaluate("document.querySelectorAll('#instance-table tbody tr').length") == 0
        # a wrong key: refused, asked again
        page = b.open(srv.base + "/#key=wrong", width=1400, height=1100)
        assert page.wait_for("document.body.dataset.state === 'needs-key' && "
                             "document.getElementById('message').textContent.includes('refused')", 30)
        # the key in the fragment: it leaves the address bar, the data comes
        page = b.open(srv.base + "/#key=key-a&range=3600&instance=" + replayed, width=1400, height=1100)
        page.wait_for("document.body.dataset.state === 'ready' && "
                      "document.getElementById('detail').dataset.instanceId === %s" % json.dumps(replayed), 60)
        assert "key-a" not in page.evaluate("location.href")
        rows = page.evaluate("[...document.querySelectorAll('#instance-table tbody tr')].map("
                             "r => [r.dataset.instanceId, ...[...r.cells].map(c => c.textContent)])")
        by_id = {r[0]: r[1:] for r in rows}
        assert set(by_id) == {replayed, live}
        iid, host, service, tags, started, gpus, seen, status = by_id[replayed]
        assert (iid, host, service, gpus) == (replayed, "vm", "llamacpp", "1") and status == "live" and seen.endswith("ago")
        assert by_id[live][2] == os.path.basename(sys.executable) and by_id[live][7] == "ended (exit 1)"
        # two runs of one service told apart: their ids and start times (hh:mm:ss today, else with the date)
        assert by_id[live][0] == live and len(by_id[live][4]) in (8, 19), by_id[live]
        inked = page.evaluate(INKED)
        for chart in ("chart-gpu-utilization", "chart-gpu-memory", "chart-gpu-power", "chart-tokens",
                      "chart-kernels-by-category"):
            assert inked[chart]["drawn"] == "1" and inked[chart]["points"] >= 40, (chart, inked)
            assert inked[chart]["inked"] > 2000, (chart, inked)
        kernels = page.evaluate("[...document.querySelectorAll('#kernels tbody tr')].map(r => r.cells[0].textContent)")
        assert kernels and all(kernels), kernels
        assert page.problems() == []
        shots.append(page.screenshot(str(d / "fleet-page-llamacpp.png")))
        # the real run: its stages and its error
        page.evaluate("document.getElementById('range').value = '900'; 1")  # the last 15 minutes, a point a second
        page.evaluate("document.querySelector('#instance-table tr[data-instance-id=%s]').click()" % json.dumps(live))
        page.wait_for("document.body.dataset.state === 'ready' && "
                      "document.getElementById('detail').dataset.instanceId === %s" % json.dumps(live), 60)
        stages = page.evaluate("[...document.querySelectorAll('#stages tbody tr')].map(r => r.cells[0].textContent)")
        assert set(stages) == {"load", "compute"}, stages
        # the workload's own signals, a point a second: its probes (quantiles, a rate, a gauge), its CPU and memory
        assert "one every 1 s" in page.evaluate("document.getElementById('detail-note').textContent")
        inked = page.evaluate(INKED)
        for chart in ("chart-own-demo_request_latency_nanoseconds", "chart-own-demo_request_latency_nanoseconds-rate",
                      "chart-own-demo_tokens_total", "chart-own-demo_queue_depth", "chart-own-demo_stage_nanoseconds",
                      "chart-host-cpu", "chart-process-cpu", "chart-memory"):
            assert inked[chart]["drawn"] == "1" and inked[chart]["points"] >= 2, (chart, inked)
            assert inked[chart]["inked"] > 500, (chart, inked)
        # a CPU run's GPU charts are named in one line, not drawn empty
        assert "chart-gpu-utilization" not in inked
        assert "gpu-utilization" in page.evaluate("document.getElementById('charts-empty').dataset.ids")
        legend = page.evaluate("document.getElementById('chart-own-demo_request_latency_nanoseconds').textContent")
        assert "p50" in legend and "p95" in legend and "p99" in legend and "(ms)" in legend, legend
        errors = page.evaluate("document.getElementById('errors').textContent")
        assert "the batch did not fit" in errors or "exited with" in errors, errors
        assert page.problems() == []
        shots.append(page.screenshot(str(d / "fleet-page-run.png")))
    print("fleet page screenshots: %s" % " ".join(shots))
