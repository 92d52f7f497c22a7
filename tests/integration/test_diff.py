"""graphsignal-diff: two /signals payloads in, what changed out. On the
reference payload and changed copies of it (exact numbers), on payloads
of real runs under graphsignal-run (the CUPTI test shim's kernels, Python
probes), on engine payloads built from real Prometheus texts, and through
the command line (files, stdin, a live endpoint over HTTP, bad input, and
hostile endpoints and files: garbage, endless bodies, a trickle)."""
import copy
import json
import os
import subprocess
import sys
import textwrap

import uuid

import orjson
import pytest

from graphsignal import diff, findings
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.server import ServerThread, make_app
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.windows import window_stats
from support.gsrun import quiet_env, run_wrapped
from support.hostile_http import BINARY, HostileServer, assert_clean, console_script, escapes_inside
from test_cupti_collector import libs  # noqa: F401  (the fake libcupti and the injection library, built once)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
REFERENCE = os.path.join(HERE, "data", "reference", "signals-example.json")
ENGINES = os.path.join(HERE, "data", "engines")
DIFF = [sys.executable, "-m", "graphsignal.cli.diff"]
S = 1_000_000_000

FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
SGEMM = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"
BF16 = "_ZN7cutlass7Kernel2I56cutlass_80_tensorop_s16816gemm_bf16_64x64_64x4_nn_align8EEvNT_6ParamsE"


def reference():
    with open(REFERENCE) as f:
        return json.load(f)


def metric(doc, name, **tags):
    (m,) = [m for m in doc["metrics"] if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]
    return m


def changes(doc, kind=None, metric=None, frame=None):
    return [c for c in doc["changes"] if (kind is None or c["kind"] == kind) and
            (metric is None or c["metric"] == metric) and (frame is None or c["frame"] == frame)]


def one(doc, **kw):
    (c,) = changes(doc, **kw)
    return c


# -- on the reference payload ---------------------------------------------------------
def test_a_payload_against_itself_changes_nothing():
    doc = diff.compare(reference(), reference())
    assert doc["warnings"] == []
    assert doc["changes"] and all(c["delta"] == 0 for c in doc["changes"])
    assert all(c["ratio"] == 1.0 for c in doc["changes"] if c["before"])
    assert {c["kind"] for c in doc["changes"]} == {"profile", "counter"}
    ref = reference()
    covered = (ref["payload_ns"] - ref["start_ns"]) / S
    assert doc["before"] == {"label": "BEFORE", "source": "cumulative", "covered_seconds": round(covered, 6),
                             "cuda_graph_trace_mode": "graph", "cuda_trace": "on", "ended": False}
    assert doc["normalized_by"]["name"] == "second"  # a payload of a live run (no ended_ns): per second
    fill = one(doc, frame=FILL)
    assert fill["display_name"] == "vectorized_elementwise_kernel<FillFunctor>" and fill["category"] == "memory"
    assert fill["before"] == pytest.approx(5112898 / covered)
    assert fill["share"] == {"before": 1.0, "after": 1.0}


