"""Two processes (torch.multiprocessing), each with its own known number of
spin kernels: worker r launches (r + 1) * N. Each prints its pid."""
import json
import os
import sys

try:
    import torch
    import torch.multiprocessing as mp
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("two_procs.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("two_procs.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def worker(rank, n, device_count):
    torch.cuda.set_device(rank % device_count)
    for _ in range((rank + 1) * n):
        torch.cuda._sleep(1)
    torch.cuda.synchronize()
    sys.stdout.write(json.dumps({"rank": rank, "pid": os.getpid(), "spins": (rank + 1) * n,
                                 "device": rank % device_count}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    mp.spawn(worker, args=(n, torch.cuda.device_count()), nprocs=2, join=True)
