"""The engine summary's work_per_token and work_per_request: graphsignal's
own measurements (GPU busy time, kernel launches, graph replays, syncs,
copies by kind and host memory, the process tree's CPU time) put against
the engine's generated tokens and finished requests, since start, over the
summary's window and over ?window=N; null where nothing measured a figure
or the engine reports no tokens. Engine counters come from real engine
/metrics texts (tests/data/engines)."""
import os

import pytest

from graphsignal import engine_summary
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.windows import window_stats
from graphsignal.sources import prometheus

ENGINES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "engines")
S = 1_000_000_000


def feed(store, name, ts=None):
    with open(os.path.join(ENGINES, name)) as f:
        prometheus.apply(store, prometheus.parse_exposition(f.read()), ts=ts)


def ours(store, n, ts=None):
    """n steps of a decode: a graph replay, 3 syncs, a pinned and a pageable copy each."""
    pid = {"process.pid": "1"}
    store.add_profile("cuda_graphs_nanoseconds", pid, [("graph_a", 800 * n, n)], ts=ts)
    store.add_profile("cuda_kernels_nanoseconds", pid, [("k", 50 * n, 2 * n)], ts=ts)
    store.add_profile("cuda_sync_nanoseconds", pid, [("stream", 100 * n, 3 * n)], ts=ts)
    for mem, nbytes in (("pinned", 64), ("pageable", 4096)):
        tags = dict(pid, host_memory=mem)
        store.add_profile("cuda_memcpy_nanoseconds", tags, [("device_to_host", 10 * n, n)], ts=ts)
        store.add_counter("cuda_memcpy_bytes", dict(tags, kind="device_to_host"), nbytes * n, ts=ts)
    store.add_counter("process_cpu_time_nanoseconds", {"process.root_pid": "1", "scope": "process_tree"}, 2000 * n,
                      ts=ts)
    store.add_counter("gpu_busy_time_nanoseconds", {"device.uuid": "GPU-1"}, 900 * n, ts=ts)


def test_per_token_and_per_request_since_start_are_exact():
    s = MetricStore()
    feed(s, "vllm_1.txt")
    ours(s, 1000)
    e = engine_summary.from_store(s)
    tokens = e["generation_tokens_total"]
    w = e["work_per_token"]
    assert w["graph_replays"] == 1000 / tokens and w["graph_nanoseconds"] == 800 * 1000 / tokens
    assert w["kernel_launches"] == 2000 / tokens and w["syncs"] == 3000 / tokens
    assert w["sync_nanoseconds"] == 100 * 1000 / tokens
    assert w["cpu_nanoseconds"] == 2000 * 1000 / tokens and w["gpu_busy_nanoseconds"] == 900 * 1000 / tokens
    assert w["copies"] == {"device_to_host": {"pinned": {"count": 1000 / tokens, "bytes": 64 * 1000 / tokens},
                                              "pageable": {"count": 1000 / tokens, "bytes": 4096 * 1000 / tokens}}}
    assert e["work_per_request"] is None  # this vLLM text has no e2e histogram: no count of finished requests


def test_nothing_measured_is_null_and_no_tokens_is_no_figures():
    s = MetricStore()
    feed(s, "llamacpp_1.txt")
    e = engine_summary.from_store(s)
    w = e["work_per_token"]
    assert e["generation_tokens_total"] > 0
    assert all(w[k] is None for k in ("kernel_launches", "graph_replays", "syncs", "cpu_nanoseconds", "copies"))
    assert e["work_per_request"] is None  # llama.cpp exports no count of finished requests
    s.set_counter("llamacpp:tokens_predicted_total", {}, 0)
    assert engine_summary.from_store(s)["work_per_token"] is None


def test_the_summary_window_and_a_signals_window_put_what_happened_in_them_against_their_tokens():
    now = [1_800_000_000 * S]
    s = MetricStore(clock=lambda: now[0])
    t0 = now[0]
    feed(s, "llamacpp_5_live_4clients_a.txt", ts=t0)
    s.set_gauge("prometheus_scrape_timestamp_ns", {"engine": "llamacpp"}, t0, ts=t0)
    ours(s, 100, ts=t0)
    s.take_history(ts=t0)
    t1 = t0 + 3 * S
    feed(s, "llamacpp_5_live_4clients_b.txt", ts=t1)
    s.set_gauge("prometheus_scrape_timestamp_ns", {"engine": "llamacpp"}, t1, ts=t1)
    ours(s, 400, ts=t1)  # 400 more steps in the window
    s.take_history(ts=t1)
    now[0] = t1
    e = engine_summary.from_snapshot(s.snapshot(), window_seconds=3)
    tokens_a = sum(m["stats"]["total"] for m in _counters(s, "llamacpp:tokens_predicted_total"))
    assert e["window"] is not None
    d_tokens = e["window"]["generation_tokens_per_second"] * e["window"]["seconds"]
    assert d_tokens > 0
    assert e["window"]["work_per_token"]["graph_replays"] == pytest.approx(400 / d_tokens)
    assert e["window"]["work_per_token"]["copies"]["device_to_host"]["pageable"]["bytes"] == \
        pytest.approx(4096 * 400 / d_tokens)
    assert e["work_per_token"]["graph_replays"] == pytest.approx(500 / tokens_a)
    # GET /signals?window=3: the same over that window, from the window's deltas
    w = window_stats(s, 3)["engine"]
    assert w["engine"] == "llamacpp" and w["generation_tokens"] == pytest.approx(d_tokens)
    assert w["work_per_token"]["graph_replays"] == pytest.approx(400 / d_tokens)
    assert w["work_per_token"]["cpu_nanoseconds"] == pytest.approx(2000 * 400 / d_tokens)
    assert w["requests"] is None and w["work_per_request"] is None


def _counters(store, name):
    import orjson
    from graphsignal.sidecar.payload import build_signals

    return [m for m in orjson.loads(build_signals(store))["metrics"] if m["name"] == name]
