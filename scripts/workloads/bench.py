"""Benchmark workloads for scripts/bench_overhead.py: each is timed in
blocks of iterations (synchronized at both ends) and reported as the median
per-iteration time over the blocks, one JSON line per workload.

  python bench.py --workloads tiny,graph64,gemm,copies,decode

tiny     launch-bound eager kernels (a 1 K-element add)
graph64  a CUDA graph of 64 small kernels, replayed
gemm     8192^3 bf16 matrix products
copies   64 MiB pinned host->device and device->host copies with a sync
decode   token-by-token decode of a small random-weight transformer
decode_nvtx  the same decode with the NVTX ranges an engine puts around its
         stages: one range per step, one per layer, attention and MLP inside
         it (25 ranges per token), through torch.cuda.nvtx; blocks without
         the ranges alternate with them in the same process and are reported
         as decode_nvtx_noranges
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("bench.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("bench.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")

WORKLOADS = ("tiny", "graph64", "gemm", "copies", "decode", "decode_nvtx")


def timed(step, iters, blocks, warmup=2):
    """Median seconds per iteration over `blocks` blocks of `iters`."""
    return timed_alternating([step], iters, blocks, warmup)[0]


def timed_alternating(steps, iters, blocks, warmup=2):
    """timed() of several steps whose blocks alternate in this process (one
    block of each in turn): [(median, per-block seconds)] in their order."""
    for step in steps:
        for _ in range(warmup):
            step(iters)
    torch.cuda.synchronize()
    pers = [[] for _ in steps]
    for _ in range(blocks):
        for step, per in zip(steps, pers):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(iters)
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) / iters)
    return [(statistics.median(per), per) for per in pers]


def tiny(scale):
    x = torch.empty(1024, device="cuda")

    def step(n):
        for _ in range(n):
            x.add_(1.0)
    return timed(step, 5000, 10 * scale)


def graph64(scale):
    x = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1.0)  # warm-up outside capture, as PyTorch asks
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(64):
            x.add_(1.0)

    def step(n):
        for _ in range(n):
            g.replay()
    return timed(step, 200, 10 * scale)


def gemm(scale):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step(n):
        for _ in range(n):
            torch.matmul(a, b, out=c)
    return timed(step, 10, 8 * scale)


def copies(scale):
    n = 64 << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream()

    def step(k):
        for _ in range(k):
            dev.copy_(host, non_blocking=True)
            host.copy_(dev, non_blocking=True)
            stream.synchronize()
    return timed(step, 10, 8 * scale)


class TinyDecoder:
    """Random weights, no downloads: 8 layers, d=1024, 16 heads, KV cache."""

    def __init__(self, layers=8, d=1024, heads=16, vocab=32000, max_len=1024):
        g = torch.Generator(device="cuda").manual_seed(0)
        def w(*s):
            return torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g) / math.sqrt(s[0])
        self.d, self.h, self.dh = d, heads, d // heads
        self.scale = 1.0 / math.sqrt(self.dh)
        self.emb = w(vocab, d)
        self.layers = [dict(qkv=w(d, 3 * d), o=w(d, d), up=w(d, 4 * d), down=w(4 * d, d),
                            n1=torch.ones(d, device="cuda", dtype=torch.bfloat16),
                            n2=torch.ones(d, device="cuda", dtype=torch.bfloat16)) for _ in range(layers)]
        self.k = torch.zeros(layers, 1, heads, max_len, self.dh, device="cuda", dtype=torch.bfloat16)
        self.v = torch.zeros_like(self.k)
        self.pos = 0
        self.tok = torch.zeros(1, dtype=torch.long, device="cuda")

    def step(self, nvtx=None):
        x = self.emb[self.tok].view(1, 1, self.d)
        t = self.pos
        for i, L in enumerate(self.layers):
            if nvtx:
                nvtx.range_push("layer")
                nvtx.range_push("attention")
            h = F.rms_norm(x, (self.d,), L["n1"])
            q, k, v = (h @ L["qkv"]).view(1, 1, 3, self.h, self.dh).unbind(2)
            self.k[i, :, :, t] = k[:, 0]
            self.v[i, :, :, t] = v[:, 0]
            # Attention spelled out: SDPA may pick a backend that builds a
            # new plan for every cache length, which would time the planner.
            kk, vv = self.k[i, :, :, :t + 1], self.v[i, :, :, :t + 1]
            att = (q.transpose(1, 2) @ kk.transpose(-1, -2)) * self.scale
            a = att.softmax(-1) @ vv
            x = x + a.transpose(1, 2).reshape(1, 1, self.d) @ L["o"]
            if nvtx:
                nvtx.range_pop()
                nvtx.range_push("mlp")
            h = F.rms_norm(x, (self.d,), L["n2"])
            x = x + F.gelu(h @ L["up"]) @ L["down"]
            if nvtx:
                nvtx.range_pop()
                nvtx.range_pop()
        logits = x.view(1, self.d) @ self.emb.t()
        self.tok = logits.argmax(-1)
        self.pos = (self.pos + 1) % self.k.shape[3]


def decode(scale):
    m = TinyDecoder()

    def step(n):
        for _ in range(n):
            m.step()
    with torch.inference_mode():
        return timed(step, 16, 6 * scale, warmup=1)


def decode_nvtx(scale):
    """Blocks with the ranges and blocks without them, alternating in one
    process: their difference is what the ranges cost there, free of the
    process-to-process spread (a whole run's speed can differ by tens of
    percent between two processes on a shared host)."""
    m = TinyDecoder()
    nvtx = torch.cuda.nvtx
    nvtx.mark("ready")  # NVTX attaches its tool on its first call, not inside the timed blocks

    def ranged(n):
        for _ in range(n):
            nvtx.range_push("step")
            m.step(nvtx)
            nvtx.range_pop()

    def plain(n):
        for _ in range(n):
            m.step()
    with torch.inference_mode():
        on, off = timed_alternating([ranged, plain], 16, 6 * scale, warmup=1)
    return {"decode_nvtx": on, "decode_nvtx_noranges": off}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--scale", type=int, default=1, help="multiplies the number of timed blocks")
    a = ap.parse_args()
    def emit(**kv):
        sys.stdout.write(json.dumps(kv) + "\n")
        sys.stdout.flush()
    torch.cuda.init()
    emit(event="start", pid=os.getpid())
    for name in a.workloads.split(","):
        got = globals()[name](a.scale)
        for wl, (med, per) in (got.items() if isinstance(got, dict) else [(name, got)]):
            emit(event="result", workload=wl, us_per_iter=med * 1e6, blocks_us=[p * 1e6 for p in per])
    torch.cuda.synchronize()
    emit(event="done")


if __name__ == "__main__":
    main()
