"""A PyTorch workload annotated with nested torch.cuda.nvtx ranges, for the
NVTX GPU tests (tests/gpu/test_nvtx_gpu.py).

Every spin kernel (torch.cuda._sleep: nothing else in PyTorch launches
`spin_kernel`) is launched inside step/compute, so that range's GPU time
is the spin kernels' own; the kernels outside any range are fills. Prints
one JSON line with what it did and the wall time of its loop.

  python nvtx_ranges.py --steps 30 --spins 3 --cycles 2000000
"""
import argparse
import json
import os
import time

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("nvtx_ranges.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("nvtx_ranges.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--spins", type=int, default=3, help="spin kernels per step")
    ap.add_argument("--cycles", type=int, default=2_000_000, help="GPU clock cycles per spin kernel")
    ap.add_argument("--fills", type=int, default=5, help="fill kernels outside any range, before and after")
    a = ap.parse_args()
    x = torch.empty(1 << 20, device="cuda")
    for _ in range(a.fills):
        x.fill_(1.0)
    torch.cuda.synchronize()
    torch.cuda.nvtx.mark("ready")  # NVTX attaches its tool on its first call: not inside the timed loop
    t0 = time.perf_counter_ns()
    for _ in range(a.steps):
        torch.cuda.nvtx.range_push("step")
        with torch.cuda.nvtx.range("compute"):
            for _ in range(a.spins):
                torch.cuda._sleep(a.cycles)
        torch.cuda.nvtx.range_push("wait")
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_pop()
    wall = time.perf_counter_ns() - t0
    torch.cuda.nvtx.mark("done")
    for _ in range(a.fills):
        x.fill_(2.0)
    torch.cuda.synchronize()
    print(json.dumps({"pid": os.getpid(), "steps": a.steps, "spins": a.spins, "fills": 2 * a.fills, "marks": 2,
                      "loop_wall_ns": wall, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
