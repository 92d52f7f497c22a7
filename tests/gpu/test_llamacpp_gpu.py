"""A real inference engine under graphsignal-run: llama.cpp's llama-server
on the GPU, under load. Needs a built llama-server and a GGUF model:

  GRAPHSIGNAL_TEST_LLAMA_SERVER=/path/llama-server GRAPHSIGNAL_TEST_GGUF=/path/model.gguf \\
      python3 -m pytest -m gpu tests/gpu/test_llamacpp_gpu.py

(scripts/run_gpu_suite.sh sets both from GS_LLAMA_SERVER / GS_GGUF.) The
tests that need no CUDA (the server's own counters, the engine summary,
top's engine block, crashes) also run against a CPU build with
GRAPHSIGNAL_TEST_LLAMACPP_CPU=1 (and -ngl 0: GRAPHSIGNAL_TEST_NGL=0).
GRAPHSIGNAL_TEST_ARTIFACTS=DIR keeps each test's numbers, payload
excerpts and server logs there.

How counts are made exact. A request of T tokens (ignore_eos, one client,
requests one after another, a short prompt reused from the prompt cache)
is, in llama-server's loop, one llama_decode for its prompt and one per
generated token but the last (sampled, never decoded): T decodes. Every
count graphsignal keeps is then affine in T: X = s*T + c per request, s
per generated token, c per request (prompt pass, CUDA-graph warm-up, the
server's bookkeeping). Three phases of N requests with T = 32, 96, 64
give three deltas of X; s and c must come out integers from the first two
and predict the third exactly. That is what "counted exactly" means here:
no tolerance, and a count that is off by one anywhere breaks it.
"""
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from llama_harness import Load, Mode, Server, SignalsPoller, completion, free_port, percentile  # noqa: E402
from graphsignal.sources.prometheus import parse_exposition  # noqa: E402
from graphsignal.naming import kernels as kernel_names  # noqa: E402

SERVER = os.environ.get("GRAPHSIGNAL_TEST_LLAMA_SERVER")
GGUF = os.environ.get("GRAPHSIGNAL_TEST_GGUF")
NGL = int(os.environ.get("GRAPHSIGNAL_TEST_NGL", "99"))
CPU_OK = os.environ.get("GRAPHSIGNAL_TEST_LLAMACPP_CPU") == "1"
ART = os.environ.get("GRAPHSIGNAL_TEST_ARTIFACTS")

# On the CPU only the tests marked `cuda` below are left out; everywhere else all are GPU tests.
pytestmark = [pytest.mark.skipif(not (SERVER and GGUF), reason="set GRAPHSIGNAL_TEST_LLAMA_SERVER and "
                                 "GRAPHSIGNAL_TEST_GGUF (a llama-server binary and a GGUF model)")]
if not CPU_OK:
    pytestmark.append(pytest.mark.gpu)
cuda = pytest.mark.skipif(CPU_OK, reason="needs CUDA activity (GRAPHSIGNAL_TEST_LLAMACPP_CPU=1 runs on a CPU)")

PROMPT = "The lighthouse keeper opened the bottle and read"  # short: its tokens + 96 stay under 256 KV cells
N = 4
LENGTHS = (32, 96, 64)


def artifact(name, obj):
    if not ART:
        return
    os.makedirs(ART, exist_ok=True)
    path = os.path.join(ART, name)
    with open(path, "w") as f:
        if isinstance(obj, str):
            f.write(obj)
        else:
            json.dump(obj, f, indent=1, sort_keys=True, default=str)


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


