"""Prometheus import and the engine summary, on real engine /metrics texts
(tests/data/engines/, copied from shared/fixtures/engines/; each file's first
line says where it comes from) and on expositions rendered by
prometheus_client from real metric objects.

Expected values are worked out by hand in the comments: quantiles
interpolate linearly inside the `le` bucket that holds the rank (q * count),
as Prometheus' histogram_quantile() does; a rank in the +Inf bucket reports
the highest finite bound.
"""
import http.server
import json
import logging
import math
import os
import threading

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from graphsignal import engine_summary
from graphsignal.sidecar.payload import build_signals
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "engines")
approx = pytest.approx


def fixture_text(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        text = f.read()
    if name == "vllm_1.txt":
        # The vLLM docs elide parts with "..." lines; the fixture's SOURCE line
        # says to strip them (unstripped, see test_elided_vllm_doc_is_one_failed_scrape).
        text = "\n".join(line for line in text.splitlines() if line.strip() != "...")
    return text


def load(name_or_text, store=None):
    store = store or MetricStore()
    text = fixture_text(name_or_text) if name_or_text.endswith(".txt") else name_or_text
    prometheus.apply(store, prometheus.parse_exposition(text))
    return store


def value(store, metric, type_, **tags):
    found = store.lookup(metric, type_, tags)
    assert len(found) == 1, (metric, tags, found)
    s = found[0]
    return {"gauge": lambda: s.value, "counter": lambda: s.total,
            "histogram": lambda: s.stats()}[type_]()


def types(store):
    out = {}
    for (_, t, _), _s in store.series.items():
        out[t] = out.get(t, 0) + 1
    return out


def summary(store):
    return engine_summary.from_store(store)


# -- every fixture --------------------------------------------------------------------

# file -> series count per type after import
EXPECTED_SERIES = {
    "llamacpp_1.txt": {"counter": 4},
    "llamacpp_2_live.txt": {"counter": 10, "gauge": 5},
    "llamacpp_5_live_4clients_a.txt": {"counter": 10, "gauge": 5},
    "llamacpp_5_live_4clients_b.txt": {"counter": 10, "gauge": 5},
    "sglang_1.txt": {"counter": 2, "gauge": 6, "histogram": 4},
    # sglang_1 with TTFT's +Inf bucket and _count cut out by hand: that histogram has no total
    "sglang_1_cut_histogram.txt": {"counter": 2, "gauge": 6, "histogram": 3},
    "sglang_2.txt": {"gauge": 4},
    # 3 typed gauges (gen_throughput's TYPE line is there, its sample is cut)
    # + 11 e2e `_bucket` samples whose TYPE line is in the cut part: untyped -> gauges
    "sglang_3.txt": {"gauge": 14},
    "sglang_reconstructed.txt": {"counter": 6, "gauge": 6, "histogram": 7},
    # the only histogram is cut before its +Inf bucket and _count: total unknown, not imported
    "trtllm_1.txt": {},
    # chunk A: 11 TTFT buckets + _count without their TYPE line (untyped), chunk B: one
    # untyped _count and the typed request_success_total counter
    "trtllm_2.txt": {"gauge": 13, "counter": 1},
    "vllm_1.txt": {"gauge": 1, "counter": 4, "histogram": 1},
    # four *_created gauges dropped
    "vllm_2.txt": {"gauge": 1, "counter": 2, "histogram": 1},
    "vllm_3.txt": {"gauge": 13},
}
NOT_PROMETHEUS = {"llamacpp_4_disabled_501.txt", "trtllm_4_iterstats_json.txt"}


def test_fixture_list_is_complete():
    assert set(os.listdir(DATA)) == set(EXPECTED_SERIES) | NOT_PROMETHEUS


@pytest.mark.parametrize("name", sorted(EXPECTED_SERIES))
def test_every_fixture_imports_into_the_expected_series(name):
    store = load(name)
    assert types(store) == EXPECTED_SERIES[name]
    # and the payload serializes with the engine summary in it
    doc = json.loads(build_signals(store))
    assert "engine" in doc
    assert len(doc["metrics"]) == sum(EXPECTED_SERIES[name].values())


@pytest.mark.parametrize("name", sorted(NOT_PROMETHEUS))
def test_non_prometheus_bodies_fail_to_parse_cleanly(name):
    with pytest.raises(ValueError):
        prometheus.parse_exposition(fixture_text(name))


# -- vLLM ---------------------------------------------------------------------------

def test_vllm_docs_example_values_and_summary():
    store = load("vllm_1.txt")
    assert value(store, "vllm:num_requests_running", "gauge", model_name="meta-llama/Llama-3.1-8B-Instruct") == 8
    assert value(store, "vllm:request_success_total", "counter", finished_reason="length") == 131
    ttft = value(store, "vllm:time_to_first_token_seconds", "histogram")
    assert ttft["count"] == 140
    assert ttft["sum"] is None or math.isnan(ttft["sum"])  # the doc elides _sum: not measured
    assert ttft["min"] is None and ttft["max"] is None
    # no *_created series are imported
    assert not [k for k in store.series if k[0].endswith("_created")]
    s = summary(store)
    assert s["engine"] == "vllm"
    assert s["requests_running"] == 8
    assert s["requests_waiting"] is None and s["kv_cache_usage_percent"] is None
    assert s["generation_tokens_total"] == 27453
    # TTFT: rank 70 in (0.02, 0.04] (13 below, 84 inside); rank 133 in (0.06, 0.08] (123 below, 15 inside)
    assert s["ttft_seconds"]["count"] == 140
    assert s["ttft_seconds"]["mean"] is None
    assert s["ttft_seconds"]["p50"] == approx(0.02 + 0.02 * 57 / 84)
    assert s["ttft_seconds"]["p95"] == approx(0.06 + 0.02 * 10 / 15)
    assert s["sources"]["ttft"] == "vllm:time_to_first_token_seconds"


def test_vllm_0_10_kv_usage_in_percent_and_created_series_dropped():
    store = load("vllm_2.txt")
    assert value(store, "vllm:kv_cache_usage_perc", "gauge", engine="0") == approx(9.75010481363281e-06)
    assert value(store, "vllm:prefix_cache_queries_total", "counter") == 32
    n = value(store, "vllm:request_params_n", "histogram")
    assert (n["count"], n["sum"], n["p50"]) == (4, 4.0, approx(0.5))  # all 4 in (0, 1]
    s = summary(store)
    assert s["engine"] == "vllm"
    assert s["kv_cache_usage_percent"] == approx(9.75010481363281e-04)
    assert s["requests_running"] is None


def test_vllm_dp_partial_buckets_stay_untyped_gauges():
    store = load("vllm_3.txt")
    assert value(store, "vllm:request_decode_time_seconds_bucket", "gauge", engine="1", le="7680.0") == 1
    assert summary(store) is None  # none of the summary's series is in this piece


def vllm_registry(dp_ranks=("0", "1"), old_names=False):
    """A vLLM-like exposition from real prometheus_client metrics (with the
    `_created` series single-process vLLM emits)."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "running", labels, registry=reg)
    waiting = Gauge("vllm:num_requests_waiting", "waiting", labels, registry=reg)
    kv = Gauge("vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc", "kv", labels, registry=reg)
    gen = Counter("vllm:generation_tokens", "gen", labels, registry=reg)
    prompt = Counter("vllm:prompt_tokens", "prompt", labels, registry=reg)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", labels, registry=reg,
                     buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5])
    itl = Histogram("vllm:time_per_output_token_seconds" if old_names else "vllm:inter_token_latency_seconds",
                    "itl", labels, registry=reg, buckets=[0.01, 0.025, 0.05, 0.075, 0.1])
    e2e = Histogram("vllm:e2e_request_latency_seconds", "e2e", labels, registry=reg,
                    buckets=[0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10])
    for i, rank in enumerate(dp_ranks):
        lab = {"model_name": "m", "engine": rank}
        running.labels(**lab).set(3 + i)
        waiting.labels(**lab).set(i)
        kv.labels(**lab).set(0.25 + 0.5 * i)
        gen.labels(**lab).inc(1000 * (i + 1))
        prompt.labels(**lab).inc(500)
        for _ in range(10):
            ttft.labels(**lab).observe(0.03)  # (0.02, 0.04]
            e2e.labels(**lab).observe(1.2)  # (1, 1.5]
        for _ in range(100):
            itl.labels(**lab).observe(0.02)  # (0.01, 0.025]
    return reg, gen, ttft


def test_vllm_data_parallel_ranks_are_summed():
    reg, _, _ = vllm_registry()
    store = load(generate_latest(reg).decode())
    assert not [k for k in store.series if k[0].endswith("_created")]
    s = summary(store)
    assert s["engine"] == "vllm"
    assert s["requests_running"] == 3 + 4
    assert s["requests_waiting"] == 0 + 1
    assert s["kv_cache_usage_percent"] == approx(50.0)  # mean of 25 % and 75 %
    assert s["generation_tokens_total"] == 3000 and s["prompt_tokens_total"] == 1000
    # 20 TTFTs all in (0.02, 0.04]: p50 at rank 10 of 20 -> the middle of the bucket
    assert s["ttft_seconds"]["count"] == 20
    assert s["ttft_seconds"]["mean"] == approx(0.03)
    assert s["ttft_seconds"]["p50"] == approx(0.03)
    assert s["ttft_seconds"]["p95"] == approx(0.02 + 0.02 * 19 / 20)
    assert s["itl_seconds"]["count"] == 200 and s["itl_seconds"]["p50"] == approx(0.0175)
    assert s["e2e_seconds"]["count"] == 20 and s["e2e_seconds"]["p50"] == approx(1.25)
    assert s["tpot_seconds"] is None


def test_vllm_old_names_gpu_cache_usage_and_time_per_output_token():
    reg, _, _ = vllm_registry(dp_ranks=("0",), old_names=True)
    s = summary(load(generate_latest(reg).decode()))
    assert s["kv_cache_usage_percent"] == approx(25.0)
    assert s["sources"]["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert s["sources"]["itl"] == "vllm:time_per_output_token_seconds"
    assert s["itl_seconds"]["count"] == 100


def test_window_rates_and_windowed_latency_between_two_payloads():
    reg, gen, ttft = vllm_registry(dp_ranks=("0",))
    first = load(generate_latest(reg).decode())
    first.set_gauge(engine_summary.SCRAPE_TS, {"url": "u"}, 10_000_000_000)
    prev = json.loads(build_signals(first))["metrics"]
    gen.labels(model_name="m", engine="0").inc(400)
    for _ in range(4):
        ttft.labels(model_name="m", engine="0").observe(0.3)  # (0.25, 0.5]
    second = load(generate_latest(reg).decode())
    second.set_gauge(engine_summary.SCRAPE_TS, {"url": "u"}, 12_000_000_000)  # 2 s later
    cur = json.loads(build_signals(second))["metrics"]
    s = engine_summary.summarize(cur, prev)
    w = s["window"]
    assert w["seconds"] == 2.0
    assert w["generation_tokens_per_second"] == approx(200.0)
    assert w["prompt_tokens_per_second"] == approx(0.0)
    # only the 4 new TTFTs are in the window: p50 at rank 2 of 4 in (0.25, 0.5]
    assert w["ttft_seconds"]["count"] == 4 and w["ttft_seconds"]["p50"] == approx(0.375)
    assert s["ttft_seconds"]["count"] == 14  # since start
    # a counter that went back (engine restarted) has no rate, nor do its histograms
    reg2, _, _ = vllm_registry(dp_ranks=("0",))
    third = load(generate_latest(reg2).decode())
    third.set_gauge(engine_summary.SCRAPE_TS, {"url": "u"}, 14_000_000_000)
    w = engine_summary.summarize(json.loads(build_signals(third))["metrics"], cur)["window"]
    assert w["generation_tokens_per_second"] is None and w["ttft_seconds"] is None


def test_window_from_the_store_history():
    clock = [100_000_000_000]
    store = MetricStore(clock=lambda: clock[0])
    reg, gen, _ = vllm_registry(dp_ranks=("0",))
    load(generate_latest(reg).decode(), store)
    store.set_gauge(engine_summary.SCRAPE_TS, {"url": "u"}, clock[0])
    store.take_history()
    assert summary(store)["window"] is None  # one snapshot, no time between
    clock[0] += 5_000_000_000
    gen.labels(model_name="m", engine="0").inc(250)
    load(generate_latest(reg).decode(), store)
    store.set_gauge(engine_summary.SCRAPE_TS, {"url": "u"}, clock[0])
    w = summary(store)["window"]
    assert w["seconds"] == 5.0
    assert w["generation_tokens_per_second"] == approx(50.0)


# -- SGLang -------------------------------------------------------------------------

def test_sglang_0_4_docs_block_and_summary():
    store = load("sglang_1.txt")
    assert value(store, "sglang:func_latency_seconds", "histogram", name="generate_request")["count"] == 14007
    s = summary(store)
    assert s["engine"] == "sglang"
    assert (s["requests_running"], s["requests_waiting"]) == (162, 2826)
    assert s["kv_cache_usage_percent"] == approx(28.0)
    assert (s["prompt_tokens_total"], s["generation_tokens_total"]) == (8128902, 7557572)
    # TTFT: 11008 requests, 8495 above the last finite bound (30): p50 and p95 report 30
    assert s["ttft_seconds"]["count"] == 11008
    assert s["ttft_seconds"]["mean"] == approx(2.3518979474117756e+06 / 11008)
    assert (s["ttft_seconds"]["p50"], s["ttft_seconds"]["p95"]) == (30.0, 30.0)
    assert s["e2e_seconds"]["count"] == 11228 and s["e2e_seconds"]["p50"] == 60.0
    # <=0.4 names its per-token latency time_per_output_token_seconds:
    # rank 3700378.5 in (0.075, 0.1] (433413 below, 4516782 inside);
    # rank 7030719.15 in (0.1, 0.15] (4950195 below, 2089240 inside)
    assert s["sources"]["itl"] == "sglang:time_per_output_token_seconds"
    assert s["itl_seconds"]["count"] == 7400757
    assert s["itl_seconds"]["p50"] == approx(0.075 + 0.025 * (3700378.5 - 433413) / 4516782)
    assert s["itl_seconds"]["p95"] == approx(0.1 + 0.05 * (7030719.15 - 4950195) / 2089240)


def test_sglang_0_5_rank_labels():
    s = summary(load("sglang_2.txt"))
    assert (s["engine"], s["requests_running"], s["requests_waiting"]) == ("sglang", 1, None)
    assert s["kv_cache_usage_percent"] == 0.0  # measured zero, not null


def test_sglang_0_4_4_partial_scrape():
    store = load("sglang_3.txt")
    assert value(store, "sglang:e2e_request_latency_seconds_bucket", "gauge", le="300.0") == 1
    s = summary(store)
    assert (s["requests_running"], s["kv_cache_usage_percent"], s["e2e_seconds"]) == (0, 0.0, None)


def test_sglang_0_5_23_reconstructed_sums_streaming_and_non_streaming():
    s = summary(load("sglang_reconstructed.txt"))
    assert (s["requests_running"], s["requests_waiting"]) == (24, 3)
    assert s["kv_cache_usage_percent"] == approx(73.0)
    assert s["prompt_tokens_total"] == 812345 + 20480
    assert s["generation_tokens_total"] == 301234 + 4096
    # TTFT merged over is_streaming: cumulative 0.2:500 0.4:750 0.6:770 2.0:810
    t = s["ttft_seconds"]
    assert t["count"] == 810 and t["mean"] == approx((210.5 + 10.0) / 810)
    assert t["p50"] == approx(0.1 + 0.1 * 405 / 500)
    assert t["p95"] == approx(0.4 + 0.2 * (769.5 - 750) / 20)
    assert t["p99"] == approx(1.0 + 1.0 * (801.9 - 770) / 40)
    assert s["itl_seconds"]["count"] == 1420 and s["itl_seconds"]["p50"] == approx(0.01 + 0.005 * 710 / 1000)
    assert s["tpot_seconds"]["count"] == 810 and s["tpot_seconds"]["p50"] == approx(0.01 + 0.005 * 405 / 720)
    assert s["e2e_seconds"]["count"] == 810 and s["e2e_seconds"]["p50"] == approx(4.0 + 2.0 * 385 / 600)


def test_sglang_per_tp_rank_series_read_rank_0_only():
    reg = CollectorRegistry()
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank"]
    running = Gauge("sglang:num_running_reqs", "r", labels, registry=reg)
    usage = Gauge("sglang:token_usage", "u", labels, registry=reg)
    for dp in ("0", "1"):
        for tp in ("0", "1", "2", "3"):  # the TP ranks of one DP rank see the same batch
            lab = dict(model_name="m", engine_type="unified", tp_rank=tp, pp_rank="0", dp_rank=dp)
            running.labels(**lab).set(10 if dp == "0" else 6)
            usage.labels(**lab).set(0.5 if dp == "0" else 0.3)
    s = summary(load(generate_latest(reg).decode()))
    assert s["requests_running"] == 16  # 10 + 6, not 64
    assert s["kv_cache_usage_percent"] == approx(40.0)


# -- TensorRT-LLM ---------------------------------------------------------------------

def trtllm_registry(prefix):
    reg = CollectorRegistry()
    labels = ["model_name", "engine_type"]
    lab = {"model_name": "undefined", "engine_type": "undefined"}
    ttft = Histogram(prefix + "time_to_first_token_seconds", "t", labels, registry=reg,
                     buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5])
    tpot = Histogram(prefix + "time_per_output_token_seconds", "t", labels, registry=reg,
                     buckets=[0.01, 0.025, 0.05, 0.075, 0.1])
    e2e = Histogram(prefix + "e2e_request_latency_seconds", "t", labels, registry=reg,
                    buckets=[0.3, 0.5, 0.8, 1, 1.5, 2])
    Counter(prefix + "request_success", "s", labels + ["finished_reason"], registry=reg) \
        .labels(finished_reason="stop", **lab).inc(2)
    for _ in range(2):
        ttft.labels(**lab).observe(0.05)  # (0.04, 0.06]
        tpot.labels(**lab).observe(0.02)  # (0.01, 0.025]
        e2e.labels(**lab).observe(0.9)  # (0.8, 1]
    if prefix:  # main: iteration stats and token counters, with enable_iter_perf_stats
        Gauge(prefix + "num_requests_running", "r", labels, registry=reg).labels(**lab).set(5)
        Gauge(prefix + "num_requests_waiting", "w", labels, registry=reg).labels(**lab).set(2)
        Gauge(prefix + "kv_cache_utilization", "k", labels, registry=reg).labels(**lab).set(0.125)
        Counter(prefix + "prompt_tokens", "p", labels, registry=reg).labels(**lab).inc(64)
        Counter(prefix + "generation_tokens", "g", labels, registry=reg).labels(**lab).inc(32)
    return reg


@pytest.mark.parametrize("prefix", ["", "trtllm_"])
def test_trtllm_with_and_without_prefix(prefix):
    s = summary(load(generate_latest(trtllm_registry(prefix)).decode()))
    assert s["engine"] == "trtllm"
    assert s["ttft_seconds"]["count"] == 2 and s["ttft_seconds"]["p50"] == approx(0.05)
    assert s["tpot_seconds"]["count"] == 2 and s["tpot_seconds"]["p50"] == approx(0.0175)
    assert s["itl_seconds"] is None  # TRT-LLM reports per-request TPOT only
    assert s["e2e_seconds"]["p50"] == approx(0.9)
    if prefix:
        assert (s["requests_running"], s["requests_waiting"]) == (5, 2)
        assert s["kv_cache_usage_percent"] == approx(12.5)
        assert (s["prompt_tokens_total"], s["generation_tokens_total"]) == (64, 32)
    else:  # releases through early 2026 have no running/waiting/KV series
        assert (s["requests_running"], s["requests_waiting"], s["kv_cache_usage_percent"]) == (None, None, None)


def test_trtllm_fixtures_cut_before_their_totals_give_no_summary():
    assert summary(load("trtllm_1.txt")) is None
    store = load("trtllm_2.txt")
    assert value(store, "request_success_total", "counter", finish_reason="stop") == 2
    assert summary(store) is None


# -- llama.cpp ----------------------------------------------------------------------

def test_llamacpp_counters_and_itl_proxy():
    s = summary(load("llamacpp_1.txt"))
    assert s["engine"] == "llamacpp"
    assert (s["prompt_tokens_total"], s["generation_tokens_total"]) == (143, 673)
    assert s["itl_seconds"]["mean"] == approx(29.567 / 673)
    assert s["itl_seconds"]["p50"] is None
    assert s["ttft_seconds"] is None and s["kv_cache_usage_percent"] is None


def test_llamacpp_live_scrape():
    store = load("llamacpp_2_live.txt")
    assert value(store, "llamacpp:prompt_tokens_seconds", "gauge") == approx(5522.91)
    s = summary(store)
    assert (s["requests_running"], s["requests_waiting"]) == (0, 0)
    assert (s["prompt_tokens_total"], s["generation_tokens_total"]) == (47, 112)
    assert s["itl_seconds"]["mean"] == approx(0.103782 / 112)


# -- the scraper ------------------------------------------------------------------------

class FakeResponse:
    def __init__(self, status, body):
        self.status_code = status
        self._body = body.encode() if isinstance(body, str) else body

    def iter_content(self, chunk_size):
        for i in range(0, len(self._body), chunk_size):
            yield self._body[i:i + chunk_size]

    def close(self):
        pass


class FakeSession:
    """Answers GETs from a list of bodies (str), exceptions or (status, body)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def get(self, url, **kw):
        self.calls += 1
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, Exception):
            raise a
        if isinstance(a, tuple):
            return FakeResponse(*a)
        return FakeResponse(200, a)

    def close(self):
        pass


