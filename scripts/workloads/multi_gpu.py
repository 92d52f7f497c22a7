"""One process using every GPU: (d + 1) * N spin kernels on device d."""
import json
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
count = torch.cuda.device_count()
for d in range(count):
    with torch.cuda.device(d):
        for _ in range((d + 1) * n):
            torch.cuda._sleep(1)
for d in range(count):
    torch.cuda.synchronize(d)
sys.stdout.write(json.dumps({"devices": count, "spins": [(d + 1) * n for d in range(count)]}) + "\n")
