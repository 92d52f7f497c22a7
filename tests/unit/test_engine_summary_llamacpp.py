"""The engine summary's llama.cpp keys, derived from llama-server's own
counters, on its real /metrics texts (tests/data/engines/llamacpp_*.txt;
each file's first line says where it comes from)."""
import json
import os
import re

import pytest

from graphsignal import engine_summary
from graphsignal.sidecar.payload import build_signals
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "engines")
approx = pytest.approx


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        text = f.read()
    store = MetricStore()
    prometheus.apply(store, prometheus.parse_exposition(text))
    return store


def test_live_scrape_derived_keys():
    s = engine_summary.from_store(load("llamacpp_2_live.txt"))
    assert s["engine"] == "llamacpp"
    # prompt_seconds_total 0.00851 over prompt_tokens_total 47 (28 more came from the prompt cache)
    assert s["prompt_seconds_per_token"] == approx(0.00851 / 47)
    assert s["prompt_tokens_cached_total"] == 28
    # tokens_predicted_total 112 in tokens_predicted_seconds_total 0.103782
    assert s["decode_tokens_per_second_per_request"] == approx(112 / 0.103782)
    assert s["decode_calls_total"] == 112 and s["busy_slots_per_decode"] == 1
    assert s["sources"]["prompt_seconds_per_token"] == "llamacpp:prompt_seconds_total / llamacpp:prompt_tokens_total"
    assert s["sources"]["busy_slots_per_decode"] == "llamacpp:n_busy_slots_per_decode"
    # not exported by this llama.cpp: not measured, not zero
    assert s["ttft_seconds"] is None and s["kv_cache_usage_percent"] is None and s["e2e_seconds"] is None


def test_older_llama_server_without_decode_counters():
    s = engine_summary.from_store(load("llamacpp_1.txt"))
    assert s["prompt_seconds_per_token"] == approx(8.168 / 143)
    assert s["decode_tokens_per_second_per_request"] == approx(673 / 29.567)
    assert s["decode_calls_total"] is None and s["busy_slots_per_decode"] is None
    assert s["prompt_tokens_cached_total"] is None
    assert "decode_calls_total" not in s["sources"]


def test_other_engines_have_the_keys_as_null():
    s = engine_summary.from_store(load("sglang_1.txt"))
    for key in engine_summary.DERIVED:
        assert s[key] is None, key


def test_no_prompt_tokens_yet_is_null_not_a_division_by_zero():
    text = ("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 0\n"
            "# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total 0\n"
            "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 0\n"
            "# TYPE llamacpp:tokens_predicted_seconds_total counter\nllamacpp:tokens_predicted_seconds_total 0\n")
    store = MetricStore()
    prometheus.apply(store, prometheus.parse_exposition(text))
    s = engine_summary.from_store(store)
    assert s["prompt_seconds_per_token"] is None and s["decode_tokens_per_second_per_request"] is None


def test_skill_md_names_llama_servers_real_series_and_every_derived_key():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "graphsignal", "reference", "llamacpp.md"), encoding="utf-8") as f:
        section = f.read()  # graphsignal-run --explain llamacpp
    store = load("llamacpp_2_live.txt")
    live = {name for (name, _, _) in store.series}
    named = set(re.findall(r"`(llamacpp:[a-z_]+)`", section))
    assert len(named) >= 8 and sorted(named - live) == []
    window = {"window." + k for k in engine_summary.WINDOW_DERIVED}
    for key in engine_summary.DERIVED:
        assert "`%s`" % key in section, key
    assert any(("`%s`" % w) in section for w in window)


def test_window_between_two_live_scrapes_under_4_clients():
    # two scrapes of one llama-server 3.037 s apart, 4 clients busy on its 4 slots
    def metrics(name):
        return json.loads(build_signals(load(name)))["metrics"]

    s = engine_summary.summarize(metrics("llamacpp_5_live_4clients_b.txt"),
                                 metrics("llamacpp_5_live_4clients_a.txt"), seconds=3.037)
    assert s["requests_running"] == 4 and s["busy_slots_per_decode"] == approx(3.9523)
    w = s["window"]
    assert w["seconds"] == 3.037
    assert w["generation_tokens_per_second"] == approx((6912 - 3328) / 3.037)
    assert w["decode_calls_per_second"] == approx((1761 - 893) / 3.037)
    assert w["prompt_seconds_per_token"] == approx((0.242778 - 0.074221) / (160 - 104))
    assert w["decode_tokens_per_second_per_request"] == approx((6912 - 3328) / (26.2481 - 13.7124))
    # busy slots in the window from the since-start average at both ends:
    # (3.9523 * 1761 - 3.95633 * 893) / (1761 - 893)
    assert w["busy_slots_per_decode"] == approx((3.9523 * 1761 - 3.95633 * 893) / 868)
    assert 3.9 < w["busy_slots_per_decode"] <= 4.0  # 4 slots, nearly always all busy
    assert w["itl_seconds"]["mean"] == approx((26.2481 - 13.7124) / (6912 - 3328))