def make_source(answers, t0=0.0):
    clock = [t0]
    store = MetricStore()
    src = prometheus.PrometheusSource(store, "http://127.0.0.1:1/metrics", "vllm", clock=lambda: clock[0],
                                      session=FakeSession(answers))
    src.setup()
    return src, store, clock


def scrape_up(store):
    return store.lookup(prometheus.UP_METRIC, "gauge")[0].value


def test_scraper_backs_off_quietly_while_the_engine_starts(caplog):
    src, store, clock = make_source([requests.ConnectionError("refused")])
    attempts = []
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        for tick in range(60):  # one poll a second for a minute
            clock[0] = float(tick)
            before = src.session.calls
            src.poll()
            if src.session.calls > before:
                attempts.append(tick)
    # 1 s doubling to 8 s between attempts
    assert attempts[:6] == [0, 1, 3, 7, 15, 23]
    assert all(b - a == prometheus.BACKOFF_MAX for a, b in zip(attempts[4:], attempts[5:]))
    # starting is no error: one line that says where it looks, one info entry
    (line,) = [r.getMessage() for r in caplog.records]
    assert "no engine metrics yet" in line and "refuses connections" in line and "--metrics-port" in line
    assert scrape_up(store) == 0 and [e["level"] for e in store.errors] == ["info"]
    caplog.clear()
    # ... until it has never answered for NEVER_UP_WARN seconds: one more line, once
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        for tick in range(60, int(prometheus.NEVER_UP_WARN) + 60):
            clock[0] = float(tick)
            src.poll()
    assert len(caplog.records) == 1 and "--metrics-port" in caplog.records[0].getMessage()
    assert len(store.errors) == 2


