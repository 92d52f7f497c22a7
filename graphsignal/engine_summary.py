"""The engine summary: each engine's own metric names mapped onto common
concepts, in one table (NAMES), for the /signals payload ("engine") and
graphsignal-top.

Concepts (units in the keys):

  requests_running, requests_waiting   requests, summed over ranks
  kv_cache_usage_percent               0-100, averaged over ranks (each DP
                                       engine has its own KV pool)
  prompt_tokens_total,                 tokens since the engine started,
  generation_tokens_total              summed over ranks
  ttft_seconds, itl_seconds,           latency since the engine started:
  tpot_seconds, e2e_seconds            {count, mean, p50, p95, p99}, from
                                       the engine's buckets merged over ranks
  window                               the same over the last `seconds`:
                                       prompt/generation_tokens_per_second
                                       and windowed latency quantiles; null
                                       until two scrapes are apart

itl is per decode step (time between tokens); tpot is per request
((e2e - ttft) / (tokens - 1)). TensorRT-LLM only reports the latter.
llama.cpp reports neither: its itl is the mean of
tokens_predicted_seconds_total / tokens_predicted_total (no quantiles).

What llama.cpp's counters allow to derive (null for the other engines,
and for a llama-server too old to export the counter):

  prompt_seconds_per_token             prompt_seconds_total /
                                       prompt_tokens_total: prefill time
                                       per processed prompt token (tokens
                                       reused from its prompt cache are
                                       prompt_tokens_cached_total, not in it)
  decode_tokens_per_second_per_request tokens_predicted_total /
                                       tokens_predicted_seconds_total: the
                                       speed of one request's stream (the
                                       seconds are summed over requests, so
                                       this is not the server's throughput;
                                       that is window's
                                       generation_tokens_per_second)
  decode_calls_total                   n_decode_total: llama_decode() calls
                                       (one per batch step of the server)
  busy_slots_per_decode                n_busy_slots_per_decode: requests in
                                       an average batch step, since start
  prompt_tokens_cached_total           prompt_tokens_cached_total

What the workload did for those tokens, from graphsignal's own
measurements (null where not measured: no CUDA collection, no GPU
telemetry; under --cuda-trace light, kernel_nanoseconds is null, the
counts are exact and graph_nanoseconds is the sampled estimate), over
the same span as the engine's counters (since start, and in `window`):

  work_per_token, work_per_request     {gpu_busy_nanoseconds, kernel_launches,
                                       kernel_nanoseconds, graph_replays,
                                       graph_nanoseconds, syncs,
                                       sync_nanoseconds, cpu_nanoseconds,
                                       copies: {kind: {host_memory: {count,
                                       bytes}}}} divided by generated tokens
                                       (null without tokens) and by finished
                                       requests (the e2e histogram's count;
                                       null where the engine has none, as
                                       llama.cpp)

Engines count a request's tokens when it finishes, so over a short window
the per-token figures swing with the requests that happened to end in it.

and in `window`: prompt_seconds_per_token,
decode_tokens_per_second_per_request, decode_calls_per_second and
busy_slots_per_decode over the window (the latter is the average gauge
times the decode count at both ends, differenced: llama-server prints the
gauge to 6 significant digits, so late in a long run a short window's
value is approximate). llama.cpp adds a request's generated tokens and
generation time when the request finishes, so those move in steps of
whole requests. It exports neither TTFT nor KV-cache usage: null.

Engines split series by labels: vLLM by `engine` (DP rank), SGLang by
`dp_rank`, `is_streaming` and (with per-rank metrics on) `tp_rank`, which
see the same batch, so only tp_rank "0" is read. Everything else is summed.

The functions work on the payload's `metrics` list (dicts with name, type,
tags, stats), so graphsignal-top can call summarize() on two /signals
payloads; from_snapshot() builds the same input from a store snapshot
(graphsignal.signals_model.StoreSnapshot) and its per-second history.
"""
import math
from typing import Any, Dict, List, Optional, Sequence

