"""An engine's configuration as its GPU work shows it (llama.cpp): layers
left on the CPU, flash attention off, prompts processed in tiny
micro-batches.

A fully offloaded llama-server uses about one core (its HTTP and sampling
threads, spinning in syncs); a partial offload runs the CPU layers on
every thread it has. Flash attention shows in the eager prompt kernels
(flash_attn_*, graph mode or node mode alike); without it the same passes
run soft_max kernels. Prompt speed per token against decode speed per
token says how many tokens a prompt pass carries: a pass over a batch of
prompt tokens costs about one decode step, so a healthy prefill is tens of
times faster per token than decode.
"""
import re
from typing import List

from graphsignal.findings.facts import KERNELS, Facts, evidence, finding
from graphsignal.signals_model import Finding

MIN_OFFLOAD_CORES = 2.5  # the workload's CPU in cores (a full offload: about 1)
MAX_OFFLOAD_BUSY = 0.5
MIN_OFFLOAD_TOKENS = 50
MIN_KERNEL_FRAMES = 5  # eager kernel frames that show how prompts ran
MIN_PROMPT_TOKENS = 1000  # processed (not cached) prompt tokens over the span
MAX_PROMPT_RATIO = 0.06  # prompt seconds per token / decode seconds per token
HEALTHY_PROMPT_RATIO = 0.02
OFFLOAD_LINE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def cpu_offload(f: Facts) -> List[Finding]:
    if f.engine_name != "llamacpp":
        return []
    line = None
    for e in f.errors:
        m = OFFLOAD_LINE.search(str(e.get("message") or ""))
        if m and int(m.group(1)) < int(m.group(2)):
            line = (e["message"], int(m.group(1)), int(m.group(2)))
    cores, busy = f.cpu_cores(), f.gpu_busy_share()
    heavy = cores is not None and busy is not None and (f.tokens or 0) >= MIN_OFFLOAD_TOKENS and \
        cores >= MIN_OFFLOAD_CORES and busy <= MAX_OFFLOAD_BUSY
    if line is None and not heavy:
        return []
    ev = []
    if line is not None:
        ev.append(evidence("errors", "layers_on_gpu", line[1], "<=", line[2] - 1, "", {"message": line[0][:160]}))
    if cores is not None:
        ev.append(evidence("process_cpu_time_nanoseconds", "cores", cores, ">=", MIN_OFFLOAD_CORES, "cores",
                           {"scope": "process_tree"}))
    if busy is not None:
        ev.append(evidence("gpu_busy_time_nanoseconds", "share_of_span", busy, "<=", MAX_OFFLOAD_BUSY, "fraction"))
    stake = 1.0 - busy if busy is not None else 0.5
    title = ("only %d of %d layers are on the GPU" % (line[1], line[2]) if line else
             "layers run on the CPU: %.1f cores busy, the GPU %.0f%%" % (cores or 0, 100 * (busy or 0)))
    return [finding(
        f, "cpu_offload", "config", title, ev, "wall_time", stake,
        "the GPU's idle share while the CPU layers run", "high" if line else "medium",
        [("llamacpp", "-ngl 99 (every layer on the GPU); if it does not fit (gpu_memory_free_bytes), a smaller "
                      "quantization or context (-c), or --override-tensor to keep only expert/FFN weights on the "
                      "CPU")],
        [("process_cpu_time_nanoseconds", "down"), ("gpu_busy_time_nanoseconds", "up")])]


def flash_attention_off(f: Facts) -> List[Finding]:
    if f.engine_name != "llamacpp":
        return []
    frames = f.kernel_frames(counted=True)
    series = f.launch_series()  # under --cuda-trace light the shares are of launches, not of time
    if len(frames) < MIN_KERNEL_FRAMES:
        return []
    names = [(fr[0] + " " + fr[4]).lower() for fr in frames]
    if any("flash_attn" in n for n in names):
        return []
    soft = [fr for fr, n in zip(frames, names) if "soft_max" in n]
    if not soft:
        return []
    total = sum(fr[1] for fr in frames) or 1.0
    share = sum(fr[1] for fr in soft) / total
    ev = [evidence(series, "flash_attn_frames", 0, "==", 0),
          evidence(series, "soft_max_share", share, "", None, "fraction", {"frame": soft[0][0]})]
    return [finding(
        f, "flash_attention_off", "config", "flash attention is off: attention runs as soft_max and separate GEMMs",
        ev, "gpu_time", max(share, 0.05), "the soft_max kernels' share of kernel time, at least 5%: the KQ and KQV "
        "GEMMs and their memory traffic are also at stake", "medium" if series == KERNELS else "low",
        [("llamacpp", "-fa on (flash attention; also lets a quantized KV cache -ctk/-ctv q8_0 be used)")],
        [(series, "zero", {"frame": soft[0][0]}), (series, "up", {"category": "attention"})])]


def tiny_prompt_batches(f: Facts) -> List[Finding]:
    if f.engine_name != "llamacpp":
        return []
    p_tokens, p_secs = f.total("llamacpp:prompt_tokens_total"), f.total("llamacpp:prompt_seconds_total")
    d_tokens, d_secs = f.total("llamacpp:tokens_predicted_total"), f.total("llamacpp:tokens_predicted_seconds_total")
    if not p_tokens or not p_secs or not d_tokens or not d_secs or p_tokens < MIN_PROMPT_TOKENS:
        return []
    ratio = (p_secs / p_tokens) / (d_secs / d_tokens)
    if ratio < MAX_PROMPT_RATIO:
        return []
    stake = p_secs / (p_secs + d_secs) * (1.0 - HEALTHY_PROMPT_RATIO / ratio)
    ev = [evidence("engine.prompt_seconds_per_token", "over_decode_seconds_per_token", ratio, ">=",
                   MAX_PROMPT_RATIO),
          evidence("llamacpp:prompt_tokens_total", "total", p_tokens, ">=", MIN_PROMPT_TOKENS),
          evidence("llamacpp:prompt_seconds_total", "total", p_secs, "", None, "seconds")]
    return [finding(
        f, "tiny_prompt_batches", "config", "prompts run in tiny batches: a prompt token costs %.2f of a decoded one"
        % ratio, ev, "wall_time", stake, "prompt time beyond what a full batch (%.2f of a decode step per token) "
        "would take" % HEALTHY_PROMPT_RATIO, "medium",
        [("llamacpp", "raise -ub (micro-batch, default 512) and -b (batch, default 2048) back to their defaults "
                      "or above the prompt length")],
        [("llamacpp:prompt_seconds_total", "down"), ("engine.prompt_seconds_per_token", "down")])]


RULES = (cpu_offload, flash_attention_off, tiny_prompt_batches)