def test_scraper_picks_up_the_engine_once_it_answers():
    good = fixture_text("sglang_reconstructed.txt")
    src, store, clock = make_source([requests.ConnectionError("refused")] * 3 + [good])
    for tick in range(20):
        clock[0] = float(tick)
        src.poll()
    assert scrape_up(store) == 1
    assert summary(store)["requests_running"] == 24
    assert store.lookup(prometheus.FAILURES_METRIC)[0].total == 3


def test_malformed_line_costs_that_line_only_with_one_log_line(caplog):
    good1 = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 4\n"
    bad = good1.replace(" 4\n", " 5\nvllm:num_requests_running{engine=\"0\" 7\n")
    good2 = good1.replace(" 4\n", " 6\n")
    src, store, clock = make_source([good1, bad, bad, good2])
    skipped = lambda: store.lookup(prometheus.SKIPPED_METRIC)[0].value  # noqa: E731
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        src.poll()
        assert value(store, "vllm:num_requests_running", "gauge") == 4 and skipped() == 0
        caplog.clear()
        for tick in (1, 2):
            clock[0] = float(tick)
            src.poll()
            # the valid line of the bad scrape is imported; the malformed one costs itself only
            assert value(store, "vllm:num_requests_running", "gauge") == 5
            assert scrape_up(store) == 1 and skipped() == 1
        clock[0] = 3.0
        src.poll()
    assert value(store, "vllm:num_requests_running", "gauge") == 6 and skipped() == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "1 malformed line skipped" in lines[0] and "\n" not in lines[0]
    assert sum("malformed" in e["message"] for e in store.errors) == 1