from graphsignal import histo, windowmath
from graphsignal.signals_model import StoreSnapshot

VLLM, SGLANG, TRTLLM, LLAMACPP = "vllm", "sglang", "trtllm", "llamacpp"
ENGINES = (VLLM, SGLANG, TRTLLM, LLAMACPP)
WINDOW_SECONDS = 5.0
QUANTILES = (0.5, 0.95, 0.99)

# concept -> engine -> candidate names, the first one present wins (newer
# names first; older releases and renames after them).
NAMES = {
    "requests_running": {
        VLLM: ["vllm:num_requests_running"],
        SGLANG: ["sglang:num_running_reqs"],
        TRTLLM: ["trtllm_num_requests_running"],
        LLAMACPP: ["llamacpp:requests_processing"],
    },
    "requests_waiting": {
        VLLM: ["vllm:num_requests_waiting"],
        SGLANG: ["sglang:num_queue_reqs"],
        TRTLLM: ["trtllm_num_requests_waiting"],
        LLAMACPP: ["llamacpp:requests_deferred"],
    },
    "kv_cache_usage": {  # fraction 0-1 in every engine
        VLLM: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        SGLANG: ["sglang:token_usage"],
        TRTLLM: ["trtllm_kv_cache_utilization"],
        LLAMACPP: [],  # removed upstream (llama.cpp PR #13660)
    },
    "prompt_tokens": {
        VLLM: ["vllm:prompt_tokens_total"],
        SGLANG: ["sglang:prompt_tokens_total"],
        TRTLLM: ["trtllm_prompt_tokens_total"],
        LLAMACPP: ["llamacpp:prompt_tokens_total"],
    },
    "generation_tokens": {
        VLLM: ["vllm:generation_tokens_total"],
        SGLANG: ["sglang:generation_tokens_total"],
        TRTLLM: ["trtllm_generation_tokens_total"],
        LLAMACPP: ["llamacpp:tokens_predicted_total"],
    },
    "ttft": {
        VLLM: ["vllm:time_to_first_token_seconds"],
        SGLANG: ["sglang:time_to_first_token_seconds"],
        TRTLLM: ["trtllm_time_to_first_token_seconds", "time_to_first_token_seconds"],
        LLAMACPP: [],
    },
    "itl": {
        VLLM: ["vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"],
        SGLANG: ["sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"],
        TRTLLM: [],
        LLAMACPP: [],  # see LLAMACPP_ITL
    },
    "tpot": {
        VLLM: ["vllm:request_time_per_output_token_seconds"],
        SGLANG: ["sglang:request_time_per_output_token_seconds"],
        TRTLLM: ["trtllm_time_per_output_token_seconds", "time_per_output_token_seconds"],
        LLAMACPP: [],
    },
    "e2e": {
        VLLM: ["vllm:e2e_request_latency_seconds"],
        SGLANG: ["sglang:e2e_request_latency_seconds"],
        TRTLLM: ["trtllm_e2e_request_latency_seconds", "e2e_request_latency_seconds"],
        LLAMACPP: [],
    },
}
# llama.cpp's inter-token latency proxy: seconds spent generating / tokens generated.
LLAMACPP_ITL = ("llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total")
# llama.cpp's other counters, for the derived keys (see the module doc)
LLAMACPP_PROMPT = ("llamacpp:prompt_seconds_total", "llamacpp:prompt_tokens_total")
LLAMACPP_DECODES = "llamacpp:n_decode_total"
LLAMACPP_BUSY = "llamacpp:n_busy_slots_per_decode"
LLAMACPP_CACHED = "llamacpp:prompt_tokens_cached_total"
LLAMACPP_EXTRA = LLAMACPP_PROMPT + (LLAMACPP_DECODES, LLAMACPP_BUSY, LLAMACPP_CACHED)
DERIVED = ("prompt_seconds_per_token", "decode_tokens_per_second_per_request", "decode_calls_total",
           "busy_slots_per_decode", "prompt_tokens_cached_total")
