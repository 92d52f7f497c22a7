"""A PyTorch workload with the three ways PyTorch reaches the driver: eager
steps of a small bf16 MLP, replays of it captured with torch.cuda.graph,
and steps of torch.compile(mode="reduce-overhead") (CUDA graphs made by
Inductor, Triton kernels launched by its own launcher). Prints one JSON
line with what it did. For the interposer census (scripts/interpose_census.py).

  python torch_mix.py --eager 200 --replays 500 --compiled 200
"""
import argparse
import json
import os
import sys

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("torch_mix.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("torch_mix.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def model(width, layers):
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width)]
    return torch.nn.Sequential(*mods).cuda().to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eager", type=int, default=200)
    ap.add_argument("--replays", type=int, default=500)
    ap.add_argument("--compiled", type=int, default=0)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    m = model(a.width, a.layers)
    x = torch.randn(64, a.width, device="cuda", dtype=torch.bfloat16)
    did = {"pid": os.getpid()}
    with torch.no_grad():
        for _ in range(a.eager):
            m(x)
        torch.cuda.synchronize()
        did["eager_steps"] = a.eager
        if a.replays:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):  # warm-up on a side stream, as PyTorch's docs do
                    m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = m(x)
            for _ in range(a.replays):
                g.replay()
            torch.cuda.synchronize()
            did["replays"] = a.replays
            del y
        if a.compiled:
            cm = torch.compile(m, mode="reduce-overhead")
            for _ in range(a.compiled):
                cm(x)
            torch.cuda.synchronize()
            did["compiled_steps"] = a.compiled
    sys.stdout.write(json.dumps(did) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
