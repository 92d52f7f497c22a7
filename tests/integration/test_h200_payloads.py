"""Payloads recorded on an H200 (2026-12-01, scripts/run_gpu_suite.sh and
scripts/engine_e2e.py with llama.cpp's llama-server and the tiny 8-layer
model of shared/engines): what the GPU runs produced, kept so that the
readers of a payload (graphsignal-diff, kernel names, graph identity) are
tested on real data on every machine.

  gemm_fp32/gemm_bf16      tests/gpu/test_agent_loop_gpu.py's 4096^3 GEMM loops
  llamacpp_graph_c4        default mode, 4 concurrent clients, 128-token completions
  llamacpp_node_c1         --cuda-graph-trace node, 1 client
  llamacpp_graph_c1        default mode, 1 client (2026-12-02: a final payload with ended_ns,
                           exit_status and the engine summary's work_per_token)
"""
import json
import os
import re
import subprocess
import sys

import pytest

from graphsignal import diff

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "h200")


def load(name):
    with open(os.path.join(DATA, name + ".signals.json")) as f:
        return json.load(f)


def series(doc, name):
    return [m for m in doc["metrics"] if m["name"] == name]


def frames(doc, name):
    return [f for m in series(doc, name) for f in m["stats"]["frames"]]


def test_the_diff_of_fp32_and_bf16_gemm_runs_names_the_fp32_gemm_first():
    b, a = os.path.join(DATA, "gemm_fp32.signals.json"), os.path.join(DATA, "gemm_bf16.signals.json")
    r = subprocess.run([sys.executable, "-m", "graphsignal.cli.diff", b, a], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    # cuBLAS's fp32 GEMM on CUDA cores (ffma), gone in the bf16 run
    assert first.startswith("largest change: kernel sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8")
    assert "ffma" in first and "gone" in first and first.endswith("[gemm]"), first
    doc = diff.compare(load("gemm_fp32"), load("gemm_bf16"))
    assert doc["warnings"] == []
    new = [c for c in doc["changes"] if c["kind"] == "profile" and c.get("only") == "after"]
    assert new and new[0]["frame"].startswith("nvjet_sm90") and new[0]["category"] == "gemm"


def test_llamacpp_graphs_are_named_by_what_they_do_and_recaptures_fold():
    doc = load("llamacpp_graph_c4")
    graphs = frames(doc, "cuda_graphs_nanoseconds")
    # before graphs were named by content, 4 clients scattered the decode step over 97 graph_<id> frames
    assert 1 <= len(graphs) <= 3
    assert all(re.fullmatch(r"graph_[0-9a-f]{16}_n\d+", g["name"]) for g in graphs), graphs
    decode = max(graphs, key=lambda g: g["samples"])
    captures = {m["tags"]["graph"]: m["stats"]["total"] for m in series(doc, "cuda_graph_captures")}
    assert set(captures) >= {g["name"] for g in graphs} and captures[decode["name"]] >= 1
    # one replay per decode step, at most the few eager steps fewer (prompt passes, warm-up)
    steps = doc["engine"]["decode_calls_total"]
    assert steps - 8 <= sum(g["samples"] for g in graphs) <= steps, (steps, graphs)
    assert [m["stats"]["value"] for m in series(doc, "cuda_graph_trace_mode")] == [0]


def test_llamacpp_node_mode_ranks_ggml_kernels_by_symbol_and_category():
    doc = load("llamacpp_node_c1")
    assert frames(doc, "cuda_graphs_nanoseconds") == []
    kernels = frames(doc, "cuda_kernels_nanoseconds")
    by_cat = {}
    for f in kernels:
        assert f["display_name"] and f["category"], f
        by_cat.setdefault(f["category"], []).append(f["display_name"])
    assert kernels[0]["display_name"] == "mul_mat_vec_f<__half>" and kernels[0]["category"] == "gemm"
    assert "rms_norm_f32" in by_cat["normalization"]
    assert any(n.startswith("flash_attn") for n in by_cat["attention"])
    assert any(n.startswith("rope_norm") for n in by_cat["embedding"])
    assert any(n.startswith("k_set_rows") for n in by_cat["memory"])


@pytest.mark.parametrize("name", ["gemm_fp32", "gemm_bf16", "llamacpp_graph_c4", "llamacpp_node_c1"])
def test_recorded_payloads_dropped_nothing(name):
    doc = load(name)
    assert all(m["stats"]["total"] == 0 for m in series(doc, "graphsignal_dropped_records")), name


def test_work_per_generated_token_of_the_recorded_llamacpp_runs():
    # SKILL.md quotes these: the engine summary recomputed from the recorded series
    from graphsignal import engine_summary

    c4 = engine_summary.summarize(load("llamacpp_graph_c4")["metrics"])
    w = c4["work_per_token"]
    assert c4["generation_tokens_total"] == 22016 and c4["work_per_request"] is None  # llama.cpp counts no requests
    assert round(w["graph_replays"], 2) == 0.25 and round(w["syncs"], 1) == 9.6
    assert round(w["copies"]["host_to_device"]["pinned"]["count"], 1) == 1.5
    assert round(w["copies"]["device_to_host"]["pinned"]["bytes"]) == 128012
    assert round(w["gpu_busy_nanoseconds"] / 1e3) == 125 and round(w["cpu_nanoseconds"] / 1e3) == 398
    c1 = engine_summary.summarize(load("llamacpp_node_c1")["metrics"])["work_per_token"]
    assert round(c1["kernel_launches"]) == 117 and round(c1["syncs"], 1) == 20.1 and c1["graph_replays"] == 0
    assert round(c1["copies"]["host_to_device"]["pinned"]["count"], 1) == 6.0
    assert round(c1["gpu_busy_nanoseconds"] / 1e3) == 374 and round(c1["cpu_nanoseconds"] / 1e3) == 934


def test_a_final_llamacpp_payload_says_how_the_run_ended_and_what_a_token_cost():
    # recorded 2026-12-02 (default mode, 1 client, 128-token requests): the summary the sidecar itself wrote
    doc = load("llamacpp_graph_c1")
    assert doc["start_ns"] < doc["ended_ns"] <= doc["payload_ns"] and doc["exit_status"] == 0
    e = doc["engine"]
    assert e["generation_tokens_total"] == e["decode_calls_total"] == 11008  # one decode step a token
    w = e["work_per_token"]
    assert round(w["graph_replays"], 3) == 1.0 and round(w["syncs"], 1) == 20.1
    assert round(w["copies"]["host_to_device"]["pinned"]["count"], 2) == 6.0
    assert round(w["copies"]["device_to_host"]["pinned"]["count"], 2) == 1.0
    assert round(w["copies"]["device_to_host"]["pinned"]["bytes"] / 1000) == 128  # the logits, n_vocab x 4 bytes
    assert e["work_per_request"] is None
    # what the sidecar wrote is what the engine summary computes from the payload's own series
    again = engine_summary_of(doc)["work_per_token"]
    assert again["syncs"] == w["syncs"] and again["graph_replays"] == w["graph_replays"]


def engine_summary_of(doc):
    from graphsignal import engine_summary

    return engine_summary.summarize(doc["metrics"])