def test_elided_vllm_doc_imports_everything_but_the_elisions():
    with open(os.path.join(DATA, "vllm_1.txt"), encoding="utf-8") as f:
        raw = f.read()
    src, store, _ = make_source([raw])
    src.poll()
    assert scrape_up(store) == 1
    bare = load("vllm_1.txt")  # the same text with its "..." lines stripped
    assert sorted(k for k in store.series if k[0].startswith("vllm:")) == sorted(bare.series)
    assert "3 malformed lines skipped (first: '...')" in store.errors[-1]["message"]


def test_a_body_without_one_sample_line_is_a_failed_scrape():
    src, store, _ = make_source(["<html><body>\nnot metrics\n</body></html>\n"])
    src.poll()
    assert scrape_up(store) == 0 and "malformed" in store.errors[-1]["message"]


def test_series_that_vanish_from_a_good_scrape_are_removed():
    one = "# TYPE x gauge\nx{engine=\"0\"} 1\nx{engine=\"1\"} 2\n"
    two = "# TYPE x gauge\nx{engine=\"0\"} 3\n"
    src, store, _ = make_source([one, two])
    src.poll()
    assert len(store.lookup("x")) == 2
    src.poll()
    assert [s.value for s in store.lookup("x")] == [3]


def test_nan_values_are_null_not_numbers():
    src, store, _ = make_source(["# TYPE g gauge\ng NaN\n# TYPE c_total counter\nc_total +Inf\n"])
    src.poll()
    doc = json.loads(build_signals(store))
    stats = {m["name"]: m["stats"] for m in doc["metrics"]}
    assert stats["g"] == {"value": None} and stats["c_total"] == {"total": None}


