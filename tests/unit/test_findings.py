"""Findings (graphsignal.findings) on real payloads: every recorded run in
tests/data, the engines' recorded /metrics texts, and documents the
sidecar's own renderer writes from stores holding one cause each (with a
near miss beside each, so a threshold that moved would show). A healthy
recording is a test that the list is empty."""
import glob
import json
import os

import numpy as np
import pytest
from werkzeug.test import Client

from graphsignal import findings
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.server import make_app
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.windows import window_stats
from graphsignal.sources import prometheus
from support.schema import assert_valid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
HEALTHY = ["h200/gemm_bf16", "h200/llamacpp_graph_c1", "h200/llamacpp_graph_c4", "h200/llamacpp_node_c1"]
# a recording with a planted cause: the ids its findings must start with
PLANTED = {"h200/gemm_fp32": ["fp32_gemm"],
           # a loop copying 8 MB in and out around one kernel, synchronizing every step
           "reference/signals-example": ["large_transfer_every_step", "sync_every_step"]}
PID = {"process.pid": "7"}
GPU = {"device.uuid": "GPU-1", "device.index": "0"}


def recorded(name):
    path = os.path.join(DATA, name + (".json" if name.startswith("reference") else ".signals.json"))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_every_recorded_payload_is_either_healthy_or_planted():
    names = {os.path.relpath(p, DATA)[:-len(".signals.json")]
             for p in glob.glob(os.path.join(DATA, "**", "*.signals.json"), recursive=True)}
    names |= {"reference/signals-example"}
    # a new recording must be named here: healthy (no finding) or with the cause planted in it
    assert sorted(names - set(PLANTED) - set(HEALTHY) - CASES_KNOWN) == []


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_recording_has_no_finding(name):
    assert findings.compute(recorded(name)) == []


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_recording_names_its_planted_cause_first(name):
    got = findings.compute(recorded(name))
    assert [f["id"] for f in got[:len(PLANTED[name])]] == PLANTED[name], got
    doc = dict({"engine": None}, **dict(recorded(name), ended_ns=None, exit_status=None, findings=got))
    assert_valid(doc)
    for f in got:  # every threshold compared is in the evidence, and held
        for e in f["evidence"]:
            if e["op"] == ">=":
                assert e["value"] >= e["threshold"], e
            elif e["op"] == "<=":
                assert e["value"] <= e["threshold"], e


def test_fp32_gemms_are_named_with_what_to_change():
    (f,) = findings.compute(recorded("h200/gemm_fp32"))
    assert f["impact"]["of"] == "gpu_time" and 0.5 < f["impact"]["share"] <= 0.75
    assert {c["target"] for c in f["change"]} == {"pytorch", "cuda"}
    assert any("set_float32_matmul_precision" in c["text"] for c in f["change"])
    assert f["confirm"][0]["direction"] == "down" and f["span"] == "run" and f["span_seconds"] > 5


# -- engines' recorded /metrics texts --------------------------------------------------
def engine_doc(name):
    s = MetricStore()
    with open(os.path.join(DATA, "engines", name), encoding="utf-8") as f:
        text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
    prometheus.apply(s, prometheus.parse_exposition(text))
    return json.loads(build_signals(s))


def test_a_queue_of_thousands_behind_running_requests_is_found_in_a_real_sglang_scrape():
    d = engine_doc("sglang_1.txt")  # 2826 queued, 162 running, KV 28 %
    (f,) = d["findings"]
    assert f["id"] == "requests_queueing" and f["change"][0]["target"] == "sglang"
    assert "--max-running-requests" in f["change"][0]["text"] and f["impact"]["share"] > 0.9


@pytest.mark.parametrize("name", ["llamacpp_2_live.txt", "llamacpp_5_live_4clients_a.txt", "sglang_2.txt",
                                  "sglang_reconstructed.txt", "vllm_1.txt", "vllm_2.txt", "trtllm_2.txt"])
def test_an_engine_scrape_without_a_cause_has_no_finding(name):
    # sglang_reconstructed: 3 waiting behind 24 running is a moment of a busy server, not a cap
    assert engine_doc(name)["findings"] == []