class Engine:
    """llama-server under graphsignal-run (or bare), with the helpers the
    tests share."""

    def __init__(self, name, spec="", parallel=4, env=None):
        self.name = name
        self.port, self.listen = free_port(), free_port()
        fd, self.signals_file = tempfile.mkstemp(prefix="gs-llamacpp-", suffix=".json")
        os.close(fd)
        os.unlink(self.signals_file)
        e = dict(os.environ)
        # records reach the sidecar within 0.2 s instead of 1 s: the tests wait less
        e.setdefault("GRAPHSIGNAL_CUPTI_FLUSH_MS", "200")
        e.setdefault("GRAPHSIGNAL_LOG_LEVEL", "warning")
        e.update(env or {})
        log_dir = ART or tempfile.gettempdir()
        os.makedirs(log_dir, exist_ok=True)
        self.log_path = os.path.join(log_dir, "llamacpp_%s.log" % name)
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
        self.mode = Mode(name, spec)
        self.server = Server(SERVER, GGUF, self.port, mode=self.mode, listen_port=self.listen, ngl=NGL,
                             parallel=parallel, signals_file=self.signals_file, env=e, log_path=self.log_path)
        try:
            self.server.wait_healthy(300)
            if not self.mode.bare:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        self.signals()
                        break
                    except (urllib.error.URLError, OSError, ValueError):
                        time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self._pid = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def signals(self):
        return json.loads(get("http://127.0.0.1:%d/signals" % self.listen))

    def metrics(self):
        """The server's own /metrics, read directly: {name: value}."""
        out = {}
        for kind, name, _tags, value in parse_exposition(get(self.url + "/metrics").decode()):
            if kind in ("gauge", "counter"):
                out[name] = value
        return out

    def vocab(self):
        doc = json.loads(get(self.url + "/v1/models"))
        return doc["data"][0]["meta"]["n_vocab"]

    def pid(self):
        """The llama-server process (graphsignal-run's child)."""
        if self._pid is None:
            if self.mode.bare:
                self._pid = self.server.proc.pid
            else:
                import psutil
                kids = [p for p in psutil.Process(self.server.proc.pid).children(recursive=True)
                        if p.name() == os.path.basename(SERVER)[:15]]
                assert len(kids) == 1, kids
                self._pid = kids[0].pid
        return self._pid

    def requests(self, n, n_predict, prompt=PROMPT):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            return [completion(conn, prompt, n_predict)[0] for _ in range(n)]
        finally:
            conn.close()

    def quiesce(self, timeout=90.0):
        """(payload, server metrics) once nothing moves: the server idle and
        every count graphsignal keeps for it unchanged over three reads."""
        deadline = time.monotonic() + timeout
        prev, same = None, 0
        while time.monotonic() < deadline:
            doc, m = self.signals(), self.metrics()
            key = (counts(doc, self.pid()), m.get("llamacpp:n_decode_total"),
                   m.get("llamacpp:tokens_predicted_total"), m.get("llamacpp:prompt_tokens_total"))
            if key == prev and not m.get("llamacpp:requests_processing"):
                same += 1
                if same >= 3:
                    return doc, m
            else:
                same = 0
            prev = key
            time.sleep(0.6)
        raise AssertionError("the engine's counts never settled")

    def stop(self):
        return self.server.stop(30)

    def final_payload(self):
        with open(self.signals_file) as f:
            return json.load(f)


def counts(doc, pid):
    """Every count graphsignal keeps for process `pid`, as {key: int}."""
    pid = str(pid)
    c = {}

    def add(k, v):
        c[k] = c.get(k, 0) + int(v or 0)

    for m in doc["metrics"]:
        if (m.get("tags") or {}).get("process.pid") != pid:
            continue
        name, st, tags = m["name"], m["stats"], m["tags"]
        if m["type"] == "profile":
            frames = st.get("frames") or []
            assert len(frames) < 250, "%s: frames cut at the payload's limit" % name
        if name == "cuda_graphs_nanoseconds":
            for f in frames:
                add("replays", f["samples"])
                add("graph:" + f["name"], f["samples"])
                add("time:graphs_ns", f["value"])
        elif name == "cuda_kernels_nanoseconds":
            for f in frames:
                add("kernels", f["samples"])
                add("kernel:" + f["name"], f["samples"])
        elif name == "cuda_memcpy_nanoseconds":
            for f in frames:
                add("memcpy:%s:%s" % (f["name"], tags.get("host_memory", "-")), f["samples"])
        elif name == "cuda_memcpy_bytes":
            add("memcpy_bytes:%s:%s" % (tags.get("kind"), tags.get("host_memory", "-")), st.get("total"))
        elif name == "cuda_memset_nanoseconds":
            for f in frames:
                add("memset:" + f["name"], f["samples"])
        elif name == "cuda_sync_nanoseconds":
            for f in frames:
                add("sync:" + f["name"], f["samples"])
        elif name == "graphsignal_dropped_records":
            add("dropped", st.get("total"))
    return c


SERVER_KEYS = ("llamacpp:n_decode_total", "llamacpp:tokens_predicted_total", "llamacpp:prompt_tokens_total")