def test_summary_quantiles_become_gauges_and_count_sum_a_histogram():
    text = ("# TYPE rpc_seconds summary\nrpc_seconds{quantile=\"0.5\"} 0.2\nrpc_seconds{quantile=\"0.99\"} 0.9\n"
            "rpc_seconds_sum 12.5\nrpc_seconds_count 50\n")
    store = load(text)
    assert value(store, "rpc_seconds", "gauge", quantile="0.99") == 0.9
    h = value(store, "rpc_seconds", "histogram")
    assert (h["count"], h["sum"], h["mean"]) == (50, 12.5, 0.25)


# -- over real HTTP -------------------------------------------------------------------------

@pytest.fixture
def http_server():
    """A local server answering GETs from a (status, body bytes) cell."""
    answer = {"status": 200, "body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(answer["status"])
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield "http://127.0.0.1:%d/metrics" % srv.server_address[1], answer
    finally:
        srv.shutdown()
        srv.server_close()


def scrape_once(url, engine):
    """One real scrape of url over HTTP; returns the store it filled."""
    store = MetricStore()
    src = prometheus.PrometheusSource(store, url, engine)
    src.setup()
    try:
        src.poll()
    finally:
        src.shutdown()
    return store


def test_scrape_over_http_ignores_proxies_from_the_environment(http_server, monkeypatch):
    url, answer = http_server
    answer["body"] = fixture_text("llamacpp_2_live.txt").encode()
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would refuse every request
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    store = scrape_once(url, "llamacpp")
    assert scrape_up(store) == 1
    assert summary(store)["generation_tokens_total"] == 112


def test_llama_server_without_metrics_flag_gets_a_hint(http_server):
    url, answer = http_server
    with open(os.path.join(DATA, "llamacpp_4_disabled_501.txt"), encoding="utf-8") as f:
        answer["status"], answer["body"] = 501, f.read().split("\n", 2)[2].encode()
    store = scrape_once(url, "llamacpp")
    assert scrape_up(store) == 0
    msg = store.errors[-1]["message"]
    assert "HTTP 501" in msg and "--metrics" in msg


def test_oversized_exposition_is_a_failed_scrape(monkeypatch):
    monkeypatch.setattr(prometheus, "MAX_BODY", 1000)
    src, store, _ = make_source(["# TYPE g gauge\n" + "g 1\n" * 1000])
    src.poll()
    assert scrape_up(store) == 0 and not store.lookup("g")
    assert "larger than" in store.errors[-1]["message"]


def test_engine_that_exited_is_not_reported_as_unreachable(caplog):
    good = "# TYPE g gauge\ng 1\n"
    src, store, clock = make_source([good, requests.ConnectionError("refused")])
    alive = [True]
    src.alive = lambda: alive[0]
    src.poll()
    alive[0] = False  # the final scrape at exit finds nobody
    clock[0] = 5.0
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        src.poll()
    assert scrape_up(store) == 0 and caplog.records == [] and store.errors_total == 0
    assert [s.value for s in store.lookup("g")] == [1]  # the last good scrape stays


def test_lost_engine_is_reported_when_the_next_attempt_fails_too():
    good = "# TYPE g gauge\ng 1\n"
    src, store, clock = make_source([good, requests.ConnectionError("refused"), requests.ConnectionError("refused"),
                                     good])
    src.alive = lambda: True  # running, but its server stopped answering
    src.poll()
    clock[0] = 1.0
    src.poll()  # one lost connection: an engine shutting down does this; not news yet
    assert store.errors_total == 0 and scrape_up(store) == 0
    clock[0] = 10.0
    src.poll()  # still unreachable while alive: say so once
    assert store.errors_total == 1 and "scraping http://127.0.0.1:1/metrics failed" in store.errors[-1]["message"]
    clock[0] = 30.0
    src.poll()
    assert scrape_up(store) == 1


def test_make_source_only_when_there_is_a_url():
    from graphsignal.sources import SourceContext

    store = MetricStore()
    assert prometheus.make_source(SourceContext(store=store)) is None
    url = "http://127.0.0.1:8000/metrics"
    src = prometheus.make_source(SourceContext(store=store, metrics_url=url))
    assert src.url == url and src.interval == 1.0


# -- a histogram without a total (an exposition cut inside it) --------------------------------------

TTFT = "sglang:time_to_first_token_seconds"
MODEL = {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}


def test_a_cut_histogram_is_counted_in_skipped_lines_not_dropped_silently():
    report = prometheus.ParseReport()
    samples = prometheus.parse_exposition(fixture_text("sglang_1_cut_histogram.txt"), report)
    # its _sum and 20 finite buckets (the +Inf bucket and _count were cut)
    assert (report.skipped, report.cut_histogram_lines, report.skipped_lines) == (0, 21, 21)
    assert report.cut_histograms == [(TTFT, MODEL)]
    assert TTFT not in {name for _, name, _, _ in samples}
    # everything else is what the whole text gives
    whole, cut = load("sglang_1.txt"), load("sglang_1_cut_histogram.txt")
    assert sorted(k for k in whole.series if k[0] != TTFT) == sorted(cut.series)
    for key in cut.series:
        assert json.dumps(cut.series[key].stats(), sort_keys=True) == json.dumps(whole.series[key].stats(),
                                                                                 sort_keys=True), key


def test_the_real_trtllm_paste_cut_inside_its_histogram_counts_every_line():
    report = prometheus.ParseReport()
    assert prometheus.parse_exposition(fixture_text("trtllm_1.txt"), report) == []
    lines = [ln for ln in fixture_text("trtllm_1.txt").splitlines() if ln.startswith("e2e_request_latency_seconds")]
    assert report.skipped_lines == report.cut_histogram_lines == len(lines) > 1
    assert report.cut_histograms == [("e2e_request_latency_seconds",
                                      {"engine_type": "undefined", "model_name": "undefined"})]


def test_a_cut_histogram_over_http_is_said_once_and_counted_every_scrape(http_server, caplog):
    url, answer = http_server
    answer["body"] = fixture_text("sglang_1_cut_histogram.txt").encode()
    store = MetricStore()
    src = prometheus.PrometheusSource(store, url, "sglang")
    src.setup()
    try:
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for _ in range(3):
                src._next_try = 0.0
                src.poll()
                assert scrape_up(store) == 1
                assert store.lookup(prometheus.SKIPPED_METRIC)[0].value == 21
        # whole again: nothing skipped
        answer["body"] = fixture_text("sglang_1.txt").encode()
        src.poll()
        assert store.lookup(prometheus.SKIPPED_METRIC)[0].value == 0
        assert value(store, TTFT, "histogram", **MODEL)["count"] == 11008
    finally:
        src.shutdown()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert TTFT + '{model_name="meta-llama/Llama-3.1-8B-Instruct"}' in lines[0]
    assert "neither _count nor a +Inf bucket" in lines[0] and prometheus.SKIPPED_METRIC in lines[0]
    entries = [e for e in store.errors if TTFT in e["message"]]
    assert len(entries) == 1 and entries[0]["tags"]["problem"] == "exposition"
