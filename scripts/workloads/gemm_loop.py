"""Square GEMMs back to back for a while, between idle stretches: the GPU
busy time NVML integrates should equal the kernel time CUPTI measures, and
two runs in different dtypes differ in one GEMM kernel.

  python gemm_loop.py --dtype bfloat16 --iters 400   # under graphsignal-run

The idle stretch before lets the sidecar's first telemetry reading (the
busy-time counter's start) come before the GEMMs; the one after lets the
driver's last utilization samples of the loop arrive before the exit.
Prints one JSON line: pid, CUDA device UUID, dtype, GEMMs run, seconds.
"""
import argparse
import json
import os
import time

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("gemm_loop.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("gemm_loop.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="bfloat16")
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--idle-before", type=float, default=4.0)
    ap.add_argument("--idle-after", type=float, default=3.0)
    a = ap.parse_args()
    # fp32 stays fp32 (no TF32): on CUDA cores, the slow path a diff should name
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = getattr(torch, a.dtype)
    x = torch.randn(a.size, a.size, device="cuda", dtype=dtype)
    y = torch.randn(a.size, a.size, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    time.sleep(a.idle_before)
    t0 = time.monotonic()
    for _ in range(a.iters):
        torch.matmul(x, y, out=out)
    # wait by polling, not synchronize(): host time blocked in a sync would
    # be as large as the GEMMs and compete with them in a diff's ranking
    stream = torch.cuda.current_stream()
    while not stream.query():
        time.sleep(0.001)
    busy = time.monotonic() - t0
    time.sleep(a.idle_after)
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    print(json.dumps({"pid": os.getpid(), "device_uuid": ("GPU-%s" % uuid) if uuid is not None else None,
                      "dtype": a.dtype, "gemms": a.iters, "loop_seconds": round(busy, 3)}), flush=True)


if __name__ == "__main__":
    main()
