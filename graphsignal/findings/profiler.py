"""The profiler's own losses: records dropped by full rings, series past
the cap, writers that ran unprofiled, console output not scanned, and an
engine metrics endpoint that never answered. Any of them makes the other
findings (and the payload) incomplete, so they rank by the share of data
lost, and an endpoint that never answered by half: every engine finding
is then missing.
"""
from typing import List

from graphsignal.findings.facts import Facts, evidence, finding
from graphsignal.signals_model import Finding

LOSSES = ("graphsignal_dropped_records", "graphsignal_dropped_series", "graphsignal_writers_without_ring",
          "graphsignal_dropped_console_bytes", "graphsignal_dropped_names")
RECORDS = ("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
           "cuda_memset_nanoseconds", "cuda_sync_nanoseconds")


def profiler_losses(f: Facts) -> List[Finding]:
    lost = {name: f.total(name) or 0.0 for name in LOSSES}
    if not any(v > 0 for v in lost.values()):
        return []
    ev = [evidence(name, "total", v, "==", 0) for name, v in lost.items() if v > 0]
    dropped = lost["graphsignal_dropped_records"]
    kept = sum(f.profile_samples(n) for n in RECORDS)
    share = dropped / (dropped + kept) if dropped > 0 and dropped + kept > 0 else 0.01
    what = ", ".join("%s %d" % (n.replace("graphsignal_", ""), v) for n, v in lost.items() if v > 0)
    return [finding(
        f, "profiler_losses", "profiler", "the profiler lost data (%s): the numbers are incomplete" % what, ev,
        "data", share, "records lost against records kept", "high",
        [("graphsignal", "GRAPHSIGNAL_RING_CAPACITY up (more /dev/shm), GRAPHSIGNAL_SIDECAR_PRIORITY=normal when "
                         "the host's cores are all busy, fewer distinct probe names; graphsignal-run --explain "
                         "overhead")],
        [(n, "zero") for n, v in lost.items() if v > 0])]


def source_never_answered(f: Facts) -> List[Finding]:
    ups = f.named("prometheus_scrape_up")
    if not ups or any((s.value or 0) > 0 for s in ups) or f.engine_name is not None:
        return []
    failures = f.total("prometheus_scrape_failures_total") or 0.0
    if failures <= 0:
        return []
    url = ups[0].tags.get("url", "")
    ev = [evidence("prometheus_scrape_up", "last", 0, "==", 1, "", {"url": url}),
          evidence("prometheus_scrape_failures_total", "total", failures, "==", 0, "", {"url": url})]
    return [finding(
        f, "source_never_answered", "profiler", "the engine's metrics endpoint %s never answered: no engine "
        "figures" % url, ev, "data", 0.5, "every engine figure and finding is missing", "high",
        [("graphsignal", "pass the engine's metrics port (--metrics-port PORT); llama-server needs --metrics "
                         "(graphsignal-run adds it), TensorRT-LLM return_perf_metrics: true")],
        [("prometheus_scrape_up", "up", {"url": url})])]


RULES = (profiler_losses, source_never_answered)
