"""SKILL.md is the agent's manual, and the reference texts it names
(graphsignal/reference, printed by graphsignal-run --explain) the rest of
it: their runnable examples run, and every metric name, flag, environment
variable, endpoint and payload key they mention exists."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from werkzeug.test import Client

from support.cbuild import INCLUDE, ROOT
from support.gsrun import GS_RUN, Release, free_port, json_or_none

REFERENCE = os.path.join(ROOT, "graphsignal", "reference")
# the docs an agent reads: SKILL.md, then each reference text (the examples are numbered in this order)
SKILL = open(os.path.join(ROOT, "SKILL.md")).read() + "".join(
    "\n" + open(os.path.join(REFERENCE, f)).read() for f in sorted(os.listdir(REFERENCE)) if f.endswith(".md"))
SOURCES = []
for top in ("graphsignal", "include", "csrc"):
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
        if "_include" in dirpath:
            continue
        for f in files:
            if f.endswith((".py", ".h", ".cpp", ".c")) and f != "_gsnative.c":  # not generated code
                with open(os.path.join(dirpath, f), errors="replace") as fh:
                    SOURCES.append(fh.read())
SOURCE = "\n".join(SOURCES)
HEADERS = "\n".join(open(os.path.join(INCLUDE, "graphsignal", f)).read()
                    for f in os.listdir(os.path.join(INCLUDE, "graphsignal")))


def blocks(lang, marked=False):
    pat = (r"<!-- skill-test -->\s*\n```" if marked else r"```") + lang + r"\n(.*?)```"
    return re.findall(pat, SKILL, re.S)


def backticked():
    return set(re.findall(r"`([^`\n]+)`", SKILL))


METRIC = re.compile(r"^(cuda|gpu|host|process|graphsignal|prometheus)_[a-z0-9_]+$")


def _exported_names():
    """Every /metrics name the metric table makes (families and samples)."""
    from graphsignal.naming import metrics as table

    out = {name for name, _, _ in table.EXTRA}
    for m in table.table():
        if m.prom:
            out |= {m.prom, m.prom + "_total", m.prom + "_bucket", m.prom + "_count", m.prom + "_sum"}
        if m.samples:
            out |= {m.samples, m.samples + "_total"}
    return out


def test_every_metric_name_it_mentions_is_emitted_by_the_code():
    names = {t for t in backticked() if METRIC.match(t) and not re.search(r"\b%s\(" % t, HEADERS)}
    assert len(names) > 30
    exported = _exported_names()
    missing = sorted(n for n in names if '"%s"' % n not in SOURCE and n not in exported)
    assert missing == []


def test_every_flag_it_mentions_exists():
    helps = subprocess.run(GS_RUN + ["--help"], capture_output=True, text=True).stdout
    for cli in ("top", "diff", "server", "export"):
        helps += subprocess.run([sys.executable, "-m", "graphsignal.cli." + cli, "--help"], capture_output=True,
                                text=True).stdout
    engine_flags = {"--port", "--model-path", "--config", "--disable-log-stats", "--enable-metrics", "--metrics",
                    "--help"}
    # the redaction paragraph's flags are a workload's (--api-key, --max-tokens, curl's --user)
    redaction = SKILL[SKILL.index("Command lines are redacted"):]
    redaction = redaction[:redaction.index("\n\n")]
    engine_flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", redaction))
    assert {"--api-key", "--max-tokens", "--key-file"} <= engine_flags
    # the findings' changes name engines' flags (llama.cpp's -np, vLLM's --max-num-seqs, ...): the rule table's
    # rows, all but the profiler's (which name graphsignal-run's own)
    from graphsignal import explain

    rows = [r for r in explain.text("findings").splitlines() if r.startswith("| `") and "| profiler |" not in r]
    engine_flags |= {f for r in rows for f in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", r)}
    assert {"--max-num-seqs", "--enforce-eager"} <= engine_flags
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", SKILL)) - engine_flags
    assert {"--listen-port", "--cuda-graph-trace", "--once", "--window", "--json", "--top"} <= flags
    assert sorted(f for f in flags if f not in helps) == []




def test_every_environment_variable_and_c_name_it_mentions_exists():
    names = set(re.findall(r"\b(GRAPHSIGNAL_[A-Z_]+)\b", SKILL))
    c_names = {n for n in names if re.search(r"#define %s\b|\b%s = \d" % (n, n), HEADERS)}
    assert {"GRAPHSIGNAL_HISTOGRAM", "GRAPHSIGNAL_RECORD"} <= c_names
    env = names - c_names
    assert len(env) >= 6
    assert sorted(v for v in env if '"%s"' % v not in SOURCE) == []
    for fn in re.findall(r"\b(graphsignal_[a-z_]+)\(", SKILL):
        assert re.search(r"\b%s\(" % fn, HEADERS), fn


def test_every_prometheus_name_it_mentions_is_on_metrics():
    import numpy as np

    from graphsignal.naming import metrics as table
    from graphsignal.sidecar.server import make_app
    from graphsignal.sidecar.store import MetricStore

    # one series of every metric in the table, a probe histogram and profile, a GPU, a name clash
    store = MetricStore()
    for m in table.table():
        if m.type == "gauge":
            store.set_gauge(m.name, {"process.pid": "1"}, 1)
        elif m.type == "counter":
            store.set_counter(m.name, {"process.pid": "1"}, 1)
        elif m.type == "profile":
            store.add_profile(m.name, {"process.pid": "1"}, [("k", 10, 1)])
    store.add_histogram_values("myengine_batch_duration_nanoseconds", {}, np.array([5], dtype=np.uint64))
    store.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([5], dtype=np.uint64))
    store.set_resource("device", {"device.uuid": "GPU-1", "device.index": "0"}, {"device.name": "NVIDIA H200"})
    store.set_gauge("x_count", {}, 1)
    store.add_histogram_values("x", {}, np.array([3], dtype=np.uint64))
    text = Client(make_app(store)).get("/metrics").get_data(as_text=True)
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    families = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE")}
    names = set(re.findall(r"\b(graphsignal_[a-z0-9_]+)", SKILL))
    exported = {n for n in names if '"%s"' % n not in SOURCE}
    assert {"graphsignal_cuda_kernels_seconds_total", "graphsignal_cuda_kernel_launches_total",
            "graphsignal_process_cpu_seconds_total"} <= exported
    assert sorted(n for n in exported if n not in samples and n not in families
                  and not re.search(r"\b%s\b" % n, HEADERS)) == []


def test_the_metric_table_is_the_one_the_code_has():
    from graphsignal.naming import metrics as table

    assert table.replace_in(SKILL) == SKILL, "run scripts/gen_metric_docs.py"
    with open(os.path.join(ROOT, "METRICS.md"), encoding="utf-8") as f:
        assert f.read() == table.full_markdown(), "run scripts/gen_metric_docs.py"
    # every metric name the prose mentions is in the table (or is an engine summary key)
    known = {m.name for m in table.table()} | {m.prom for m in table.table() if m.prom}
    prose = SKILL[:SKILL.index(table.BEGIN_MARK)] + SKILL[SKILL.index(table.END_MARK):]
    named = set(re.findall(r"`((?:cuda|gpu|host|process|nvtx|prometheus)_[a-z0-9_]+)`", prose))
    scripts = "\n".join(open(os.path.join(ROOT, "scripts", f), errors="replace").read()
                         for f in os.listdir(os.path.join(ROOT, "scripts")) if f.endswith(".py"))
    # not a metric: a benchmark's row (bench_percall's ops) or a name the code writes itself
    assert sorted(n for n in named if n not in known and '"%s"' % n not in SOURCE and n not in scripts) == []


def test_the_servers_endpoints_it_mentions_exist(tmp_path):
    from graphsignal.fleet.app import make_app
    from graphsignal.fleet.db import DB

    c = Client(make_app(DB(str(tmp_path / "s.db")), ["k"]))
    paths = set(re.findall(r"http://127\.0\.0\.1:18260(/[a-z0-9/]+)", SKILL))
    assert {"/api/v1/instances", "/api/v1/signals"} <= paths
    for path in paths:
        assert c.get(path, headers={"X-API-Key": "k"}).status_code in (200, 400), path


def test_endpoints_and_payload_keys_exist():
    from graphsignal.sidecar.server import make_app
    from graphsignal.sidecar.store import MetricStore
    from graphsignal.sidecar.windows import window_stats

    store = MetricStore()
    store.take_history()
    c = Client(make_app(store, window_stats))
    for path in re.findall(r"http://127\.0\.0\.1:18259(/[a-z]+(?:\?window=\d+)?)", SKILL):
        assert c.get(path).status_code == 200, path
    doc = c.get("/signals?window=10").json
    for key in ("profiler", "payload_ns", "start_ns", "context", "metrics", "errors", "resources", "engine"):
        assert key in doc
    for key in ("seconds", "start_ns", "end_ns", "covered_seconds", "partial", "metrics"):
        assert key in doc["window"]
    # the window keys are written by the series types' window maths
    from graphsignal import windowmath as series_mod

    windows_src = open(series_mod.__file__).read()
    for key in ("delta", "rate", "share", "mean", "samples"):
        assert '"%s"' % key in windows_src
    # kernel frames' names, and graphsignal-diff's document
    from graphsignal.naming import kernels as kernel_names

    frames = kernel_names.annotate("cuda_kernels_nanoseconds", [{"name": "_Z3fooi", "value": 1, "samples": 1}])
    assert {"display_name", "category"} <= set(frames[0])
    diff_dir = os.path.join(ROOT, "graphsignal", "diff")
    diff_src = "".join(open(os.path.join(diff_dir, f)).read() for f in sorted(os.listdir(diff_dir)) if f.endswith(".py"))
    for key in ("changes", "warnings", "kind", "metric", "frame", "tags", "stat", "unit", "before", "after", "delta",
                "ratio", "only", "total", "calls", "per_call", "share", "window", "cumulative"):
        assert '"%s"' % key in diff_src, key
    from graphsignal import engine_summary
    from graphsignal.sources import prometheus

    engine = MetricStore()
    with open(os.path.join(ROOT, "tests", "data", "engines", "sglang_1.txt")) as f:
        prometheus.apply(engine, prometheus.parse_exposition(f.read()))
    summary = engine_summary.from_store(engine)
    for key in ("requests_running", "requests_waiting", "kv_cache_usage_percent", "prompt_tokens_total",
                "generation_tokens_total", "ttft_seconds", "itl_seconds", "tpot_seconds", "e2e_seconds",
                "window"):
        assert key in summary, key
    for key in ("count", "mean", "p50", "p95", "p99"):
        assert key in summary["ttft_seconds"]


def run_example(i, tmp_path, until=None):
    """Runs the i-th marked example on a free port, its /tmp files in tmp_path (whatever else runs beside it).
    until: (a line of the example's workload, what replaces it given a flag file's path, a predicate of the port):
    the flag is created once the predicate holds (at most 30 s), for a workload that runs on until then: what the
    example reads comes late on a loaded machine, where the sidecar starts late."""
    script = blocks("bash", marked=True)[i]
    port = free_port()
    script = script.replace("18259", str(port)).replace("/tmp/", str(tmp_path) + "/")
    if until is None:
        return _run_script(script)
    line, replace, pred = until
    assert script.count(line) == 1, line
    with Release(lambda: pred(port)) as rel:
        return _run_script(script.replace(line, replace(rel.path)))


def _run_script(script):
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error", PATH=bindir + os.pathsep + os.environ["PATH"])
    for tool in ("graphsignal-run", "graphsignal-diff", "graphsignal-export"):
        if tool in script and not shutil.which(tool, path=env["PATH"]):
            pytest.skip("%s is not on PATH (install with pip install -e .)" % tool)
    return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], capture_output=True, text=True, env=env,
                          timeout=120)


def test_the_examples_are_the_three_marked_blocks():
    assert len(blocks("bash", marked=True)) == 3


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not found")
def test_the_runnable_example_runs(tmp_path):
    out = run_example(0, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    tags, count = lines[0].rsplit("}", 1)[0], lines[0].rsplit("}", 1)[1].split()
    assert "process.pid" in tags and int(count[0]) > 100
    seconds, covered, n = lines[1].split()
    assert seconds == "2" and float(covered) > 0 and int(n) > 0
    assert any("GPU" in ln or "gpu" in ln for ln in lines[2:]), out.stdout


def test_the_diff_example_runs_and_names_the_stage_that_got_faster(tmp_path):
    out = run_example(1, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("largest change: probe demo_stage_nanoseconds compute"), out.stdout
    metric, frame, ratio = lines[-1].split()
    # 1 ms sleeps against 4 ms ones: about a quarter per call, whatever the load adds to both
    assert (metric, frame) == ("demo_stage_nanoseconds", "compute") and float(ratio) < 0.7, out.stdout


def test_the_export_example_writes_a_flame_graph_and_a_trace_with_per_second_tracks(tmp_path):
    # its workload's 2.5 s give the history two points of CPU time and more; on a loaded machine the sidecar starts
    # late: the steps go on until its live history has them (the final one adds a point)
    def two_cpu_points(port):
        h = (json_or_none("http://127.0.0.1:%d/signals?history=60" % port) or {}).get("history") or {}
        return any(len([v for v in x["values"] if v is not None]) >= 2 for x in h.get("series", ())
                   if x["name"] == "process_cpu_time_nanoseconds")

    loop = "while time.time() < t_end:"
    out = run_example(2, tmp_path, until=(loop, lambda flag: "while time.time() < t_end or (time.time() < t_end + 30 "
                                          "and not __import__('os').path.exists(%r)):" % flag, two_cpu_points))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    stacks = [ln for ln in lines if ln.startswith("demo_stage_nanoseconds")]
    assert len(stacks) == 2 and {ln.split(";")[1].rsplit(" ", 1)[0] for ln in stacks} == {"load", "compute"}
    assert int(lines[-1]) >= 2  # CPU cores, one value a second


def test_the_c_probe_example_compiles(tmp_path):
    host = blocks("c")[0]
    src = tmp_path / "skill.c"
    src.write_text(host + "\nint main(void) { init(); step(); return 0; }\n")
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE, str(src), "-o", str(tmp_path / "a"),
                    "-pthread"], check=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_the_cuda_probe_example_compiles(tmp_path):
    kernel = blocks("c")[1]
    src = tmp_path / "skill.cu"
    src.write_text(kernel + "\nint main() { init(); my_kernel<<<1, 32>>>(NULL, "
                   "graphsignal_probe_device_data(g_tile_ns)); return 0; }\n")
    subprocess.run(["nvcc", "-arch=sm_90", "-I", INCLUDE, str(src), "-o", str(tmp_path / "a")], check=True)


def test_the_python_probe_example_runs():
    (code,) = blocks("python")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