# -- one cause per store, through the sidecar's renderer -----------------------------------
def doc_of(store, seconds, extra=None):
    d = json.loads(build_signals(store, extra))
    d["start_ns"] = d["payload_ns"] - int(seconds * 1e9)
    d["findings"] = findings.compute(d)
    assert_valid(dict(d, ended_ns=None, exit_status=None))
    return d


def ids(d):
    return [f["id"] for f in d["findings"]]


def the_finding(d, fid):
    """The one finding of that id in the document."""
    (f,) = [x for x in d["findings"] if x["id"] == fid]
    return f


def gpu(store, busy_s, cpu_s):
    store.set_counter("gpu_busy_time_nanoseconds", GPU, int(busy_s * 1e9))
    store.set_counter("process_cpu_time_nanoseconds", {"process.root_pid": "7", "scope": "process_tree"},
                      int(cpu_s * 1e9))


@pytest.mark.parametrize("pageable_ns,fires", [(2_000_000_000, True), (50_000_000, False)])
def test_pageable_copies_every_step(pageable_ns, fires):
    s = MetricStore()
    s.add_profile("cuda_memcpy_nanoseconds", dict(PID, host_memory="pageable"),
                  [("host_to_device", pageable_ns, 5000)])
    s.set_counter("cuda_memcpy_bytes", dict(PID, host_memory="pageable", kind="host_to_device"), 5000 * 4 << 20)
    s.add_profile("cuda_kernels_nanoseconds", PID, [("k", 8_000_000_000, 5000)])
    gpu(s, 9, 10)
    d = doc_of(s, 10)
    assert ("pageable_copies" in ids(d)) == fires
    if fires:
        f = the_finding(d, "pageable_copies")
        assert f["confidence"] == "high" and f["impact"]["share"] == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("mib_per_copy,fires", [(4, True), (1, False)])
def test_pageable_copies_counted_by_the_light_collection(mib_per_copy, fires):
    """--cuda-trace light counts copies per kind and host memory (cuda_memcpy_calls) without timing them: their
    bytes at 5 GB/s stand in (4 MiB x 5000 in 10 s: 42%; 1 MiB x 500: under 3%)."""
    s = MetricStore()
    calls = 5000 if fires else 500
    s.add_profile("cuda_memcpy_calls", dict(PID, host_memory="pageable"), [("host_to_device", calls, calls)])
    s.add_profile("cuda_memcpy_calls", dict(PID, host_memory="pinned"), [("device_to_host", 9000, 9000)])
    s.set_counter("cuda_memcpy_bytes", dict(PID, host_memory="pageable", kind="host_to_device"),
                  calls * mib_per_copy << 20)
    s.set_counter("cuda_memcpy_bytes", dict(PID, host_memory="pinned", kind="device_to_host"), 9000 << 30)
    s.add_profile("cuda_kernel_launches", PID, [("k", 5000, 5000)])
    gpu(s, 9, 10)
    d = doc_of(s, 10)
    assert ("pageable_copies" in ids(d)) == fires
    if fires:
        f = the_finding(d, "pageable_copies")
        assert f["confidence"] == "low" and f["title"].startswith("5000 pageable copies (host_to_device first)")
        assert {e["series"] for e in f["evidence"]} == {"cuda_memcpy_calls", "cuda_memcpy_bytes"}
        assert f["impact"]["share"] == pytest.approx(5000 * 4 * (1 << 20) / 5e9 / 10 / 2, rel=0.01)
        assert f["confirm"][0] == {"series": "cuda_memcpy_calls", "tags": {"host_memory": "pageable"},
                                   "direction": "zero"}


@pytest.mark.parametrize("launches,mean_ns,fires", [(200_000, 3_000, True), (200_000, 60_000, False)])
def test_tiny_eager_kernels_without_graphs_are_launch_bound(launches, mean_ns, fires):
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", PID, [("_Z3addPf", launches * mean_ns, launches)])
    s.ensure_profile("cuda_graphs_nanoseconds", PID)
    s.set_gauge("cuda_graph_trace_mode", PID, 0)
    gpu(s, launches * mean_ns / 1e9, 10)
    assert ("launch_bound" in ids(doc_of(s, 10))) == fires