WINDOW_DERIVED = ("prompt_seconds_per_token", "decode_tokens_per_second_per_request", "decode_calls_per_second",
                  "busy_slots_per_decode")
# The scrape time of the engine's counters (see sources/prometheus.py).
SCRAPE_TS = "prometheus_scrape_timestamp_ns"
SCRAPE_UP = "prometheus_scrape_up"

GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage")
COUNTERS = ("prompt_tokens", "generation_tokens")
LATENCIES = ("ttft", "itl", "tpot", "e2e")

# graphsignal's own measurements, put against the engine's tokens and requests
GPU_BUSY = "gpu_busy_time_nanoseconds"
CPU_TIME = "process_cpu_time_nanoseconds"  # the tree's: tag scope=process_tree
WORK_PROFILES = {"cuda_kernels_nanoseconds": ("kernel_launches", "kernel_nanoseconds"),
                 "cuda_graphs_nanoseconds": ("graph_replays", "graph_nanoseconds"),
                 "cuda_sync_nanoseconds": ("syncs", "sync_nanoseconds")}
COPY_TIME, COPY_BYTES = "cuda_memcpy_nanoseconds", "cuda_memcpy_bytes"
# --cuda-trace light counts without timing: launches and copies in count profiles (value = calls)
LIGHT_LAUNCHES, LIGHT_COPIES = "cuda_kernel_launches", "cuda_memcpy_calls"
WORK_NAMES = frozenset(WORK_PROFILES) | {GPU_BUSY, CPU_TIME, COPY_TIME, COPY_BYTES, LIGHT_LAUNCHES, LIGHT_COPIES}

ALL_NAMES = frozenset(n for per in NAMES.values() for names in per.values() for n in names) \
    | frozenset(LLAMACPP_ITL) | frozenset(LLAMACPP_EXTRA) | {SCRAPE_TS, SCRAPE_UP}


# -- selection ----------------------------------------------------------------------

def _index(metrics):
    """name -> list of metric dicts (only names the table knows, and the
    measurements work() reads)."""
    idx = {}
    for m in metrics:
        name = m.get("name")
        if name in ALL_NAMES or name in WORK_NAMES:
            idx.setdefault(name, []).append(m)
    return idx


# -- what the workload did -----------------------------------------------------------

def _count(stats, windowed):
    """A counter's value: its total, or in a window document its delta."""
    return _num((stats or {}).get("delta" if windowed else "total"))


def _profile_sums(stats, windowed):
    """(value, calls) of a profile series: its own value and samples where
    given (a window document, from_snapshot's sums), else its frames summed."""
    st = stats or {}
    if windowed or "samples" in st:
        return _num(st.get("value")), _num(st.get("samples"))
    frames = st.get("frames") or []
    return sum(_num(f.get("value")) or 0 for f in frames), sum(_num(f.get("samples")) or 0 for f in frames)


