"""Launches: tiny eager kernels without CUDA graphs (launch-bound), an
engine whose CUDA graphs are off, and the GPU idle while the host is busy.

Only a run traced in graph mode (the default) tells eager kernels from
graph replays: with --cuda-graph-trace node every graph node is a kernel
record, so these rules leave such runs alone.
"""
from typing import List

from graphsignal.findings.facts import GRAPHS, KERNELS, NS, SYNC, Facts, evidence, finding
from graphsignal.signals_model import Finding

MIN_LAUNCHES = 1000  # eager kernel launches over the span
MAX_MEAN_NS = 20_000  # a kernel this short costs less GPU time than its launch's host time
MAX_REPLAY_RATIO = 0.01  # graph replays per eager launch: above it, graphs are in use
MAX_BUSY = 0.6  # the GPU's busy share; busier than this, launches are hidden behind work
LAUNCH_NS = 4_000  # host time of one launch (scripts/bench_percall.py: 3.4 us on an H100, bare)
MIN_STAKE = 0.05
MIN_TOKENS = 100  # generated tokens over the span, for an engine's per-token figures
MIN_LAUNCHES_PER_TOKEN = 10  # eager launches per generated token: a decode step run kernel by kernel
MIN_IDLE_SECONDS = 20.0  # a run shorter than this is mostly start-up (imports, loading)
MIN_IDLE_WINDOW = 5.0
MAX_IDLE_BUSY = 0.3
MIN_HOST_CORES = 0.8  # the workload's CPU outside syncs, in cores

GRAPH_CHANGES = {
    "llamacpp": "unset GGML_CUDA_DISABLE_GRAPHS (llama.cpp captures its decode step into a CUDA graph by default "
                "on one GPU); keep -ngl at all layers, since a split across devices or with the CPU also stops "
                "capture",
    "vllm": "drop --enforce-eager (and compilation_config that disables cudagraph capture); raise "
            "--max-num-seqs / cudagraph capture sizes to cover your batch sizes",
    "sglang": "drop --disable-cuda-graph; raise --cuda-graph-max-bs to the batch sizes you serve",
    "trtllm": "enable CUDA graphs in the LLM API options (cuda_graph_config: {max_batch_size: N} in "
              "--extra_llm_api_options YAML)",
}


def _busy_or_kernel_share(f: Facts) -> float:
    busy = f.gpu_busy_share()
    return busy if busy is not None else f.share(f.gpu_time())


def launch_bound(f: Facts) -> List[Finding]:
    if not f.graph_mode() or f.seconds <= 0 or not f.has(KERNELS):  # light counts launches, never their length
        return []
    launches, replays = f.launches()
    if launches < MIN_LAUNCHES or replays > MAX_REPLAY_RATIO * launches:
        return []
    mean = f.profile_time(KERNELS) / launches
    busy = _busy_or_kernel_share(f)
    stake = min(1.0 - busy, f.share(launches * LAUNCH_NS))
    if mean > MAX_MEAN_NS or busy > MAX_BUSY or stake < MIN_STAKE:
        return []
    ev = [evidence(KERNELS, "calls", launches, ">=", MIN_LAUNCHES),
          evidence(KERNELS, "mean_ns", mean, "<=", MAX_MEAN_NS, "ns"),
          evidence(GRAPHS, "calls", replays, "<=", MAX_REPLAY_RATIO * launches),
          evidence("gpu_busy_time_nanoseconds", "share_of_span", busy, "<=", MAX_BUSY, "fraction")]
    return [finding(
        f, "launch_bound", "launch", "%d tiny kernels (%.1f us each) launched one by one, the GPU busy %.0f%%"
        % (launches, mean / 1e3, 100 * busy), ev, "wall_time", stake,
        "launches x %d us of host time, at most the GPU's idle share" % (LAUNCH_NS // 1000), "medium",
        [("pytorch", "capture the step into a CUDA graph (torch.compile(mode=\"reduce-overhead\") or "
                     "torch.cuda.graphs.make_graphed_callables), or fuse the small ops (torch.compile); batch more "
                     "work into each kernel"),
         ("cuda", "capture the launch sequence once with cudaStreamBeginCapture and replay it with "
                  "cudaGraphLaunch; fuse small kernels")],
        [(GRAPHS, "up"), (KERNELS, "down"), ("gpu_busy_time_nanoseconds", "up")])]


def graphs_disabled(f: Facts) -> List[Finding]:
    if f.engine_name not in GRAPH_CHANGES or not f.graph_mode() or not f.tokens or f.tokens < MIN_TOKENS:
        return []
    launches, replays = f.launches()
    if replays > 0 or f.captures() > 0:
        return []
    per_token = launches / f.tokens
    if per_token < MIN_LAUNCHES_PER_TOKEN:
        return []
    busy = _busy_or_kernel_share(f)
    stake = min(max(0.0, 1.0 - busy), f.share(launches * LAUNCH_NS))
    if stake < MIN_STAKE:
        return []
    ev = [evidence(GRAPHS, "calls", replays, "==", 0),
          evidence("cuda_graph_captures", "total", f.captures(), "==", 0),
          evidence(f.launch_series(), "calls_per_token", per_token, ">=", MIN_LAUNCHES_PER_TOKEN),
          evidence("engine.generation_tokens", "total", f.tokens)]
    return [finding(
        f, "graphs_disabled", "launch", "CUDA graphs are off: %s launches %.0f kernels per token one by one"
        % (f.engine_name, per_token), ev, "wall_time", stake,
        "launches x %d us of host time, at most the GPU's idle share" % (LAUNCH_NS // 1000), "high",
        [(f.engine_name or "", GRAPH_CHANGES[f.engine_name or ""])],
        [(GRAPHS, "up"), ("cuda_graph_captures", "up"), ("engine.work_per_token.kernel_launches", "down")])]


def gpu_idle_cpu_bound(f: Facts) -> List[Finding]:
    if f.seconds < (MIN_IDLE_WINDOW if f.windowed else MIN_IDLE_SECONDS) or f.gpu_time() <= 0:
        return []
    busy = f.gpu_busy_share()
    cores = f.cpu_cores()
    if busy is None or cores is None or busy > MAX_IDLE_BUSY:
        return []
    host = cores - f.profile_time(SYNC) / NS / f.seconds  # a sync spins on a core: not host work
    if host < MIN_HOST_CORES:
        return []
    ev = [evidence("gpu_busy_time_nanoseconds", "share_of_span", busy, "<=", MAX_IDLE_BUSY, "fraction"),
          evidence("process_cpu_time_nanoseconds", "cores_outside_syncs", host, ">=", MIN_HOST_CORES, "cores",
                   {"scope": "process_tree"})]
    return [finding(
        f, "gpu_idle_cpu_bound", "launch", "the GPU is idle %.0f%% of the time while the host uses %.1f cores"
        % (100 * (1 - busy), host), ev, "wall_time", 1.0 - busy, "the GPU's idle share", "medium",
        [("pytorch", "find the host work between GPU steps (data loading: DataLoader(num_workers>0, "
                     "pin_memory=True); Python per-step work; tokenization) and overlap it with the GPU or move it "
                     "off the step; NVTX ranges (graphsignal-run --explain nvtx) show which stage it is"),
         ("any", "a larger batch per step amortizes fixed host work per step")],
        [("gpu_busy_time_nanoseconds", "up")])]


RULES = (graphs_disabled, launch_bound, gpu_idle_cpu_bound)