def test_node_mode_kernels_are_not_read_as_eager_launches():
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", PID, [("_Z3addPf", 600_000_000, 200_000)])
    s.set_gauge("cuda_graph_trace_mode", PID, 1)
    gpu(s, 0.6, 10)
    assert ids(doc_of(s, 10)) == []


def llama_store(replays, launches, tokens=10_000, cpu_s=9.0, busy_s=2.0, prompt=(100, 0.1), decode_s=9.0):
    s = MetricStore()
    text = ("# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %d\n"
            "# TYPE llamacpp:tokens_predicted_seconds_total counter\nllamacpp:tokens_predicted_seconds_total %f\n"
            "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total %d\n"
            "# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total %f\n"
            "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
            "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n"
            % (tokens, decode_s, prompt[0], prompt[1]))
    prometheus.apply(s, prometheus.parse_exposition(text))
    s.add_profile("cuda_kernels_nanoseconds", PID, [("_Z13mul_mat_vec_fI6__half", launches * 3000, launches),
                                                   ("_Z18flash_attn_ext_f16v", 1000, 10)] +
                  [("_Z1k%di" % i, 100, 10) for i in range(5)])
    s.add_profile("cuda_graphs_nanoseconds", PID, [("graph_1_n117", replays * 300_000, replays)] if replays else [])
    s.set_gauge("cuda_graph_trace_mode", PID, 0)
    gpu(s, busy_s, cpu_s)
    return s


def test_an_engine_with_cuda_graphs_off_is_named_and_replaces_launch_bound():
    d = doc_of(llama_store(replays=0, launches=1_170_000), 10)
    assert ids(d)[0] == "graphs_disabled" and "launch_bound" not in ids(d)
    assert "GGML_CUDA_DISABLE_GRAPHS" in d["findings"][0]["change"][0]["text"]
    assert ids(doc_of(llama_store(replays=10_000, launches=500), 10)) == []


def test_layers_on_the_cpu_from_the_load_line_or_the_cores():
    s = llama_store(replays=10_000, launches=500, cpu_s=80, busy_s=2)
    assert ids(doc_of(s, 10)) == ["cpu_offload"]
    s = llama_store(replays=10_000, launches=500, cpu_s=9, busy_s=5)
    s.add_error("warning", "load_tensors: offloaded 4/9 layers to GPU", tags={"error.kind": "offload"})
    (f,) = doc_of(s, 10)["findings"]
    assert f["id"] == "cpu_offload" and f["title"] == "only 4 of 9 layers are on the GPU" and f["confidence"] == "high"


def test_flash_attention_off_shows_as_soft_max_in_the_prompt_kernels():
    s = llama_store(replays=10_000, launches=500, busy_s=5)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "8"}, [("_Z12soft_max_f32ILb1EEvPKf", 500_000, 40)])
    assert ids(doc_of(s, 10)) == []  # flash_attn kernels ran too: it is on
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", PID, [("_Z12soft_max_f32ILb1EEvPKf", 500_000, 40)] +
                  [("_Z1k%di" % i, 100_000, 10) for i in range(5)])
    prometheus.apply(s, prometheus.parse_exposition("# TYPE llamacpp:tokens_predicted_total counter\n"
                                                    "llamacpp:tokens_predicted_total 10\n"))
    assert ids(doc_of(s, 10)) == ["flash_attention_off"]


@pytest.mark.parametrize("prompt_s,fires", [(3.0, True), (0.05, False)])
def test_prompts_in_tiny_micro_batches(prompt_s, fires):
    # 10,000 decoded tokens in 9 s (0.9 ms each); 20,000 prompt tokens in prompt_s
    d = doc_of(llama_store(replays=10_000, launches=500, busy_s=5, prompt=(20_000, prompt_s)), 10)
    assert ids(d) == (["tiny_prompt_batches"] if fires else [])