def phases(engine):
    """Runs the three phases (N requests of each length in LENGTHS) and
    returns {"snapshots", "deltas": [{key: delta}], "affine": {key: (s, c)
    or None}}."""
    assert engine.requests(2, 16) == [16, 16]  # warm-up: first graph captures, prompt cache filled
    snaps = [engine.quiesce()]
    for t in LENGTHS:
        assert engine.requests(N, t) == [t] * N  # ignore_eos: the server's own count is exact
        snaps.append(engine.quiesce())
    pid = engine.pid()
    rows = []
    for (d0, m0), (d1, m1) in zip(snaps, snaps[1:]):
        a, b = counts(d0, pid), counts(d1, pid)
        row = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
        for k in SERVER_KEYS:
            row["server:" + k] = int(m1[k] - m0[k])
        rows.append(row)
    keys = sorted(set().union(*rows))
    fits = {k: affine([r.get(k, 0) for r in rows]) for k in keys}
    return {"snapshots": snaps, "deltas": rows, "affine": fits, "pid": pid}


def affine(deltas, lengths=LENGTHS, n=N):
    """(s, c) with delta_i == n * (s * T_i + c) for all three phases, both
    integers; None when no such pair exists."""
    d0, d1, d2 = deltas
    t0, t1, t2 = lengths
    num, den = d1 - d0, n * (t1 - t0)
    if num % den:
        return None
    s = num // den
    rest = d0 - n * s * t0
    if rest % n:
        return None
    c = rest // n
    return (s, c) if d2 == n * (s * t2 + c) else None


def report(run):
    return {"affine": {k: v for k, v in run["affine"].items() if not k.startswith("time:")},
            "deltas": run["deltas"]}


# -- fixtures: one server per mode for the exact counts ------------------------------

@pytest.fixture(scope="module")
def graph_run():
    eng = Engine("graph")
    try:
        run = phases(eng)
        run["vocab"] = eng.vocab()
        run["final_live"] = run["snapshots"][-1][0]
    finally:
        eng.stop()
    artifact("llamacpp_graph_phases.json", report(run))
    return run


@pytest.fixture(scope="module")
def node_run():
    eng = Engine("node", "--cuda-graph-trace node")
    try:
        run = phases(eng)
    finally:
        eng.stop()
    artifact("llamacpp_node_phases.json", report(run))
    return run


def fit(run, key):
    f = run["affine"].get(key)
    assert f is not None, "%s is not affine in the tokens: deltas %s" % (key, [r.get(key) for r in run["deltas"]])
    return f


# -- the server's own counters ------------------------------------------------------------

def test_llama_server_decodes_once_per_generated_token(graph_run):
    # llama-server's loop: a prompt pass then one decode per generated token but the last
    assert fit(graph_run, "server:llamacpp:tokens_predicted_total") == (1, 0)
    assert fit(graph_run, "server:llamacpp:n_decode_total") == (1, 0)


# -- default (graph) mode ---------------------------------------------------------------------

@cuda
def test_graph_mode_one_replay_per_generated_token(graph_run):
    s, c = fit(graph_run, "replays")
    # Each 1-token decode step is one replay of the decode graph. A request's
    # prompt pass has another shape and runs eagerly; after it, ggml-cuda runs
    # the decode graph eagerly once more before it captures it again (its graph
    # "warm-up": a change of the graph's properties resets it). So replays are
    # decodes minus k eager passes per request, k in {0, 1, 2}.
    assert s == 1, graph_run["affine"]["replays"]
    k = -c
    assert 0 <= k <= 2, ("eager decode passes per request", k)
    decodes = fit(graph_run, "server:llamacpp:n_decode_total")
    assert (decodes[0] - s, decodes[1] - c) == (0, k)  # replays == n_decode_total - k per request
    # the decode graph, under one frame name or more (a re-capture may get a new name)
    frames = [key for key in graph_run["affine"] if key.startswith("graph:")]
    assert frames
    # and the decode time is there: every phase adds replay time
    assert all(r.get("time:graphs_ns", 0) > 0 for r in graph_run["deltas"]), graph_run["deltas"]
    artifact("llamacpp_graph_replays.json", {"replays_per_token": s, "eager_passes_per_request": k,
                                             "frames": {f: graph_run["affine"][f] for f in frames}})


@cuda
def test_graph_mode_kernel_profile_holds_the_eager_kernels_only(graph_run):
    s, c = fit(graph_run, "kernels")
    k = -fit(graph_run, "replays")[1]
    # no kernel launch grows with the tokens: every decode step is inside a replay
    assert s == 0, graph_run["affine"]["kernels"]
    per_symbol = {key: fit(graph_run, key) for key in graph_run["affine"] if key.startswith("kernel:")}
    assert all(v[0] == 0 for v in per_symbol.values()), {k_: v for k_, v in per_symbol.items() if v[0]}
    # ... while each eager pass (the prompt's, the warm-up's) launches its kernels
    assert (c > 0) == (k > 0), (c, k)


