"""A decode-like CUDA graph workload for the sampled graph timing GPU tests:
one step of a small transformer-ish stack (GEMVs, a norm, an activation,
a softmax: a few dozen kernels) captured once into a CUDA graph and
replayed a fixed number of times, a sync and a device-to-host copy of the
"logits" after every replay, as an engine's decode loop does.

Prints one JSON line: pid, replays (warm-up included: every replay of the
graph), and the step's own timing by CUDA events over the timed replays.

  python graph_decode.py --replays 20000 --hidden 1024 --layers 8
"""
import argparse
import json
import os
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=500, help="replays before the timed ones (counted too)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    h = a.hidden
    weights = [(torch.randn(h, h, device=dev, dtype=torch.float16) / h ** 0.5,
                torch.randn(h, h, device=dev, dtype=torch.float16) / h ** 0.5) for _ in range(a.layers)]
    head = torch.randn(h, a.vocab, device=dev, dtype=torch.float16) / h ** 0.5
    x_in = torch.randn(1, h, device=dev, dtype=torch.float16)
    logits_host = torch.empty(a.vocab, dtype=torch.float32, pin_memory=True)

    def step(x):
        for w1, w2 in weights:
            y = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
            y = torch.nn.functional.silu(y @ w1)
            x = x + y @ w2
        return torch.softmax((x @ head).float(), dim=-1)

    # eager warm-up (allocator, cuBLAS handles, clocks), then one capture
    for _ in range(5):
        step(x_in)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        g.capture_begin()
        out = step(x_in)
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    def replay():
        g.replay()
        logits_host.copy_(out.view(-1), non_blocking=True)
        torch.cuda.current_stream().synchronize()

    for _ in range(a.warmup):
        replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.monotonic()
    start.record()
    for _ in range(a.replays):
        replay()
    end.record()
    end.synchronize()
    did = {"pid": os.getpid(), "replays": a.warmup + a.replays, "timed_replays": a.replays,
           "event_ns_per_step": start.elapsed_time(end) * 1e6 / a.replays,
           "wall_s": time.monotonic() - t0, "checksum": float(logits_host[:8].sum())}
    sys.stdout.write(json.dumps(did) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