def test_a_queue_over_the_window_and_the_history_block():
    s = llama_store(replays=10_000, launches=500, busy_s=5)
    s.take_history()
    s.set_gauge("llamacpp:requests_deferred", {}, 3)
    s.take_history()
    c = Client(make_app(s, window_stats))
    d = json.loads(c.get("/signals?window=5").get_data())
    (f,) = d["findings"]
    assert f["id"] == "requests_queueing" and f["span"] == "window" and "-np" in f["change"][0]["text"]
    assert f["evidence"][0]["stat"] == "mean"


def test_a_context_too_small_from_the_engines_console_lines():
    s = llama_store(replays=10_000, launches=500, busy_s=5)
    e = "srv    send_error: task id = 4, error: request (160 tokens) exceeds the available context size (128 tokens)"
    for _ in range(3):
        s.add_error("error", e, tags={"error.kind": "context"})
    (f,) = doc_of(s, 10)["findings"]
    assert f["id"] == "context_too_small" and f["evidence"][0]["value"] == 3 and "-c" in f["change"][0]["text"]


def test_kv_cache_near_full_replaces_the_queue_it_causes():
    s = MetricStore()
    prometheus.apply(s, prometheus.parse_exposition(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 20\n"
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 30\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.97\n"))
    assert ids(doc_of(s, 10)) == ["kv_cache_full"]


def test_one_slow_rank():
    s = MetricStore()
    for rank, compute_ns in (("0", 2e9), ("1", 2e9), ("2", 3e9), ("3", 2.05e9)):
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1" + rank, "rank": rank},
                      [("_Z4gemmPf", int(compute_ns), 1000),
                       ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", int(4e9 - compute_ns), 1000)])
    (f,) = doc_of(s, 10)["findings"]
    assert f["id"] == "slow_rank" and f["title"].startswith("rank 2 ") and f["impact"]["share"] == 0.1


def test_the_profilers_own_losses_and_a_source_that_never_answered():
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", PID, [("k", 10, 900)])
    s.add_counter("graphsignal_dropped_records", {"process.pid": "7", "writer": "cupti"}, 100)
    s.set_gauge("prometheus_scrape_up", {"url": "http://127.0.0.1:8000/metrics", "engine": "vllm"}, 0)
    s.add_counter("prometheus_scrape_failures_total", {"url": "http://127.0.0.1:8000/metrics", "engine": "vllm"}, 9)
    d = doc_of(s, 10)
    assert ids(d) == ["source_never_answered", "profiler_losses"]
    assert d["findings"][1]["impact"] == {"of": "data", "share": 0.1, "text": "records lost against records kept"}


def test_a_rule_that_fails_costs_its_own_findings_only():
    d = recorded("h200/gemm_fp32")
    d["metrics"].append({"name": "cuda_graph_captures", "type": "counter", "tags": {}, "stats": {"total": "x"}})
    d["errors"] = [{"message": None}, "not an entry"]
    assert [f["id"] for f in findings.compute(d)] == ["fp32_gemm"]
    assert findings.compute({}) == [] and findings.compute({"metrics": "x", "window": {"metrics": 3}}) == []


def test_the_renderer_decodes_only_what_the_rules_read():
    s = MetricStore()
    for i in range(50):
        s.add_histogram_values("myapp_%d_nanoseconds" % i, {}, np.array([5], dtype=np.uint64))
    s.add_profile("cuda_kernels_nanoseconds", PID, [("k", 1, 1)])
    assert findings.reads("cuda_kernels_nanoseconds") and not findings.reads("myapp_1_nanoseconds")
    assert json.loads(build_signals(s))["findings"] == []


# recordings of tests/data/llamacpp_cases are tests/unit/test_findings_cases.py's
CASES_KNOWN = {"llamacpp_cases/" + c for c in ("healthy", "one_slot", "graphs_off", "cpu_layers", "tiny_ubatch",
                                               "fa_off", "small_context")}


# -- --cuda-trace light: launches, copies and memsets counted, not timed ---------------------------------------

def light_store(launches=0, replays=0):
    s = MetricStore()
    if launches:
        s.add_profile("cuda_kernel_launches", PID, [("_Z3addPf", launches, launches)])
    s.add_profile("cuda_graphs_nanoseconds", dict(PID, duration="sampled"),
                  [("graph_1_n117", replays * 300_000, replays)] if replays else [])
    return s


def test_graphs_off_under_light_reads_the_launch_counts():
    s = light_store(launches=1_170_000)
    prometheus.apply(s, prometheus.parse_exposition("# TYPE llamacpp:tokens_predicted_total counter\n"
                                                    "llamacpp:tokens_predicted_total 10000\n"))
    gpu(s, 2, 9)
    (f,) = doc_of(s, 10)["findings"]
    assert f["id"] == "graphs_disabled"
    assert {"series": "cuda_kernel_launches", "tags": {}, "stat": "calls_per_token", "value": 117.0, "op": ">=",
            "threshold": 10.0, "unit": ""} in f["evidence"]
    s = light_store(launches=500, replays=10_000)
    prometheus.apply(s, prometheus.parse_exposition("# TYPE llamacpp:tokens_predicted_total counter\n"
                                                    "llamacpp:tokens_predicted_total 10000\n"))
    gpu(s, 2, 9)
    assert ids(doc_of(s, 10)) == []


def test_launch_bound_needs_the_kernels_length_which_light_does_not_measure():
    timed = MetricStore()
    timed.add_profile("cuda_kernels_nanoseconds", PID, [("_Z3addPf", 200_000 * 3_000, 200_000)])
    gpu(timed, 1, 9)
    assert ids(doc_of(timed, 10)) == ["launch_bound"]
    counted = light_store(launches=200_000)
    gpu(counted, 1, 9)
    assert ids(doc_of(counted, 10)) == []


@pytest.mark.parametrize("per_copy,fires", [(64 << 20, True), (64 << 10, False)])
def test_a_large_copy_every_step_under_light_is_timed_by_its_bytes(per_copy, fires):
    """1,000 steps (a kernel each) and a pinned host-to-device copy each: 64 MiB at 25 GB/s is 2.7 ms, 27 % of
    10 s (fires, confidence low: an estimate); 64 KiB is not large."""
    s = light_store(launches=1000)
    s.add_profile("cuda_memcpy_calls", dict(PID, host_memory="pinned"), [("host_to_device", 1000, 1000)])
    s.set_counter("cuda_memcpy_bytes", dict(PID, host_memory="pinned", kind="host_to_device"), 1000 * per_copy)
    gpu(s, 5, 9)
    d = doc_of(s, 10)
    assert ("large_transfer_every_step" in ids(d)) == fires
    if fires:
        f = the_finding(d, "large_transfer_every_step")
        assert f["confidence"] == "low" and f["title"].startswith("a 67.1 MB host to device copy every step")
        assert f["impact"]["share"] == pytest.approx(1000 * per_copy / 25e9 / 10, rel=0.01)
        assert f["confirm"][0]["series"] == "cuda_memcpy_calls"


def test_a_sync_every_step_under_light_counts_steps_by_the_launches():
    s = light_store(launches=1000)
    s.add_profile("cuda_sync_nanoseconds", PID, [("stream", 3_000_000_000, 1000)])
    gpu(s, 4, 9)
    assert ids(doc_of(s, 10)) == ["sync_every_step"]


def test_flash_attention_off_under_light_reads_the_launched_kernels_names():
    s = MetricStore()
    s.add_profile("cuda_kernel_launches", PID, [("_Z12soft_max_f32ILb1EEvPKf", 40, 40)] +
                  [("_Z1k%di" % i, 10, 10) for i in range(5)])
    prometheus.apply(s, prometheus.parse_exposition("# TYPE llamacpp:tokens_predicted_total counter\n"
                                                    "llamacpp:tokens_predicted_total 10\n"))
    (f,) = doc_of(s, 10)["findings"]
    assert f["id"] == "flash_attention_off" and f["confidence"] == "low"
    assert f["evidence"][1]["series"] == "cuda_kernel_launches" and f["evidence"][1]["value"] == pytest.approx(40 / 90)
    s.add_profile("cuda_kernel_launches", PID, [("_Z18flash_attn_ext_f16v", 10, 10)])
    assert ids(doc_of(s, 10)) == []