@cuda
def test_graph_mode_copies_and_syncs_per_token_are_exact(graph_run):
    aff = graph_run["affine"]
    # Pageable device-to-host copies are llama-server's prompt cache: when a
    # slot is reused it saves the previous request's KV state to host memory
    # (16 copies, one per layer's K and V), sized by that slot's context, not
    # by this request's tokens (seen on the H200: 16 copies a request, bytes
    # 327680 / 753664 / 688128 a request across the three phases). Their
    # count is exact per request; their bytes are no function of the tokens.
    not_per_token = "memcpy_bytes:device_to_host:pageable"
    copies = {k: fit(graph_run, k) for k in aff if k.startswith(("memcpy:", "memcpy_bytes:")) and k != not_per_token}
    syncs = {k: fit(graph_run, k) for k in aff if k.startswith("sync:")}
    memsets = {k: fit(graph_run, k) for k in aff if k.startswith("memset:")}
    artifact("llamacpp_copies_syncs_per_token.json", {"copies": copies, "syncs": syncs, "memsets": memsets,
                                                      "n_vocab": graph_run["vocab"]})
    # One device-to-host copy per llama_decode: the logits of its one output
    # row (n_vocab floats) into llama.cpp's output buffer, pinned host memory.
    assert copies.get("memcpy:device_to_host:pinned") == (1, 0), copies
    assert copies.get("memcpy_bytes:device_to_host:pinned") == (4 * graph_run["vocab"], 0), copies
    # the inputs of every step (positions, mask, KV indices, the embeddings the
    # CPU looked up) go up from pinned buffers, a fixed number per token; none pageable
    s_h2d, _ = copies.get("memcpy:host_to_device:pinned", (0, 0))
    assert s_h2d >= 1, copies
    assert copies.get("memcpy:host_to_device:pageable", (0, 0))[0] == 0, copies
    assert copies.get("memcpy:device_to_host:pageable", (0, 0))[0] == 0, copies  # per request only (above)
    # the host waits for each step's logits at least once
    assert sum(s for s, _ in syncs.values()) >= 1, syncs
    assert fit(graph_run, "dropped") == (0, 0)


@cuda
def test_graph_mode_records_nothing_dropped(graph_run):
    assert counts(graph_run["final_live"], graph_run["pid"]).get("dropped", 0) == 0


# -- node mode --------------------------------------------------------------------------------

@cuda
def test_node_mode_names_the_decode_graphs_kernels(node_run):
    aff = node_run["affine"]
    # no replay at all: the key is absent from every delta (nothing was measured as a graph)
    assert not [k for k in aff if k.startswith("graph:")] and not any(d.get("replays") for d in node_run["deltas"])
    doc = node_run["snapshots"][-1][0]
    assert [m["stats"]["value"] for m in doc["metrics"] if m["name"] == "cuda_graph_trace_mode"] == [1]
    graphs = [m for m in doc["metrics"] if m["name"] == "cuda_graphs_nanoseconds"]
    assert all(m["stats"]["frames"] == [] for m in graphs), graphs  # empty: measured zero
    per_token = {k[len("kernel:"):]: fit(node_run, k)[0] for k in aff if k.startswith("kernel:")}
    per_token = {sym: s for sym, s in per_token.items() if s > 0}
    # (category, display name, demangled), as the payload and graphsignal-top name them
    named = {sym: (n.category, n.display_name, n.demangled)
             for sym, n in zip(per_token, kernel_names.NAMES.describe_all(list(per_token)))}
    artifact("llamacpp_node_kernels_per_token.json",
             {d[1]: {"per_token": per_token[sym], "category": d[0], "symbol": sym} for sym, d in named.items()})
    families = {
        "matmul-vector": r"mul_mat_vec",  # ggml-cuda's GEMV kernels (f16: mul_mat_vec_f, quantized: _q)
        "attention": r"flash_attn|soft_max",  # flash attention, or the softmax of the plain path
        "norm": r"rms_norm",
        "rope": r"rope",  # rope_norm / rope_neox, or fused into rms_norm_mul_rope_f32
    }
    for fam, rx in families.items():
        hits = [d[1] for d in named.values() if re.search(rx, d[2])]
        assert hits, "no %s kernel among the per-token kernels %s" % (fam, sorted(d[1] for d in named.values()))
    cats = {d[0] for d in named.values()}
    assert {"gemm", "normalization"} <= cats and cats & {"attention", "normalization"}


