"""The engine's scheduling: requests queueing while every slot is busy, a
KV cache near full, and a context too small for the requests.

Queue and cache gauges are read over the span: their mean and max over a
window (?window=N), or over the history block's points (the file --output
writes, ?history=N); a bare cumulative read has only their last value,
which after the load is 0, so a saved file without history says nothing
here. Context problems are the engine's own console lines (errors).
"""
import re
from typing import List, Optional, Tuple

from graphsignal import engine_summary
from graphsignal.findings.facts import Facts, evidence, finding
from graphsignal.signals_model import Finding

MIN_WAITING = 0.5  # requests waiting, on average over the span
MIN_WAITING_LAST = 1.0  # ... or now, with requests running, where the span has no mean
MIN_WAITING_SHARE = 0.2  # of the requests in the engine: a queue of 3 behind 24 running is a moment, not a cap
KV_FULL = 0.9  # KV-cache usage (fraction), on average over the span
MIN_CONTEXT_ERRORS = 1

SLOT_CHANGES = {
    "llamacpp": "raise -np (parallel slots) to the number of concurrent clients; the context (-c) is shared by the "
                "slots, so raise -c with it (each slot gets -c/np unless --kv-unified)",
    "vllm": "raise --max-num-seqs (and --max-num-batched-tokens); more KV room with --gpu-memory-utilization",
    "sglang": "raise --max-running-requests; more KV room with --mem-fraction-static",
    "trtllm": "raise --max_batch_size and --max_num_tokens",
}
KV_CHANGES = {
    "vllm": "more KV room: --gpu-memory-utilization up, --kv-cache-dtype fp8, a smaller --max-model-len; or "
            "fewer concurrent sequences (--max-num-seqs) so none is preempted",
    "sglang": "more KV room: --mem-fraction-static up, --kv-cache-dtype fp8_e5m2; or --max-running-requests down",
    "trtllm": "more KV room: kv_cache_config free_gpu_memory_fraction up, an fp8 KV cache; or a smaller "
              "--max_batch_size",
    "llamacpp": "a larger -c (context) for the same -np, or -ctk/-ctv q8_0 to fit more in the same memory",
}
CONTEXT_CHANGES = {
    "llamacpp": "raise -c so each slot holds prompt + generated tokens (a slot gets -c/np unless --kv-unified); "
                "or lower -np",
    "vllm": "raise --max-model-len (needs KV room: --gpu-memory-utilization) or cap the clients' prompt length",
    "sglang": "raise --context-length (needs KV room: --mem-fraction-static) or cap the prompt length",
    "trtllm": "raise --max_seq_len / --max_input_len at build or serve time",
}
# console lines that say a request did not fit its context (llama.cpp, vLLM, SGLang)
CONTEXT_LINE = re.compile(r"exceeds the available context size|context shift|maximum context length|"
                          r"longer than the model's context length|input is larger than|truncated = 1")


def _gauge(f: Facts, concept: str) -> Tuple[Optional[str], Optional[float], Optional[float], Optional[float]]:
    for name in engine_summary.NAMES[concept].get(f.engine_name or "", []):
        if f.has(name):
            last, mean, max_ = f.gauge(name)
            return name, last, mean, max_
    return None, None, None, None


def _waiting(f: Facts) -> Optional[Tuple[str, Optional[str], float, float, bool, bool, Optional[float]]]:
    wname, wlast, wmean, wmax = _gauge(f, "requests_waiting")
    rname, rlast, rmean, _ = _gauge(f, "requests_running")
    if wname is None:
        return None
    averaged = f.windowed or bool(f.history_values(wname))
    if averaged:
        waiting, running = wmean or 0.0, rmean or 0.0
        queued = waiting >= MIN_WAITING
    else:
        waiting, running = wlast or 0.0, rlast or 0.0
        queued = waiting >= MIN_WAITING_LAST and running >= 1
    queued = queued and waiting >= MIN_WAITING_SHARE * (waiting + running)
    return wname, rname, waiting, running, queued, averaged, wmax