def work(idx, windowed=False):
    """What the workload did, from graphsignal's own series in idx (see
    the module doc); a key is None when nothing measured it."""
    out = {"gpu_busy_nanoseconds": None, "cpu_nanoseconds": None}
    busy = [_count(m.get("stats"), windowed) for m in idx.get(GPU_BUSY, ())]
    out["gpu_busy_nanoseconds"] = _sum(busy)
    cpu = [_count(m.get("stats"), windowed) for m in idx.get(CPU_TIME, ())
           if (m.get("tags") or {}).get("scope") == "process_tree"]
    out["cpu_nanoseconds"] = _sum(cpu)
    for name, (calls_key, ns_key) in WORK_PROFILES.items():
        ms = idx.get(name, ())
        sums = [_profile_sums(m.get("stats"), windowed) for m in ms]
        out[calls_key] = sum(n or 0 for _, n in sums) if ms else None
        out[ns_key] = sum(v or 0 for v, _ in sums) if ms else None
    if out["kernel_launches"] is None and idx.get(LIGHT_LAUNCHES):  # counted, not timed: no kernel time
        out["kernel_launches"] = sum(_profile_sums(m.get("stats"), windowed)[1] or 0 for m in idx[LIGHT_LAUNCHES])
    copies = {}
    for m in list(idx.get(COPY_TIME, ())) + list(idx.get(LIGHT_COPIES, ())):
        mem = (m.get("tags") or {}).get("host_memory") or "device"
        st = m.get("stats") or {}
        for f in st.get("frames") or []:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                c = copies.setdefault(f["name"], {}).setdefault(mem, {"count": 0, "bytes": None})
                c["count"] += _num(f.get("samples")) or 0
    for m in idx.get(COPY_BYTES, ()):
        tags = m.get("tags") or {}
        kind, mem = tags.get("kind"), tags.get("host_memory") or "device"
        v = _count(m.get("stats"), windowed)
        if isinstance(kind, str) and v is not None:
            c = copies.setdefault(kind, {}).setdefault(mem, {"count": None, "bytes": 0})
            c["bytes"] = (c["bytes"] or 0) + v
    out["copies"] = copies if (idx.get(COPY_TIME) or idx.get(COPY_BYTES) or idx.get(LIGHT_COPIES)) else None
    return out


def _minus(a, b):
    """a - b over work() documents (None where either is None or it went back)."""
    if isinstance(a, dict):
        return {k: _minus(v, (b or {}).get(k) if isinstance(b, dict) else None) for k, v in a.items()}
    if a is None or b is None or a < b:
        return None if a is None else (a if b is None else None)
    return a - b


def _per(w, n):
    """A work() document divided by n (None without n)."""
    if not n or n <= 0:
        return None
    if isinstance(w, dict):
        return {k: _per(v, n) if isinstance(v, dict) else (None if v is None else v / n) for k, v in w.items()}
    return None if w is None else w / n


def _requests(hists):
    e2e = hists.get("e2e")
    return e2e[0] if e2e is not None else None