@cuda
def test_node_and_graph_mode_count_the_same_work(graph_run, node_run):
    g, n = graph_run["affine"], node_run["affine"]
    s_node, c_node = fit(node_run, "kernels")
    c_graph = fit(graph_run, "kernels")[1]
    k = -fit(graph_run, "replays")[1]
    # node mode: the decode graph's G kernels for each of the (T - k) replays
    # of a request, plus the same eager passes as graph mode
    assert s_node > 0
    assert c_node == c_graph - k * s_node, (s_node, c_node, c_graph, k)
    # copies between host and device, and syncs, are the host's own calls,
    # outside any graph: the same in both modes
    host = [key for key in set(g) | set(n) if key.startswith(("sync:", "memcpy:host_to_device", "memcpy:device_to_host"))]
    assert {key: g.get(key, (0, 0)) for key in host} == {key: n.get(key, (0, 0)) for key in host}


# -- under load: 4 clients ----------------------------------------------------------------------

def load_run(name, spec, seconds=10.0):
    eng = Engine(name, spec)
    try:
        load = Load(eng.port, 4, PROMPT, 128).start()
        time.sleep(2.0)
        # 10 polls a second: about 100 samples, so that p99 is not simply the slowest one
        poller = SignalsPoller("http://127.0.0.1:%d/signals" % eng.listen, 0.1).start()
        time.sleep(seconds / 2)
        mid = eng.signals()
        top = subprocess.run([sys.executable, "-m", "graphsignal.cli.top", "--once", "--port", str(eng.listen),
                              "--no-color"], capture_output=True, text=True, timeout=60)
        time.sleep(seconds / 2)
        poller.stop()
        load.stop(120)
        doc, m = eng.quiesce()
        # the scrape after the engine settled: the summary and the engine's own counters agree
        t_settled = time.time_ns()

        def scraped():
            d = eng.signals()
            ts = [x["stats"]["value"] for x in d["metrics"] if x["name"] == "prometheus_scrape_timestamp_ns"]
            return d if ts and ts[0] > t_settled else None

        deadline = time.monotonic() + 30
        final = None
        while final is None and time.monotonic() < deadline:
            final = scraped()
            time.sleep(0.3)
        pid = eng.pid()
    finally:
        eng.stop()
    ms = [x * 1e3 for x in poller.latencies]
    assert final is not None, "no scrape after the engine settled"
    out = {"mid": mid, "final": final, "server_metrics": m, "signals_ms": ms, "load_errors": load.errors, "done": len(load.done), "top": top, "pid": pid,
           "payload_at_exit": eng.final_payload()}
    artifact("llamacpp_load_%s.json" % name, {
        "signals_p50_ms": percentile(ms, 50), "signals_p99_ms": percentile(ms, 99), "polls": len(ms),
        "engine_mid": mid.get("engine"), "engine_final": final and final.get("engine"),
        "server_metrics": m, "counts_final": counts(doc, pid), "requests": len(load.done)})
    artifact("llamacpp_top_%s.txt" % name, top.stdout + top.stderr)
    return out


@pytest.fixture(scope="module")
def graph_load():
    return load_run("graph_load", "")


@pytest.fixture(scope="module")
def node_load():
    return load_run("node_load", "--cuda-graph-trace node")