def requests_queueing(f: Facts) -> List[Finding]:
    got = _waiting(f)
    if got is None or f.engine_name not in SLOT_CHANGES:
        return []
    wname, rname, waiting, running, queued, averaged, wmax = got
    if not queued:
        return []
    stat = "mean" if averaged else "last"
    share = waiting / (waiting + running)
    ev = [evidence(wname, stat, waiting, ">=", MIN_WAITING if averaged else MIN_WAITING_LAST),
          evidence(rname or "engine.requests_running", stat, running),
          evidence(wname, "share_of_requests", share, ">=", MIN_WAITING_SHARE, "fraction")]
    if f.engine_name == "llamacpp" and f.has("llamacpp:n_busy_slots_per_decode"):
        ev.append(evidence("llamacpp:n_busy_slots_per_decode", "last", f.gauge("llamacpp:n_busy_slots_per_decode")[0]))
    return [finding(
        f, "requests_queueing", "engine", "%.1f requests wait while %.1f run: every slot is busy"
        % (waiting, running), ev, "requests", share, "the share of requests in the queue rather than in a batch",
        "high" if averaged else "medium", [(f.engine_name or "", SLOT_CHANGES[f.engine_name or ""])],
        [(wname, "zero"), (rname or "engine.requests_running", "up"),
         ("engine.window.generation_tokens_per_second", "up")])]


def kv_cache_full(f: Facts) -> List[Finding]:
    name, last, mean, max_ = _gauge(f, "kv_cache_usage")
    if name is None or mean is None or mean < KV_FULL:
        return []
    got = _waiting(f)
    waiting, running = (got[2], got[3]) if got else (0.0, 0.0)
    share = waiting / (waiting + running) if waiting + running > 0 else 0.05
    ev = [evidence(name, "mean", mean, ">=", KV_FULL, "fraction"), evidence(name, "max", max_, "", None, "fraction")]
    if got:
        ev.append(evidence(got[0], "mean" if got[5] else "last", waiting))
    return [finding(
        f, "kv_cache_full", "engine", "the KV cache is %.0f%% full on average: requests wait for room"
        % (100 * mean), ev, "requests", share, "the share of requests waiting (the cache admits no more)", "medium",
        [(f.engine_name or "", KV_CHANGES.get(f.engine_name or "", "more KV-cache memory, or fewer sequences"))],
        [(name, "down"), (got[0] if got else name, "zero")])]


def context_too_small(f: Facts) -> List[Finding]:
    if not f.engine_name:  # the lines read like an engine's, but no engine was seen: they stay in `errors` only
        return []
    hits = [e for e in f.errors if isinstance(e.get("message"), str) and CONTEXT_LINE.search(e["message"])]
    count = sum(int(e.get("count") or 1) for e in hits)
    if count < MIN_CONTEXT_ERRORS:
        return []
    # refused: the request failed; shifted: it lost its oldest tokens; truncated: its answer was cut short
    # when the slot's context filled (llama.cpp without context shift). The worst named first.
    refused = [e for e in hits if "shift" not in e["message"] and "truncated = 1" not in e["message"]]
    cut = [e for e in hits if "truncated = 1" in e["message"]]
    first = (refused or cut or hits)[0]["message"]
    how = "were refused" if refused else "were cut short when their slot's context filled (truncated)" if cut \
        else "had their context shifted (truncated)"
    ev = [evidence("errors", "count", count, ">=", MIN_CONTEXT_ERRORS, "", {"message": first[:160]})]
    share = 0.5 if refused or cut else 0.25
    return [finding(
        f, "context_too_small", "engine", "%d requests %s: the context is too small for them" % (count, how),
        ev, "requests", share,
        "an assumed share of the requests (half when they were refused or cut short, a quarter when shifted): "
        "the engine counts neither these requests nor all of them", "high",
        [(f.engine_name or "any", CONTEXT_CHANGES.get(f.engine_name or "", "a larger context, or shorter prompts"))],
        [("errors", "zero", {"message": first[:160]})])]


RULES = (requests_queueing, kv_cache_full, context_too_small)