def test_rates_per_second_of_covered_time_per_call_share_and_one_sided_frames():
    before = reference()
    after = copy.deepcopy(before)
    # AFTER ran twice as long; the fill kernel got twice as fast per call,
    # a GEMM appeared, the copies are now from pinned memory
    after["payload_ns"] = after["start_ns"] + 2 * (before["payload_ns"] - before["start_ns"])
    k = metric(after, "cuda_kernels_nanoseconds")
    fill = k["stats"]["frames"][0]
    fill["value"] //= 2
    k["stats"]["frames"].append({"name": SGEMM, "value": 3 * fill["value"], "samples": 10})
    metric(after, "cuda_memcpy_nanoseconds")["tags"]["host_memory"] = "pinned"
    doc = diff.compare(before, after)
    covered = (before["payload_ns"] - before["start_ns"]) / S
    f = one(doc, frame=FILL)
    v0 = metric(before, "cuda_kernels_nanoseconds")["stats"]["frames"][0]["value"]
    assert f["stat"] == "per_second" and f["unit"] == "nanoseconds/second"
    assert f["before"] == pytest.approx(v0 / covered) and f["after"] == pytest.approx((v0 // 2) / (2 * covered))
    assert f["ratio"] == pytest.approx(0.25, rel=1e-6)
    assert f["per_call"]["ratio"] == pytest.approx(0.5, rel=1e-6)
    assert f["share"] == {"before": 1.0, "after": pytest.approx(0.25)}
    assert f["tags"] == {} and "only" not in f  # process.pid is left out of the match
    g = one(doc, frame=SGEMM)
    assert g["only"] == "after" and g["before"] is None and g["ratio"] is None
    assert g["delta"] == g["after"] == pytest.approx(3 * (v0 // 2) / (2 * covered))
    assert g["display_name"] == "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>" and g["category"] == "gemm"
    assert g["share"]["after"] == pytest.approx(0.75)
    # copies: pageable (untagged) ones gone, pinned ones new, by kind
    cp = changes(doc, metric="cuda_memcpy_nanoseconds")
    assert {(c["frame"], c["tags"].get("host_memory"), c.get("only")) for c in cp} == {
        ("host_to_device", None, "before"), ("device_to_host", None, "before"),
        ("host_to_device", "pinned", "after"), ("device_to_host", "pinned", "after")}
    # sorted by absolute delta within profiles
    prof = changes(doc, kind="profile")
    assert [abs(c["delta"]) for c in prof] == sorted((abs(c["delta"]) for c in prof), reverse=True)
    # counters: per second of covered time, totals alongside
    (c,) = [c for c in changes(doc, kind="counter") if c["tags"].get("kind") == "host_to_device"]
    assert c["total"] == {"before": 16777216000, "after": 16777216000, "delta": 0, "ratio": 1.0}
    assert c["ratio"] == pytest.approx(0.5)


def test_different_trace_modes_leave_the_time_profiles_out_with_a_warning():
    before, after = reference(), reference()
    metric(after, "cuda_graph_trace_mode")["stats"]["value"] = 1
    doc = diff.compare(before, after)
    assert len(doc["warnings"]) == 1
    w = doc["warnings"][0]
    assert "graph" in w and "node" in w and "cuda_kernels_nanoseconds" in w and "same mode" in w
    assert {c["metric"] for c in changes(doc, kind="profile")} == {"cuda_sync_nanoseconds"}
    assert doc["after"]["cuda_graph_trace_mode"] == "node"


def test_a_run_without_cuda_tracing_leaves_the_cuda_series_out_with_a_warning():
    # --cuda-trace off: no cuda_* series because none were collected, not because the work went away
    before, after = reference(), reference()
    after["metrics"] = [m for m in after["metrics"] if not m["name"].startswith("cuda_")]
    after["context"]["cuda.trace"] = "off"
    # a probe of the user's that happens to be called cuda_...: collected either way, so compared
    probe = {"name": "cuda_myprep_nanoseconds", "type": "profile", "tags": {"process.pid": "7"}, "updated_ns": 1,
             "stats": {"value": 400, "samples": 4, "frames": [{"name": "prep", "value": 400, "samples": 4}]}}
    before["metrics"].append(probe)
    after["metrics"].append(dict(probe, stats=dict(probe["stats"], frames=[{"name": "prep", "value": 100,
                                                                           "samples": 4}])))
    doc = diff.compare(before, after)
    assert {c["metric"] for c in doc["changes"] if c["metric"].startswith("cuda_")} == {"cuda_myprep_nanoseconds"}
    assert one(doc, metric="cuda_myprep_nanoseconds")["ratio"] == pytest.approx(0.25, rel=0.05)
    assert "counter" in {c["kind"] for c in doc["changes"]}  # the rest is still compared
    (w,) = [w for w in doc["warnings"] if "--cuda-trace off" in w]
    assert "AFTER ran with CUDA tracing off" in w and "cuda_kernels_nanoseconds" in w and "cuda_memcpy_bytes" in w
    assert "cuda_myprep" not in w
    assert (doc["after"]["cuda_trace"], doc["before"]["cuda_trace"]) == ("off", "on")
    assert (doc["after"]["cuda_graph_trace_mode"], doc["before"]["cuda_graph_trace_mode"]) == (None, "graph")
    assert not [w for w in doc["warnings"] if "same mode" in w]  # not the graph/node warning
    assert "cuda trace off" in diff.to_text(doc) and "cuda graph trace graph" in diff.to_text(doc)
    # both untraced: nothing to leave out, nothing to warn about
    doc = diff.compare(after, copy.deepcopy(after))
    assert not [w for w in doc["warnings"] if "--cuda-trace off" in w]


def test_a_cut_profile_is_warned_about():
    before, after = reference(), reference()
    k = metric(before, "cuda_kernels_nanoseconds")
    k["stats"]["frames"] = [{"name": "_Z1kILi%dEEvv" % i, "value": 1000 - i, "samples": 1} for i in range(250)]
    doc = diff.compare(before, after)
    assert any("250 largest frames" in w for w in doc["warnings"])


def test_histograms_compare_mean_p50_p95_and_merge_processes():
    def payload(scale, pids):
        s = MetricStore()
        for pid in pids:
            s.add_histogram_values("step_duration_nanoseconds", {"process.pid": pid},
                                   [int(v * scale) for v in (1_000_000, 2_000_000, 3_000_000, 10_000_000)])
        return orjson.loads(build_signals(s))

    doc = diff.compare(payload(1, ["1"]), payload(2, ["7", "8"]))
    h = one(doc, kind="histogram")
    assert h["metric"] == "step_duration_nanoseconds" and h["stat"] == "mean" and h["unit"] == "nanoseconds"
    assert h["before"] == 4_000_000 and h["after"] == 8_000_000 and h["ratio"] == 2.0
    assert h["count"] == {"before": 4, "after": 8, "delta": 4, "ratio": 2.0}
    assert h["p50"]["before"] == pytest.approx(2_000_000, rel=0.02)
    assert h["p50"]["after"] == pytest.approx(4_000_000, rel=0.05)  # two processes' buckets merged
    assert h["p95"]["after"] > h["p50"]["after"]


def engine_payload(name):
    s = MetricStore()
    with open(os.path.join(ENGINES, name)) as f:
        prometheus.apply(s, prometheus.parse_exposition(f.read()))
    return orjson.loads(build_signals(s))


def test_the_engine_summary_is_compared():
    # two SGLang servers' real /metrics texts
    b, a = engine_payload("sglang_reconstructed.txt"), engine_payload("sglang_1.txt")
    a["payload_ns"] = a["start_ns"] + 10 * S
    b["payload_ns"] = b["start_ns"] + 10 * S
    doc = diff.compare(b, a)
    eng = {c["metric"]: c for c in changes(doc, kind="engine")}
    assert {"engine.generation_tokens_per_second", "engine.prompt_tokens_per_second", "engine.ttft_seconds",
            "engine.e2e_seconds"} <= set(eng)
    t = eng["engine.generation_tokens_per_second"]
    assert t["before"] == pytest.approx(b["engine"]["generation_tokens_total"] / 10)
    assert t["after"] == pytest.approx(a["engine"]["generation_tokens_total"] / 10)
    ttft = eng["engine.ttft_seconds"]
    assert ttft["before"] == b["engine"]["ttft_seconds"]["mean"] and ttft["p95"]["after"] == \
        a["engine"]["ttft_seconds"]["p95"]
    assert changes(doc, kind="counter", metric="sglang:generation_tokens_total")


def test_windows_are_compared_when_both_payloads_have_one():
    def payload(per_second):
        s = MetricStore()
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"}, [(FILL, 10 * S, 10)])  # before the window
        s.take_history(ts=s.start_ns)
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"}, [(FILL, 2 * per_second, 4)])
        s.take_history(ts=s.start_ns + 2 * S)
        return orjson.loads(build_signals(s, {"window": window_stats(s, 2)}))

    b, a = payload(1_000_000), payload(3_000_000)
    doc = diff.compare(b, a)
    assert doc["before"]["source"] == doc["after"]["source"] == "window"
    assert doc["before"]["covered_seconds"] == 2.0
    f = one(doc, frame=FILL)
    assert f["before"] == 1_000_000 and f["after"] == 3_000_000 and f["ratio"] == 3.0
    cum = diff.compare(b, a, use_window=False)
    assert cum["before"]["source"] == "cumulative" and one(cum, frame=FILL)["total"]["before"] == 10 * S + 2_000_000
    b.pop("window")
    mixed = diff.compare(b, a, use_window=True)
    assert mixed["before"]["source"] == "cumulative" and "BEFORE has none" in mixed["warnings"][0]


def test_text_is_a_table_sorted_by_absolute_change_of_time():
    before = reference()
    after = copy.deepcopy(before)
    frames = metric(after, "cuda_kernels_nanoseconds")["stats"]["frames"]
    frames.append({"name": SGEMM, "value": 10 * frames[0]["value"], "samples": 100})
    text = diff.to_text(diff.compare(before, after, "a.json", "b.json"))
    lines = text.splitlines()
    assert lines[0].startswith("largest change: kernel Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>")
    assert "new" in lines[0] and "[gemm]" in lines[0]
    # the findings that moved follow the headline: the new fp32 kernel is one
    assert lines[1].startswith("finding new          fp32_gemm (- -> ")
    lines = [lines[0]] + lines[2:]
    assert "a.json: cumulative" in lines[1] and "b.json: cumulative" in lines[2]
    table = lines[lines.index("PROFILES: time (or value) per second of covered time, largest change first") + 2:]
    assert "Kernel2<cutlass_80_simt_sgemm" in table[0] and " new " in table[0]


def test_the_headline_keeps_a_long_kernel_name_and_its_category_whole():
    # cuBLAS's plain C kernel names run past a terminal's width (seen on the H200:
    # the category at the end of the first line was what got cut)
    long = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_" \
           "execute_kernel__5x_cublas"
    before = reference()
    after = copy.deepcopy(before)
    frames = metric(before, "cuda_kernels_nanoseconds")["stats"]["frames"]
    frames.append({"name": long, "value": 10 * frames[0]["value"], "samples": 400})
    first = diff.to_text(diff.compare(before, after, "a.json", "b.json"), width=120).splitlines()[0]
    assert first.startswith("largest change: kernel " + long + ": ") and len(first) > 120
    assert "gone" in first and first.endswith("[gemm]"), first
    assert all(len(ln) <= 120 for ln in diff.to_text(diff.compare(before, after), width=120).splitlines()[1:])


def test_top_keeps_the_largest_changes_of_each_kind():
    before = reference()
    after = copy.deepcopy(before)
    metric(after, "cuda_sync_nanoseconds")["stats"]["frames"][0]["value"] *= 3
    doc = diff.top(diff.compare(before, after), 1)
    prof = changes(doc, kind="profile")
    assert len(prof) == 1 and prof[0]["metric"] == "cuda_sync_nanoseconds"
    assert doc["left_out"]["profile"] == 3 and doc["left_out"]["counter"] == 2


# -- the command line -------------------------------------------------------------------
def run_cli(*args, input=None):
    return subprocess.run(DIFF + list(args), capture_output=True, input=input, timeout=60)


def test_json_output_has_the_promised_keys_sorted_by_absolute_delta(tmp_path):
    after = reference()
    metric(after, "cuda_sync_nanoseconds")["stats"]["frames"][0]["value"] *= 2
    p = tmp_path / "after.json"
    p.write_text(json.dumps(after))
    r = run_cli(REFERENCE, str(p), "--json", "--top", "0")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"changes", "warnings"} <= set(out)
    for c in out["changes"]:
        assert {"metric", "frame", "tags", "before", "after", "delta", "ratio"} <= set(c)
    prof = [c for c in out["changes"] if c["kind"] == "profile"]
    assert prof[0]["metric"] == "cuda_sync_nanoseconds" and prof[0]["ratio"] == pytest.approx(2.0)
    assert [abs(c["delta"]) for c in prof] == sorted((abs(c["delta"]) for c in prof), reverse=True)


def test_stdin_and_a_live_endpoint_over_http():
    store = MetricStore()
    store.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"}, [(SGEMM, 5 * S, 100)])
    srv = ServerThread(make_app(store, window_stats), "127.0.0.1", 0)
    srv.start()
    assert srv.bound.wait(10) and srv.failed is None
    try:
        before = orjson.dumps(orjson.loads(build_signals(MetricStore())))
        r = run_cli("-", "http://127.0.0.1:%d" % srv.port, input=before)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().startswith("largest change: kernel Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_a")
    finally:
        srv.stop()


def one_line_exit_1(r, needle):
    """Exit status 1, nothing on stdout, one printable line on stderr that
    says why: no traceback, no byte the input held."""
    assert r.returncode == 1, r
    assert r.stdout == b""
    assert b"Traceback" not in r.stderr
    err = assert_clean(r.stderr)
    assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("graphsignal-diff: ") and needle in err, err
    assert all(32 <= ord(c) < 127 for c in err[:-1]), err
    return err


def write(path, data):
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("setup,needle", [
    (lambda d: str(d / "missing.json"), "No such file"),
    (lambda d: write(d / "x.json", b"{not json"), "not JSON"),
    (lambda d: write(d / "y.json", b"[1, 2]"), "not a /signals payload"),
    (lambda d: "http://127.0.0.1:9", "connection refused"),
    (lambda d: write(d / "empty.json", b""), "empty, not a /signals payload"),
    (lambda d: write(d / "page.json", b"\n <!DOCTYPE html><html>\x1b[2J</html>"), "an HTML or XML page, not JSON"),
    (lambda d: write(d / "bin.json", BINARY * 100), "binary data, not JSON"),
    (lambda d: write(d / "latin1.json", b'{"metrics": ["caf\xe9"]}'), "not JSON (str is not valid UTF-8"),
    (lambda d: str(d), "Is a directory"),
    # before: SIGSEGV (orjson recursed into the stack's end)
    (lambda d: write(d / "deep.json", b"[" * 300000 + b"]" * 300000), "nest 300000 levels deep"),
    (lambda d: "http://127.0.0.1:x/", "not a valid URL (nonnumeric port"),
    (lambda d: "http://[::1/", "not a valid URL (Invalid IPv6 URL)"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, setup, needle):
    one_line_exit_1(run_cli(REFERENCE, setup(tmp_path)), needle)


def test_a_huge_file_or_an_endless_one_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: 300 MB on paper, nothing on disk
        f.truncate(300 << 20)
    one_line_exit_1(run_cli(REFERENCE, str(big)), "big.json: larger than 256 MB")
    one_line_exit_1(run_cli(REFERENCE, "/dev/zero"), "/dev/zero: larger than 256 MB")
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run(DIFF + ["-", REFERENCE], stdin=zero, capture_output=True, timeout=120)
    one_line_exit_1(r, "-: larger than 256 MB")


GS_DIFF = console_script("graphsignal-diff")


@pytest.mark.parametrize("mode,needle,args", [
    ("binary", "/signals: binary data, not JSON", []),
    ("nohttp", "/signals: not an HTTP answer", []),
    ("deep", "/signals: not a /signals payload: objects and lists nest 300000 levels deep", []),  # before: SIGSEGV
    ("html", "/signals: an HTML or XML page, not JSON", []),
    ("shape", "/signals: JSON, but not a /signals payload (no metrics list)", []),
    ("error", "/signals: HTTP 500: \\x1b[2J\\x1b]0;pwned\\x07\\x1b[31m", []),  # escaped, not obeyed
    ("error_huge", "/signals: HTTP 500\n", []),
    # size: a 2 GB Content-Length is refused before the body, an endless body at the cap
    # (a deadline far away, so that only the cap can end them)
    ("huge", "/signals: the answer is 2048 MB, larger than 256 MB", ["--timeout", "600"]),
    ("endless", "/signals: the answer is larger than 256 MB", ["--timeout", "600"]),
    # one byte a second, of the body or of the status line: ended by the total deadline
    ("trickle", "/signals: no complete answer within 2 s", ["--timeout", "2"]),
    ("trickle_head", "/signals: no complete answer within 2 s", ["--timeout", "2"]),
])
def test_a_hostile_endpoint_is_one_line_and_exit_1(mode, needle, args):
    with HostileServer(mode) as srv:
        r = subprocess.run(GS_DIFF + [srv.url, REFERENCE] + args, capture_output=True, timeout=120)
        assert srv.requests >= 1
    err = one_line_exit_1(r, "graphsignal-diff: " + srv.url)
    assert needle in err, err


def test_control_characters_inside_a_payload_are_shown_escaped(tmp_path):
    evil = write(tmp_path / "evil.json", escapes_inside(REFERENCE))
    with HostileServer("payload", body=escapes_inside(REFERENCE)) as srv:
        for after in (evil, srv.url):
            r = subprocess.run(GS_DIFF + [REFERENCE, after], capture_output=True, timeout=120)
            assert r.returncode == 0 and r.stderr == b"", r.stderr
            out = assert_clean(r.stdout)
            assert out.startswith("largest change: kernel evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b: "), out
            assert "{x\\x1b[31m=y\\x1b[0m}" in out


def test_the_timeout_must_be_a_positive_number():
    for bad in ("0", "-1", "soon", "7200"):
        r = run_cli(REFERENCE, REFERENCE, "--timeout", bad)
        assert r.returncode == 2 and b"--timeout" in r.stderr, r.stderr


def test_usage_errors():
    r = run_cli(REFERENCE)
    assert r.returncode == 2 and b"AFTER" in r.stderr
    r = run_cli(REFERENCE, REFERENCE, "--top", "-1")
    assert r.returncode == 2 and b"--top" in r.stderr


# -- real runs under graphsignal-run ------------------------------------------------------
RUN = textwrap.dedent(r"""
    import ctypes, json, sys, time
    from graphsignal import probes
    fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(sys.argv[2])
    fake.fake_cupti_kernels.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint64]
    fake.fake_cupti_sync.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64]
    assert lib.InitializeInjection() == 1
    plan = json.loads(sys.argv[3])
    stage = probes.profile("demo_stage_nanoseconds")
    step = probes.histogram("demo_step_duration_nanoseconds")
    for name, n, ns in plan["kernels"]:
        fake.fake_cupti_kernels(name.encode(), 0, n, ns)
    fake.fake_cupti_sync(3, 0, plan["sync"])
    for _ in range(50):
        stage.add("tokenize", plan["tokenize"])
        stage.add("forward", plan["forward"])
        step.record(plan["forward"])
    time.sleep(1.2)  # the host source's reading, a window's worth
""")


def gemm_run(libs, gemm, ns, tokenize):  # noqa: F811 (the libs fixture's value)
    fake, lib = libs
    plan = {"kernels": [[gemm, 2000, ns], [FILL, 100, 1000]], "sync": 50_000, "tokenize": tokenize,
            "forward": ns * 40}
    # the stand-in libcupti hands syncs over as activity records, which the
    # activity collection translates (hybrid takes syncs from API callbacks)
    proc, signals = run_wrapped([sys.executable, "-c", RUN, fake, lib, json.dumps(plan)],
                                env=quiet_env(GRAPHSIGNAL_CUPTI_COLLECTION="activity"))
    assert proc.returncode == 0, proc.stderr
    return signals


@pytest.fixture(scope="module")
def two_runs(libs):  # noqa: F811
    # fp32 on CUDA cores (SIMT SGEMM) before, BF16 tensor cores after
    return gemm_run(libs, SGEMM, 200_000, 30_000), gemm_run(libs, BF16, 20_000, 30_000)


def test_payloads_of_real_runs_carry_kernel_display_names(two_runs):
    before, _ = two_runs
    (k,) = [m for m in before["metrics"] if m["name"] == "cuda_kernels_nanoseconds" and m["stats"]["frames"]]
    assert [(f["name"], f["display_name"], f["category"], f["value"], f["samples"]) for f in k["stats"]["frames"]] \
        == [(SGEMM, "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>", "gemm", 2000 * 200_000, 2000),
            (FILL, "vectorized_elementwise_kernel<FillFunctor>", "memory", 100 * 1000, 100)]


def test_diff_of_two_real_runs_names_the_gemm_first(two_runs, tmp_path):
    b, a = tmp_path / "before.json", tmp_path / "after.json"
    b.write_text(json.dumps(two_runs[0]))
    a.write_text(json.dumps(two_runs[1]))
    r = run_cli(str(b), str(a))
    assert r.returncode == 0, r.stderr
    first = r.stdout.decode().splitlines()[0]
    assert "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>" in first and "gone" in first, first
    out = json.loads(run_cli(str(b), str(a), "--json", "--top", "0").stdout)
    prof = [c for c in out["changes"] if c["kind"] == "profile"]
    assert prof[0]["frame"] == SGEMM and prof[0]["only"] == "before"
    (bf,) = [c for c in prof if c["frame"] == BF16]
    assert bf["only"] == "after" and bf["before"] is None and bf["delta"] == bf["after"] > 0
    assert bf["display_name"] == "Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x4_nn_align8>"
    assert bf["per_call"]["after"] == 20_000 and bf["calls"]["after"] == 2000
    fill = [c for c in prof if c["frame"] == FILL][0]
    assert fill["per_call"] == {"before": 1000, "after": 1000, "delta": 0, "ratio": 1.0}
    # probe profiles, syncs and histograms of the same runs
    fwd = [c for c in prof if c["metric"] == "demo_stage_nanoseconds" and c["frame"] == "forward"][0]
    assert fwd["total"]["before"] == 50 * 200_000 * 40 and fwd["total"]["ratio"] == pytest.approx(0.1)
    tok = [c for c in prof if c["metric"] == "demo_stage_nanoseconds" and c["frame"] == "tokenize"][0]
    assert tok["total"]["ratio"] == 1.0
    assert [c for c in prof if c["metric"] == "cuda_sync_nanoseconds" and c["frame"] == "stream"]
    (h,) = [c for c in out["changes"] if c["metric"] == "demo_step_duration_nanoseconds"]
    assert h["before"] == 200_000 * 40 and h["ratio"] == pytest.approx(0.1)
    assert out["warnings"] == []
    # the cumulative twin of the CPU gauge is compared too
    assert [c for c in out["changes"] if c["metric"] == "process_cpu_time_nanoseconds"]


# -- what the values are per: work done, not wall time (fixed work, live services, engines, --per) ----------
def stage_run(per_call, steps=100, seconds=None, ended=True, extra=None, pid="1", sampled_copy=None):
    """The final payload of a run of `steps` steps of stages {name: ns per
    call}; it covers the stages' time (or `seconds`)."""
    s = MetricStore()
    s.add_profile("demo_stage_nanoseconds", {"process.pid": pid},
                  [(name, ns * steps, steps) for name, ns in per_call.items()])
    s.set_counter("demo_steps_total", {"process.pid": pid}, steps)
    if sampled_copy is not None:
        tags = {"process.pid": pid, "host_memory": "pinned"}
        if sampled_copy:
            tags["duration"] = "sampled"
        s.add_profile("cuda_memcpy_nanoseconds", tags, [("host_to_device", 1000 * steps, steps)])
    for name, (kind, tags, value) in (extra or {}).items():
        if kind == "counter":
            s.set_counter(name, tags, value)
    doc = orjson.loads(build_signals(s))
    covered = seconds if seconds is not None else sum(per_call.values()) * steps / S
    doc["payload_ns"] = doc["start_ns"] + int(covered * S)
    if ended:
        doc["ended_ns"], doc["exit_status"] = doc["payload_ns"] - 1000, 0
    return doc


def headline_of(doc):
    return diff.to_text(doc).splitlines()[0]


@pytest.mark.parametrize("after,named", [
    ({"load": 2.2e6, "compute": 1e6}, "compute"),  # a stage got faster: the run got shorter
    ({"load": 2.2e6, "compute": 9e6}, "compute"),  # a stage got slower: the run got longer
    ({"load": 4.4e6, "compute": 4e6}, "load"),  # the other stage changed
])
def test_fixed_work_runs_are_compared_by_totals_and_name_the_stage_that_changed(after, named):
    # before: per second of covered time, the unchanged stage's share of a shorter run grew as much as the
    # changed one's shrank, and it was named the largest change in 4 of 6 runs of SKILL.md's example
    before = {"load": 2.2e6, "compute": 4e6}
    doc = diff.compare(stage_run(before), stage_run(after))
    assert doc["normalized_by"]["name"] == "run" and doc["warnings"] == []
    top = changes(doc, kind="profile")[0]
    assert top["frame"] == named and top["stat"] == "total" and top["unit"] == "nanoseconds"
    assert top["before"] == before[named] * 100 and top["after"] == after[named] * 100
    unchanged = [c for c in changes(doc, kind="profile") if c["frame"] != named]
    assert all(c["delta"] == 0 for c in unchanged)
    assert headline_of(doc).startswith("largest change: probe demo_stage_nanoseconds " + named)
    assert "compared: totals of each run" in diff.to_text(doc)


def test_runs_that_did_different_work_are_warned_about_and_per_names_the_work():
    b, a = stage_run({"load": 2e6, "compute": 4e6}, steps=100), stage_run({"load": 2e6, "compute": 4e6}, steps=50)
    doc = diff.compare(b, a)
    assert doc["normalized_by"]["name"] == "run"
    assert len(doc["warnings"]) == 1 and "not do the same work" in doc["warnings"][0] and "x0.50" in doc["warnings"][0]
    assert doc["warnings"][0] in diff.to_text(doc, width=80)  # whole, whatever the width
    per = diff.compare(b, a, per="demo_steps_total")
    assert per["normalized_by"]["name"] == "per demo_steps_total" and per["warnings"] == []
    assert all(c["delta"] == 0 for c in changes(per, kind="profile"))  # the same per step
    assert one(per, frame="compute")["unit"] == "nanoseconds/demo_steps_total"
    # the table keeps its columns: the unit of work is said in the section's title, not in every cell
    lines = diff.to_text(per, width=200).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("PROFILES"))
    assert "per demo_steps_total" in lines[head]
    name_col = lines[head + 1].index("NAME")
    rows = [line for line in lines[head + 2:head + 4]]
    assert rows and all(len(line) > name_col and line[name_col - 1] == " " for line in rows), lines[head:head + 4]
    assert all("/demo_steps_total" not in line for line in rows), rows
    # a profile's calls or a histogram's count name the work as well
    assert diff.compare(b, a, per="demo_stage_nanoseconds")["normalized_by"]["before"] == [200]
    with pytest.raises(diff.CannotCompare, match="--per nosuch: BEFORE and AFTER have no"):
        diff.compare(b, a, per="nosuch")


def test_live_runs_are_compared_per_second():
    # a service measured for 10 s each time: open-ended, no ended_ns
    b = stage_run({"decode": 1e6}, steps=1000, seconds=10, ended=False)
    a = stage_run({"decode": 2e6}, steps=1000, seconds=10, ended=False)
    doc = diff.compare(b, a)
    assert doc["normalized_by"]["name"] == "second"
    c = one(doc, frame="decode")
    assert c["stat"] == "per_second" and c["before"] == pytest.approx(1e8) and c["after"] == pytest.approx(2e8)
    # one side live is enough: its time is not a run's whole work
    assert diff.compare(stage_run({"decode": 1e6}), a)["normalized_by"]["name"] == "second"


def test_engine_runs_are_compared_per_generated_token():
    b, a = engine_payload("sglang_reconstructed.txt"), engine_payload("sglang_1.txt")
    for doc, tokens, kernel_ns in ((b, None, 5e9), (a, None, 6e9)):
        doc["metrics"].append({"name": "cuda_graphs_nanoseconds", "type": "profile", "tags": {},
                               "stats": {"frames": [{"name": "graph_1", "value": kernel_ns, "samples": 10}]},
                               "updated_ns": doc["payload_ns"]})
    doc = diff.compare(b, a)
    assert doc["normalized_by"]["name"] == "per generated token"
    tb, ta = b["engine"]["generation_tokens_total"], a["engine"]["generation_tokens_total"]
    assert doc["normalized_by"]["before"] == [tb] and doc["normalized_by"]["after"] == [ta]
    g = one(doc, frame="graph_1")
    assert g["stat"] == "per_token" and g["unit"] == "nanoseconds/token"
    assert g["before"] == pytest.approx(5e9 / tb) and g["after"] == pytest.approx(6e9 / ta)
    assert "/token" in diff.to_text(doc)


def test_several_runs_a_side_carry_their_spread_and_noise_ranks_last():
    def runs(compute, load_jitter):
        return [stage_run({"load": 2e6 + j, "compute": compute}) for j in load_jitter]

    # compute: 4 -> 3 ms, far outside its spread; load: unchanged but noisy, with a small shift inside the noise
    doc = diff.compare(runs(4e6, (0, 40e3, -40e3)), runs(3e6, (20e3, -50e3, 60e3)))
    comp, load = one(doc, frame="compute"), one(doc, frame="load")
    assert comp["significant"] is True and comp["spread"] == {"before": [4e8, 4e8], "after": [3e8, 3e8]}
    assert comp["before"] == 4e8 and comp["after"] == 3e8  # medians of the runs
    assert load["significant"] is False and load["spread"]["before"] == [2e6 * 100 - 4e6, 2e6 * 100 + 4e6]
    prof = changes(doc, kind="profile")
    assert prof.index(comp) < prof.index(load)
    assert headline_of(doc).startswith("largest change: probe demo_stage_nanoseconds compute")
    assert doc["before"]["runs"] == 3 and doc["before"]["label"] == "BEFORE#1, BEFORE#2, BEFORE#3"
    # nothing outside the spread: the headline says so
    quiet = diff.compare(runs(4e6, (0, 40e3, -40e3)), runs(4e6, (20e3, -50e3, 60e3)))
    assert headline_of(quiet).startswith("no change outside the run-to-run spread; the largest inside it: ")
    assert "~x" in diff.to_text(quiet)


def test_mixed_collections_are_warned_about_and_mixed_trace_modes_left_out():
    b = stage_run({"x": 1e6}, sampled_copy=False)
    a = stage_run({"x": 1e6}, sampled_copy=True)
    doc = diff.compare(b, a)
    c = one(doc, metric="cuda_memcpy_nanoseconds")
    assert "only" not in c and c["tags"] == {"host_memory": "pinned"}  # matched across collections
    (w,) = doc["warnings"]
    assert "cuda_memcpy_nanoseconds" in w and "exact in BEFORE and an estimate in AFTER" in w
    before, after = reference(), reference()
    metric(after, "cuda_graph_trace_mode")["stats"]["value"] = 1
    assert not changes(diff.compare([before, before], [after, after]), metric="cuda_kernels_nanoseconds")


# -- --cuda-trace light against the CUPTI collection: copies by kind and host memory ----------
def ring_run(kind, records, trace, seconds=10):
    """The final payload the sidecar makes of one ring of `kind` holding `records` (write() keywords), as a
    run of --cuda-trace `trace` that covered `seconds`."""
    run_id = "d" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    suffix = "interpose" if kind == L.KIND_INTERPOSE else "cupti"
    w = Writer("%s%s-%d-%s" % (L.RING_PREFIX, run_id, os.getpid(), suffix), kind=kind, capacity=1 << 10,
               strings_size=1 << 12)
    try:
        for r in records:
            w.write(r.pop("type"), **r)
        poller.poll_once()
    finally:
        poller.cleanup_all()
    doc = orjson.loads(build_signals(store))
    doc["context"]["cuda.trace"] = trace
    doc["payload_ns"] = doc["start_ns"] + int(seconds * S)
    doc["ended_ns"], doc["exit_status"] = doc["payload_ns"], 0
    return doc


PINNED_H2D, PAGEABLE_H2D, PINNED_D2H = (1, 2 | 3 << 8), (1, 1 | 3 << 8), (2, 3 | 2 << 8)  # (kind, src | dst << 8)


def cupti_copies(n_pinned, n_pageable):
    return ring_run(L.KIND_CUPTI, [dict(type=L.REC_MEMCPY, sub=k, name_id=m, value=1000, extra=b)
                                   for (k, m), n, b in ((PINNED_H2D, n_pinned, 4096), (PAGEABLE_H2D, n_pageable, 1 << 20),
                                                        (PINNED_D2H, 5, 64)) for _ in range(n)], "on")


def light_copies(n_pinned, n_pageable, older=False, seconds=10):
    """The interposer's counts of the same copies (older: without the host memory it now sends)."""
    def mem(m):
        return 0 if older else (m & 0xFF if m & 0xFF in (1, 2) else m >> 8)
    return ring_run(L.KIND_INTERPOSE, [dict(type=L.REC_MEMCPY_COUNT, sub=k, name_id=mem(m) if k == 1 else
                                            mem(m) << 8, value=n, extra=n * b)
                                       for (k, m), n, b in ((PINNED_H2D, n_pinned, 4096),
                                                            (PAGEABLE_H2D, n_pageable, 1 << 20), (PINNED_D2H, 5, 64))
                                       if n], "light", seconds)


def test_a_light_run_compares_its_copies_with_a_cupti_run_by_kind_and_host_memory():
    """BEFORE (CUPTI) made 100 pageable copies; AFTER (light) pinned 80 of them: the pageable series went down,
    the pinned one up, each matched across the collections, and the pageable_copies finding reads the light
    payload as it reads CUPTI's (100 copies of 1 MiB at 5 GB/s in a 0.5 s run: 4%; 99 copies are too few)."""
    before, after = cupti_copies(10, 100), light_copies(90, 20)
    doc = diff.compare(before, after)
    calls = {(c["frame"], c["tags"].get("host_memory")): (c["before"], c["after"], c.get("only"))
             for c in changes(doc, metric="cuda_memcpy_calls")}
    assert doc["normalized_by"]["name"] == "run"  # finished runs: their totals
    assert calls == {("host_to_device", "pinned"): (10, 90, None), ("host_to_device", "pageable"): (100, 20, None),
                     ("device_to_host", "pinned"): (5, 5, None)}
    nbytes = {(c["tags"]["kind"], c["tags"].get("host_memory")): c["total"] for c in changes(doc, kind="counter")
              if c["metric"] == "cuda_memcpy_bytes"}
    assert nbytes[("host_to_device", "pageable")] == {"before": 100 << 20, "after": 20 << 20,
                                                      "delta": -80 << 20, "ratio": 0.2}
    (w,) = [w for w in doc["warnings"] if "--cuda-trace light" in w]
    assert "compared as counts" in w and not [w for w in doc["warnings"] if "host_memory" in w]
    (f,) = [f for f in findings.compute(light_copies(0, 100, seconds=0.5)) if f["id"] == "pageable_copies"]
    assert f["title"].startswith("100 pageable copies (host_to_device first)") and f["confidence"] == "low"
    assert "pageable_copies" not in [f["id"] for f in findings.compute(light_copies(0, 99, seconds=0.5))]


def test_a_light_run_without_host_memory_compares_copies_per_kind_with_a_warning():
    """A light run of a graphsignal before the split: every run's copies are compared per kind, never as pinned
    and pageable series gone on one side."""
    doc = diff.compare(cupti_copies(10, 100), light_copies(90, 20, older=True))
    calls = {(c["frame"], c["tags"].get("host_memory")): (c["before"], c["after"], c.get("only"))
             for c in changes(doc, metric="cuda_memcpy_calls")}
    assert calls == {("host_to_device", None): (110, 110, None), ("device_to_host", None): (5, 5, None)}
    assert sorted(c["tags"]["kind"] for c in changes(doc, kind="counter") if c["metric"] == "cuda_memcpy_bytes"
                  and "host_memory" not in c["tags"] and "only" not in c) == ["device_to_host", "host_to_device"]
    (w,) = [w for w in doc["warnings"] if "host_memory" in w]
    assert w.startswith("AFTER counted copies without telling pinned from pageable")


def test_the_command_line_takes_several_runs_a_side_and_per(tmp_path):
    files = []
    for i, compute in enumerate((4e6, 4.1e6, 3.9e6, 2e6, 2.1e6)):
        p = tmp_path / ("run%d.json" % i)
        p.write_text(json.dumps(stage_run({"load": 2e6, "compute": compute})))
        files.append(str(p))
    r = run_cli(*files[:3], "--", *files[3:], "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["normalized_by"]["name"] == "run" and out["before"]["runs"] == 3 and out["after"]["runs"] == 2
    c = out["changes"][0]
    assert c["frame"] == "compute" and c["significant"] is True and c["before"] == 4e8
    r = run_cli(files[0], files[3], "--per", "demo_steps_total")
    assert r.returncode == 0 and "compared: per unit of demo_steps_total" in r.stdout.decode(), r.stdout
    r = run_cli(files[0], files[3], "--per", "nosuch")
    assert r.returncode == 1 and r.stderr.decode().startswith("graphsignal-diff: --per nosuch:"), r.stderr
    for bad in ([files[0], "--"], [files[0], files[1], files[2]], ["-", "--", "-"]):
        r = run_cli(*bad)
        err = r.stderr.decode()
        assert r.returncode == 2 and err.startswith("graphsignal-diff: error: ") and err.count("\n") == 1, \
            (bad, err)


# -- sampled CUDA graph timing: the same series, exact on one side, estimated on the other ----------
GRAPH = "graph_0c5489cbc2f75fa1_n3"


def graph_run(parts, kernels=None, steps=1000):
    """A run's final payload with cuda_graphs_nanoseconds frames in series of
    the given tags: parts = [(extra tags, ns, calls)] (an exact part and a
    sampled part of one frame, as the default collection writes them);
    kernels likewise for cuda_kernels_nanoseconds ({symbol: parts})."""
    s = MetricStore()
    base = {"process.pid": "1", "device.cuda_index": "0"}
    for tags, ns, calls in parts:
        s.add_profile("cuda_graphs_nanoseconds", dict(base, **tags), [(GRAPH, ns, calls)])
    for sym, ps in (kernels or {}).items():
        for tags, ns, calls in ps:
            s.add_profile("cuda_kernels_nanoseconds", dict(base, **tags), [(sym, ns, calls)])
    s.set_counter("demo_steps_total", {"process.pid": "1"}, steps)
    doc = orjson.loads(build_signals(s))
    doc["payload_ns"] = doc["start_ns"] + 10 * S
    doc["ended_ns"], doc["exit_status"] = doc["payload_ns"] - 1000, 0
    return doc


SAMPLED = {"duration": "sampled"}
EST_COUNT = {"duration": "sampled", "count": "estimated"}


def test_a_frame_timed_exactly_before_and_partly_sampled_after_is_matched_and_warned_about():
    before = graph_run([({}, 1000 * 2000, 1000)])  # the activity collection: every replay traced
    after = graph_run([({}, 40 * 1500, 40), (SAMPLED, 960 * 1500, 960)])  # the default: 40 traced, then sampled
    doc = diff.compare(before, after)
    c = one(doc, metric="cuda_graphs_nanoseconds", frame=GRAPH)
    assert "only" not in c and c["tags"] == {"device.cuda_index": "0"}  # one change: both series of the frame
    assert c["total"]["before"] == 2_000_000 and c["total"]["after"] == 1_500_000
    assert c["calls"] == {"before": 1000, "after": 1000, "delta": 0, "ratio": 1.0}
    assert c["estimated"] == {"before": [], "after": ["time"]}
    (w,) = doc["warnings"]
    assert "cuda_graphs_nanoseconds" in w and "exact in BEFORE and partly an estimate in AFTER" in w
    assert "[estimated after: time]" in diff.to_text(doc)
    # wholly sampled on both sides: nothing to warn about, still marked
    both = diff.compare(graph_run([(SAMPLED, 10, 1)]), graph_run([(SAMPLED, 20, 1)]))
    assert both["warnings"] == [] and one(both, frame=GRAPH)["estimated"] == {"before": ["time"], "after": ["time"]}


def test_node_kernels_with_estimated_counts_match_exact_ones_with_a_warning():
    k = "_Z6k_gemvPKfPf"
    before = graph_run([], kernels={k: [({}, 3000 * 10, 3000)]})
    after = graph_run([], kernels={k: [({}, 30 * 10, 30), (EST_COUNT, 2975 * 10, 2975)]})
    doc = diff.compare(before, after)
    c = one(doc, metric="cuda_kernels_nanoseconds", frame=k)
    assert c["calls"]["after"] == 3005 and c["estimated"] == {"before": [], "after": ["count", "time"]}
    ws = doc["warnings"]
    assert any("the time is exact in BEFORE and partly an estimate in AFTER" in w for w in ws), ws
    assert any("the counts are exact in BEFORE and partly an estimate in AFTER" in w for w in ws), ws
    # several runs a side: the same warnings, once each
    doc = diff.compare([before, before], [after, after])
    assert len([w for w in doc["warnings"] if w.startswith("cuda_kernels_nanoseconds")]) == 2


def test_the_timeout_bounds_every_url_of_a_run_together():
    # before: each URL had the whole --timeout, so two endpoints that each answer just
    # inside it took twice as long (and the default, 30 s per URL, never ended within 30 s)
    with open(REFERENCE, "rb") as f:
        body = f.read()
    with HostileServer("late", body=body, late=2.5) as srv:
        r = subprocess.run(GS_DIFF + [srv.url, srv.url, "--timeout", "4"], capture_output=True, timeout=120)
    err = one_line_exit_1(r, "graphsignal-diff: " + srv.url)  # 2.5 s each: the second is past 4 s in all
    assert "no complete answer within 4 s" in err, err