def _engine_checks(run):
    mid, final, m = run["mid"]["engine"], run["final"]["engine"], run["server_metrics"]
    assert run["load_errors"] == [] and run["done"] > 0
    assert mid["engine"] == "llamacpp" and mid["requests_running"] >= 1
    w = mid["window"]
    assert w and w["generation_tokens_per_second"] and w["generation_tokens_per_second"] > 0
    # 4 clients on 4 slots: more than one request per batch step
    assert w["busy_slots_per_decode"] is not None and w["busy_slots_per_decode"] > 1.0, w
    assert w["decode_calls_per_second"] > 0
    # settled: the summary is the engine's own counters, and what they derive
    assert final["generation_tokens_total"] == m["llamacpp:tokens_predicted_total"]
    assert final["prompt_tokens_total"] == m["llamacpp:prompt_tokens_total"]
    assert final["decode_calls_total"] == m["llamacpp:n_decode_total"]
    assert final["busy_slots_per_decode"] == pytest.approx(m["llamacpp:n_busy_slots_per_decode"])
    assert final["prompt_seconds_per_token"] == pytest.approx(
        m["llamacpp:prompt_seconds_total"] / m["llamacpp:prompt_tokens_total"])
    assert final["decode_tokens_per_second_per_request"] == pytest.approx(
        m["llamacpp:tokens_predicted_total"] / m["llamacpp:tokens_predicted_seconds_total"])
    assert final["itl_seconds"]["mean"] == pytest.approx(1.0 / final["decode_tokens_per_second_per_request"])
    assert (final["requests_running"], final["requests_waiting"]) == (0, 0)
    # what this llama.cpp does not export is null, not zero
    for key in ("ttft_seconds", "kv_cache_usage_percent", "e2e_seconds", "tpot_seconds"):
        assert final[key] is None, key
    assert final["itl_seconds"]["p50"] is None


def test_engine_summary_from_llama_servers_real_metrics(graph_load):
    _engine_checks(graph_load)


def test_top_once_shows_the_engine_block(graph_load):
    top = graph_load["top"]
    assert top.returncode == 0, top.stderr
    assert " ENGINE llamacpp " in top.stdout and "busy slots/decode" in top.stdout
    assert "kv-cache -" in top.stdout  # not exported: shown as not measured


@cuda
def test_top_once_ranks_llamacpp_kernels_by_category(node_load):
    top = node_load["top"]
    assert top.returncode == 0, top.stderr
    table = top.stdout[top.stdout.index("[k]ernels"):].splitlines()
    rows = {name: next((ln for ln in table if name in ln), None) for name in ("mul_mat_vec", "rms_norm")}
    assert rows["mul_mat_vec"] and " gemm " in " %s " % rows["mul_mat_vec"], table
    assert rows["rms_norm"] and "normalization" in rows["rms_norm"], table
    att = next((ln for ln in table if "flash_attn" in ln or "soft_max" in ln), None)
    assert att and ("attention" in att or "normalization" in att), table


@cuda
@pytest.mark.parametrize("which", ["graph", "node"])
def test_nothing_dropped_and_signals_p99_under_10ms_under_load(which, graph_load, node_load):
    run = graph_load if which == "graph" else node_load
    ms = run["signals_ms"]
    assert len(ms) >= 50
    assert percentile(ms, 99) < 10.0, sorted(ms)[-5:]
    final = run["payload_at_exit"]
    dropped = [m for m in final["metrics"] if m["name"] == "graphsignal_dropped_records"]
    assert dropped and all(m["stats"]["total"] == 0 for m in dropped), dropped
    frames = sorted(f["name"] for m in final["metrics"] if m["name"] == "cuda_graphs_nanoseconds"
                    for f in m["stats"]["frames"])
    artifact("llamacpp_graph_frames_%s_4clients.json" % which, {"count": len(frames), "frames": frames})


# -- crashes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT])
def test_crash_mid_run_is_in_errors_and_the_exit_status_is_mirrored(sig):
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # no core files from the crash
    try:
        results = {}
        for name, spec in (("bare", "bare"), ("wrapped", "")):
            eng = Engine("crash_%s_%s" % (signal.Signals(sig).name, name), spec)
            load = Load(eng.port, 1, PROMPT, 128).start()
            try:
                deadline = time.monotonic() + 60
                while not load.done and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert load.done, "no request completed before the crash"
                pid = eng.pid()
                os.kill(pid, sig)
                eng.server.proc.wait(60)
                results[name] = (eng.server.proc.returncode, pid)
            finally:
                load.stop(30)
                eng.stop()
            if name == "wrapped":
                results["payload"] = eng.final_payload()
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert results["bare"][0] == -sig
    rc, pid = results["wrapped"]
    assert rc == results["bare"][0] == -sig  # graphsignal-run mirrors how its child died
    errs = [e for e in results["payload"]["errors"] if e["tags"].get("exit.signal") == str(int(sig))]
    artifact("llamacpp_crash_%s.json" % signal.Signals(sig).name, {"returncodes": results["bare"][0],
                                                                   "errors": results["payload"]["errors"]})
    assert len(errs) == 1, results["payload"]["errors"]
    e = errs[0]
    assert e["level"] == "error" and e["message"] == "process %d was killed by %s" % (pid, signal.Signals(sig).name)
    assert e["tags"]["process.pid"] == str(pid)
