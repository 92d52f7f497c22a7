"""A decode-like loop: one CUDA graph of --nodes small kernels (captured
from PyTorch), launched and waited for, over and over. Prints one JSON line
per --bin-ms of wall time: replays in the bin and their mean launch-to-end
latency in us, then a final line with the exit state. Run under a CUPTI
injection that attaches and detaches (scripts/cuda/floor_inject.cpp,
GS_FLOOR_DETACH_MS / GS_FLOOR_CYCLE_MS), the bins show what CUPTI costs
while attached and whether the cost leaves with it, in one process.

  python scripts/workloads/graph_latency.py [--nodes 145] [--seconds 4] [--bin-ms 250]
"""
import argparse
import json
import time

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("graph_latency.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("graph_latency.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=145)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--bin-ms", type=float, default=250.0)
    a = ap.parse_args()
    x = torch.ones(4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x
            for _ in range(a.nodes):
                y = y * 1.0001
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(a.nodes):
            y = y * 1.0001
    torch.cuda.synchronize()
    t_end = time.perf_counter() + a.seconds
    t0 = time.perf_counter()
    n, lat = 0, 0.0
    b = 0
    while True:
        a0 = time.perf_counter()
        g.replay()
        torch.cuda.current_stream().synchronize()
        a1 = time.perf_counter()
        n += 1
        lat += a1 - a0
        if a1 - t0 >= a.bin_ms / 1000.0:
            print(json.dumps({"bin": b, "replays": n, "latency_us": round(1e6 * lat / n, 2)}), flush=True)
            b, n, lat, t0 = b + 1, 0, 0.0, a1
        if a1 >= t_end:
            break
    print(json.dumps({"done": True, "value": round(float(y[0]), 4)}), flush=True)


if __name__ == "__main__":
    main()
