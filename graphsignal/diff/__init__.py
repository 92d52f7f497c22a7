"""What changed between two /signals payloads, or two sets of runs:
graphsignal-diff.

compare(before, after) takes two payloads (dicts, as GET /signals returns
them or GRAPHSIGNAL_SIGNALS_FILE saves them), or two lists of payloads
(several runs of each side), and returns

    {"before": {...}, "after": {...},      # what each side covers
     "normalized_by": {...},               # what the values are per
     "changes": [{"kind", "metric", "frame", "tags", "stat", "unit",
                  "before", "after", "delta", "ratio", ...}],
     "warnings": [...]}

Sides. Payloads taken with ?window=N on both sides are compared over their
windows; otherwise over the cumulative metrics, each covering
payload_ns - start_ns (start_ns: the workload's launch). Series are matched
by their tags without the ones that differ from run to run (process.pid,
process.root_pid, device.uuid, device.bus_id) or with how the numbers were
taken (duration: sampled, count: estimated), and summed where several match
(processes of one device without ranks; a frame's exact and estimated
parts).

What a value is per (normalized_by), decided once for the pair:
- per unit of NAME, with per=NAME (--per): each run's count of NAME (a
  counter's total, a histogram's count, a profile's calls);
- per generated token, when every run has an engine summary with tokens;
- the run's total, when every run ended (ended_ns: the final payload of a
  run of a fixed amount of work, the usual benchmark) and the metrics are
  cumulative; a warning says when the runs' call counts show that they did
  not do the same work;
- per second of covered time otherwise (a live service, windows).
A faster fixed-work run covers less time, so per second an unchanged stage
would seem to grow: totals (or a unit of work) name the stage that changed.

Changes, one per
- profile frame (kernels, CUDA graphs, copies by kind with their
  host_memory tag, memsets, syncs, NVTX ranges by nesting path and their
  GPU time, probe profiles): stat "total",
  "per_second", "per_token" or "per_<NAME>": the frame's value so
  normalized (ns for the _nanoseconds profiles), with `total`, `calls`,
  `per_call` (value per call) and `share` (of its profile) before and
  after; kernel frames add display_name and category;
- counter: the same stat, with `total`;
- histogram: "mean", with p50 and p95 (and count);
- engine summary concept (since start): generation/prompt tokens per
  second, and the mean, p50 and p95 of TTFT, ITL, TPOT and E2E latency.

`before`/`after` are null where the series or frame exists on one side
only (`only` then says which side has it), `delta` counts such a missing
side as zero, `ratio` is after / before (null when before is 0 or
missing). With several runs on a side, its value is the median of its
runs, `spread` gives each side's [min, max], and `significant` says
whether the sides' ranges are apart (false: the change is inside the
run-to-run noise). Within each kind (profiles, counters, histograms,
engine, in that order: their units differ) changes are sorted by absolute
delta, significant ones first.

Time profiles taken in different CUDA graph trace modes measure different
things (whole graph replays versus kernels one by one): they are left out
with a warning. A series whose time is an estimate (tag duration: sampled)
or whose counts are (count: estimated) on one side, wholly or in part, and
not on the other is compared with a warning, and its changes say which
side is estimated in what (`estimated`: {"before": [...], "after": [...]},
of "time" and "count").

The room (graphsignal-diff's, beside graphsignal-top's and
graphsignal-export's): sides.py reads a payload into what a comparison
needs, collections.py puts runs of different CUDA collections in the same
terms, compare.py pairs the sides and ranks the changes, text.py writes
them for people. It reads payloads only (never a store or a live sidecar)
and may use the base below it, no other room.
"""
from graphsignal.diff.compare import CannotCompare, compare, top
from graphsignal.diff.sides import KINDS, NotAPayload
from graphsignal.diff.text import headline, to_text

__all__ = ["KINDS", "CannotCompare", "NotAPayload", "compare", "headline", "to_text", "top"]