def window_work(metrics: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """For a window document's metrics (deltas): {generation_tokens,
    requests, work_per_token, work_per_request} over the window, or None
    without an engine."""
    idx = _index(metrics)
    engine = detect_engine(idx, _hint(idx))
    if engine is None:
        return None
    as_totals = {name: [dict(m, stats={"total": (m.get("stats") or {}).get("delta")})
                        if m.get("type") == "counter" else m for m in ms] for name, ms in idx.items()}
    _, gen = _pick(as_totals, engine, "generation_tokens")
    tokens = _sum(_counter_values(gen)) if gen else None
    _, e2e = _pick(idx, engine, "e2e")
    requests = _sum((m.get("stats") or {}).get("count") for m in e2e) if e2e else None
    w = work(idx, windowed=True)
    return {"engine": engine, "generation_tokens": tokens, "requests": requests,
            "work_per_token": _per(w, tokens), "work_per_request": _per(w, requests)}


def _keep(engine, m):
    """SGLang's TP ranks see the same batch: with per-rank series on, read rank 0."""
    if engine == SGLANG:
        tp = (m.get("tags") or {}).get("tp_rank")
        return tp is None or tp == "0"
    return True


def _pick(idx, engine, concept):
    """(name, [metric dicts]) for the first candidate name present."""
    for name in NAMES[concept][engine]:
        ms = [m for m in idx.get(name, ()) if _keep(engine, m)]
        if ms:
            return name, ms
    return None, []


def detect_engine(idx, hint=None):
    """The engine whose names are present most (hint breaks ties), or None."""
    best, best_n = None, 0
    for engine in ENGINES:
        n = sum(1 for concept in NAMES if _pick(idx, engine, concept)[1])
        if n > best_n or (n == best_n and n and engine == hint):
            best, best_n = engine, n
    return best


def _hint(idx):
    for m in idx.get(SCRAPE_UP, ()):
        engine = (m.get("tags") or {}).get("engine")
        if engine in ENGINES:
            return engine
    return None


# -- aggregation --------------------------------------------------------------------

def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _sum(values):
    vals = [v for v in (_num(x) for x in values) if v is not None]
    return sum(vals) if vals else None


def _gauge_values(ms):
    return [(m.get("stats") or {}).get("value") for m in ms]


def _counter_values(ms):
    return [(m.get("stats") or {}).get("total") for m in ms]


def _le_key(bins):
    return tuple(math.inf if b is None else float(b) for b in bins)


def merge_histograms(ms):
    """Sums histograms over series: (count, sum, le tuple, per-bucket counts).
    Series whose buckets differ from the largest one's are left out (their
    counts cannot be split onto other bounds)."""
    groups = {}
    for m in ms:
        st = m.get("stats") or {}
        count = _num(st.get("count"))
        if count is None:
            continue
        key = _le_key(st.get("bins") or [])
        g = groups.setdefault(key, [0, 0.0, [0] * len(key)])
        g[0] += count
        total = _num(st.get("sum"))
        g[1] = None if total is None or g[1] is None else g[1] + total  # one unknown sum: unknown
        for i, c in enumerate(st.get("counts") or []):
            if i < len(key):
                g[2][i] += c
    if not groups:
        return None
    le, (count, total, counts) = max(groups.items(), key=lambda kv: kv[1][0])
    return count, total, le, counts


def latency_stats(merged):
    """{count, mean, p50, p95, p99} (seconds) from a merged histogram."""
    if merged is None:
        return None
    count, total, le, counts = merged
    q = histo.quantiles_buckets(list(le), list(counts), QUANTILES) if le else [None] * len(QUANTILES)
    return {"count": count, "mean": (total / count) if count and total is not None else None,
            "p50": q[0], "p95": q[1], "p99": q[2]}


def _diff_hist(cur, prev):
    """cur - prev (both merged); None when the buckets changed or counts went
    back (an engine restart)."""
    if cur is None or prev is None:
        return None  # a histogram new since `prev` may hold counts from before it
    if prev[2] != cur[2] or cur[0] < prev[0]:
        return None
    total = cur[1] - prev[1] if cur[1] is not None and prev[1] is not None else None
    return (cur[0] - prev[0], total, cur[2], [a - b for a, b in zip(cur[3], prev[3])])


def _scrape_ts(idx):
    vals = [_num(v) for v in _gauge_values(idx.get(SCRAPE_TS, ()))]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


# -- the summary --------------------------------------------------------------------

def _cumulative(idx, engine):
    out = {"engine": engine}
    sources = {}
    for concept in GAUGES:
        name, ms = _pick(idx, engine, concept)
        val = None
        if ms:
            sources[concept] = name
            vals = [v for v in (_num(x) for x in _gauge_values(ms)) if v is not None]
            if concept == "kv_cache_usage":
                val = 100.0 * sum(vals) / len(vals) if vals else None
            else:
                val = sum(vals) if vals else None
        out["kv_cache_usage_percent" if concept == "kv_cache_usage" else concept] = val
    for concept in COUNTERS:
        name, ms = _pick(idx, engine, concept)
        if ms:
            sources[concept] = name
        out[concept + "_total"] = _sum(_counter_values(ms)) if ms else None
    hists = {}
    for concept in LATENCIES:
        name, ms = _pick(idx, engine, concept)
        if ms:
            sources[concept] = name
        hists[concept] = merge_histograms(ms) if ms else None
        out[concept + "_seconds"] = latency_stats(hists[concept])
    if engine == LLAMACPP and out["itl_seconds"] is None:
        secs, toks = (_sum(_counter_values(idx.get(n, ()))) for n in LLAMACPP_ITL)
        if secs is not None and toks is not None:
            sources["itl"] = "%s / %s" % LLAMACPP_ITL
            out["itl_seconds"] = {"count": toks, "mean": secs / toks if toks else None,
                                  "p50": None, "p95": None, "p99": None}
    for key in DERIVED:
        out[key] = None
    if engine == LLAMACPP:
        _llamacpp_derived(idx, out, sources)
    out["sources"] = sources
    return out, hists


def _ratio(a, b):
    return a / b if a is not None and b else None


def _llamacpp_raw(idx):
    """The llama.cpp counters the derived keys come from (None: not exported)."""
    c = {n: _sum(_counter_values(idx.get(n, ()))) for n in LLAMACPP_ITL + LLAMACPP_PROMPT
         + (LLAMACPP_DECODES, LLAMACPP_CACHED)}
    c[LLAMACPP_BUSY] = _sum(_gauge_values(idx.get(LLAMACPP_BUSY, ())))
    return c


def _llamacpp_derived(idx, out, sources):
    c = _llamacpp_raw(idx)
    out["prompt_seconds_per_token"] = _ratio(c[LLAMACPP_PROMPT[0]], c[LLAMACPP_PROMPT[1]])
    out["decode_tokens_per_second_per_request"] = _ratio(c[LLAMACPP_ITL[1]], c[LLAMACPP_ITL[0]])
    out["decode_calls_total"] = c[LLAMACPP_DECODES]
    out["busy_slots_per_decode"] = c[LLAMACPP_BUSY]
    out["prompt_tokens_cached_total"] = c[LLAMACPP_CACHED]
    for key, names in (("prompt_seconds_per_token", "%s / %s" % LLAMACPP_PROMPT),
                       ("decode_tokens_per_second_per_request", "%s / %s" % LLAMACPP_ITL[::-1]),
                       ("decode_calls_total", LLAMACPP_DECODES), ("busy_slots_per_decode", LLAMACPP_BUSY),
                       ("prompt_tokens_cached_total", LLAMACPP_CACHED)):
        if out[key] is not None:
            sources[key] = names


def _llamacpp_window(idx, pidx, seconds, w):
    c, p = _llamacpp_raw(idx), _llamacpp_raw(pidx)

    def delta(name):
        a, b = c[name], p[name]
        return a - b if a is not None and b is not None and a >= b else None

    w["prompt_seconds_per_token"] = _ratio(delta(LLAMACPP_PROMPT[0]), delta(LLAMACPP_PROMPT[1]))
    w["decode_tokens_per_second_per_request"] = _ratio(delta(LLAMACPP_ITL[1]), delta(LLAMACPP_ITL[0]))
    dd = delta(LLAMACPP_DECODES)
    w["decode_calls_per_second"] = dd / seconds if dd is not None else None
    busy = None
    if dd and c[LLAMACPP_BUSY] is not None and p[LLAMACPP_BUSY] is not None:
        # the gauge is busy slots / decodes since start: times the decode count, busy slots at each end
        busy = max(0.0, (c[LLAMACPP_BUSY] * c[LLAMACPP_DECODES] - p[LLAMACPP_BUSY] * p[LLAMACPP_DECODES]) / dd)
    w["busy_slots_per_decode"] = busy


def _rate(cur, prev, seconds):
    if cur is None or prev is None or not seconds or seconds <= 0 or cur < prev:
        return None
    return (cur - prev) / seconds


def summarize(metrics: Sequence[Any], prev_metrics: Optional[Sequence[Any]] = None,
              seconds: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """The engine summary (a dict) from a payload's `metrics` list, or None
    when no engine's metrics are there.

    prev_metrics: an earlier `metrics` list; with it, "window" holds rates
    and latency quantiles between the two. seconds: the time between them,
    used only when the scrape timestamps are not in both lists."""
    idx = _index(metrics)
    engine = detect_engine(idx, _hint(idx))
    if engine is None:
        return None
    out, hists = _cumulative(idx, engine)
    done = work(idx)
    out["work_per_token"] = _per(done, out["generation_tokens_total"])
    out["work_per_request"] = _per(done, _requests(hists))
    out["window"] = None
    if prev_metrics is not None:
        pidx = _index(prev_metrics)
        prev, phists = _cumulative(pidx, engine)
        out["window"] = _window(idx, pidx, engine, out, hists, prev, phists, seconds)
        if out["window"] is not None:
            did = _minus(done, work(pidx))
            tokens = _minus(out["generation_tokens_total"], prev["generation_tokens_total"])
            requests = _minus(_requests(hists), _requests(phists))
            out["window"]["work_per_token"] = _per(did, tokens)
            out["window"]["work_per_request"] = _per(did, requests)
    return out


def _window(idx, pidx, engine, cur, hists, prev, phists, seconds):
    ts, pts = _scrape_ts(idx), _scrape_ts(pidx)
    if ts is not None and pts is not None:
        seconds = (ts - pts) / 1e9
    if not seconds or seconds <= 0:
        return None
    w = {"seconds": round(seconds, 3)}
    for concept in COUNTERS:
        w[concept + "_per_second"] = _rate(cur[concept + "_total"], prev[concept + "_total"], seconds)
    for concept in LATENCIES:
        w[concept + "_seconds"] = latency_stats(_diff_hist(hists[concept], phists[concept]))
    if engine == LLAMACPP and w["itl_seconds"] is None:
        c, p = cur["itl_seconds"], prev["itl_seconds"]
        if c and p and c["mean"] is not None and p["mean"] is not None and c["count"] > p["count"]:
            dsecs = c["mean"] * c["count"] - p["mean"] * p["count"]
            dtoks = c["count"] - p["count"]
            w["itl_seconds"] = {"count": dtoks, "mean": dsecs / dtoks, "p50": None, "p95": None, "p99": None}
    for key in WINDOW_DERIVED:
        w[key] = None
    if engine == LLAMACPP:
        _llamacpp_window(idx, pidx, seconds, w)
    return w


# -- from a store snapshot -----------------------------------------------------------

def _metric(name, type_, tags, state):
    """The payload dict of a series state, without quantiles
    (graphsignal.windowmath.plain_stats). Profiles other than the copies'
    are summed here, not listed frame by frame (a kernel profile has
    hundreds)."""
    if type_ == "profile" and name != COPY_TIME and isinstance(state, dict):
        stats = {"value": sum(v for v, _ in state.values()), "samples": sum(n for _, n in state.values())}
    else:
        stats = windowmath.plain_stats(type_, state)
    return {"name": name, "type": type_, "tags": dict(tags), "stats": stats}


def from_store(store, window_seconds=WINDOW_SECONDS):
    """from_snapshot() of the store as it is now."""
    return from_snapshot(store.snapshot(), window_seconds)


def from_snapshot(snap: StoreSnapshot, window_seconds: float = WINDOW_SECONDS) -> Optional[Dict[str, Any]]:
    """summarize() over a StoreSnapshot's series, with the window taken
    from its per-second history: the latest snapshot at least
    `window_seconds` old or, while the engine has been scraped for less
    than that, the oldest snapshot taken after its first scrape (and at
    least 1 s old)."""
    names = ALL_NAMES | WORK_NAMES
    if not snap.named(ALL_NAMES):
        return None
    metrics = [_metric(v.name, v.type, v.tags, v.state) for v in snap.named(names)]
    prev, seconds = None, None
    now = snap.taken_ns
    history = snap.history
    chosen = None
    for ts, point in reversed(history):
        if now - ts < 1e9:
            continue
        if not point.has_name(SCRAPE_TS):
            break  # this snapshot and older ones predate the first scrape
        chosen = (ts, point)
        if now - ts >= window_seconds * 1e9:
            break
    if chosen is not None:
        ts, point = chosen
        prev = [_metric(k[0], k[1], k[2], v) for k, v in point.items_named(names)]
        seconds = (now - ts) / 1e9
    return summarize(metrics, prev, seconds)
