"""Memory-bound elementwise adds of a known count, for comparing kernel
time totals with torch.profiler's. Only the add kernel runs (torch.empty
tensors, out= result), so the process's whole kernel time is the adds'.

  python add_loop.py --reps 1000            # under graphsignal-run
  python add_loop.py --reps 1000 --profile  # bare, measured by torch.profiler
"""
import argparse
import json
import os
import sys
import tempfile

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("add_loop.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("add_loop.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--elements", type=int, default=1 << 28)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    x = torch.empty(a.elements, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    # Warm-up under graphsignal counts too: the whole process's adds are compared.
    for _ in range(a.warmup):
        torch.add(x, y, out=out)
    torch.cuda.synchronize()
    result = {"pid": os.getpid(), "adds": a.reps + a.warmup}
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.reps):
                torch.add(x, y, out=out)
            torch.cuda.synchronize()
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)
        os.unlink(path)
        events = events.get("traceEvents", events) if isinstance(events, dict) else events
        kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
        result.update(adds=a.reps, profiler_kernels=len(kernels),
                      profiler_kernel_ns=int(round(sum(float(e["dur"]) for e in kernels) * 1000)),
                      names=sorted({e["name"] for e in kernels}))
    else:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.reps):
            torch.add(x, y, out=out)
        end.record()
        torch.cuda.synchronize()
        result["event_ns"] = int(start.elapsed_time(end) * 1e6)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
