"""Findings: causes a /signals document shows, with their evidence, what is
at stake, what to change and which series should move next run.

Rules read only the payload's model (graphsignal.signals_model.Signals,
through graphsignal.findings.facts), so the sidecar's /signals, its
?window=N reads, the final file, graphsignal-server, graphsignal-top on a
saved file and graphsignal-diff all compute the same list from the same
document. One module per family of causes:

  sync      host-device synchronization every step
  copies    pageable copies; a large copy or memset every step
  launch    launch-bound tiny kernels without CUDA graphs; an engine whose
            CUDA graphs are off; the GPU idle while the host is busy
  engine    requests queueing behind full slots; KV cache near full; a
            context too small for the requests
  config    llama.cpp's layers left on the CPU, flash attention off,
            prompts processed in tiny micro-batches
  gemm      fp32 GEMMs on CUDA cores (tensor cores unused)
  ranks     one rank slower than the others
  profiler  the profiler's own losses (dropped records, series, a source
            that never answered): the other findings may be incomplete

A rule returns at most one finding per id and fires only past thresholds
that the recorded healthy runs (tests/data) stay below: a finding never
fires on a healthy run. Every threshold is a module constant and is
written into the finding's evidence. The list is ranked by impact.share,
the estimated fraction of wall time, GPU time, tokens/s or requests at
stake; a finding that names the cause of another (CUDA graphs off in an
engine explains its launch-bound kernels) replaces it.
"""
from typing import Callable, Dict, List, Optional, Sequence

from graphsignal.findings import config, copies, engine, gemm, launch, profiler, ranks, sync
from graphsignal.findings.facts import Facts
from graphsignal.signals_model import Finding, Signals

__all__ = ["compute", "RULES", "FAMILIES", "reads", "ENCODED_PREFIXES"]

Rule = Callable[[Facts], List[Finding]]
FAMILIES = (sync, copies, launch, engine, config, gemm, ranks, profiler)
RULES: Sequence[Rule] = tuple(r for fam in FAMILIES for r in fam.RULES)
# a finding that explains another one's evidence replaces it
REPLACES: Dict[str, Sequence[str]] = {
    "graphs_disabled": ("launch_bound", "gpu_idle_cpu_bound"),
    "cpu_offload": ("gpu_idle_cpu_bound",),
    "tiny_prompt_batches": ("launch_bound",),
    "kv_cache_full": ("requests_queueing",),
}
_CONFIDENCE = {"high": 0, "medium": 1, "low": 2}
MAX_FINDINGS = 20

# series the rules read, by name or prefix: the sidecar decodes only these
PREFIXES = ("cuda_", "gpu_busy_time", "gpu_memory_", "gpu_tensor_active", "gpu_sm_active", "process_cpu_time",
            "graphsignal_", "prometheus_scrape", "vllm:", "sglang:", "llamacpp:", "trtllm")


# the same as the start of a series' JSON ({"name":"...), for a reader that filters encoded series
ENCODED_PREFIXES = tuple(b'{"name":"' + p.encode() for p in PREFIXES)


def reads(name: str) -> bool:
    """Whether the rules read a series of this name."""
    return name.startswith(PREFIXES)


def compute(doc: Signals, log: Optional[Callable[[str], None]] = None) -> List[Finding]:
    """The findings of one /signals document (over its window when it has
    one), largest impact first. A rule that fails on a strange document
    costs its own findings only (log says which)."""
    f = Facts(doc)
    out: List[Finding] = []
    for rule in RULES:
        try:
            out.extend(rule(f))
        except (ArithmeticError, LookupError, TypeError, ValueError) as e:
            if log is not None:
                log("finding rule %s failed: %s: %s" % (rule.__name__, type(e).__name__, e))
    ids = {x["id"] for x in out}
    gone = {r for i in ids for r in REPLACES.get(i, ())}
    out = [x for x in out if x["id"] not in gone]
    out.sort(key=lambda x: (-x["impact"]["share"], _CONFIDENCE[x["confidence"]], x["id"]))
    return out[:MAX_FINDINGS]
