#!/usr/bin/env python3
"""In-kernel probe cost (JSON lines): per-launch time of a ~20 us compute
kernel with and without one GRAPHSIGNAL_RECORD per block, interleaved, under
graphsignal-run (collected) and outside it (inert, NULL data). The memory
mode follows GRAPHSIGNAL_PROBE_CUDA_MEMORY (device or mapped).
Target: <= 2% slower. Needs nvcc and a GPU."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from benchutil import INCLUDE, ROOT, emit, require_gpu

GS_RUN = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", "0"]


def main():
    argparse.ArgumentParser(description=__doc__).parse_args()
    require_gpu(__file__)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = os.path.join(tempfile.mkdtemp(), "probe_overhead")
    subprocess.run([nvcc, "-O3", "-std=c++17", "-arch=native", "-I", INCLUDE,
                    os.path.join(ROOT, "scripts", "cuda", "probe_overhead.cu"), "-o", exe], check=True)
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error")
    env.pop("GRAPHSIGNAL_RUN_ID", None)
    for collected in (True, False):
        out = subprocess.run((GS_RUN + [exe]) if collected else [exe], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            emit(bench="probe_kernel_overhead", error=out.stderr.strip()[-500:])
            continue
        sys.stdout.write(out.stdout)


if __name__ == "__main__":
    main()
