"""One process using every GPU: (d + 1) * N spin kernels on device d."""
import json
import sys

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("multi_gpu.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("multi_gpu.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")

n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
count = torch.cuda.device_count()
for d in range(count):
    with torch.cuda.device(d):
        for _ in range((d + 1) * n):
            torch.cuda._sleep(1)
for d in range(count):
    torch.cuda.synchronize(d)
sys.stdout.write(json.dumps({"devices": count, "spins": [(d + 1) * n for d in range(count)]}) + "\n")
