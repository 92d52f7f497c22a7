"""probe_cuda.h without a GPU: the documented in-kernel example and the GPU test
program compile with nvcc; the device-side bins are the sidecar's bins."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from support.cbuild import INCLUDE, ROOT
from graphsignal import histo

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def nvcc(src, out, *extra):
    subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "-I", INCLUDE, "-Xcompiler", "-Wall,-Wextra,-Werror",
                    os.path.join(ROOT, "tests", "support", "cuda", src), "-o", str(out)] + list(extra), check=True)


@needs_nvcc
@pytest.mark.parametrize("src", ["spec_kernel_example.cu", "probe_kernel.cu"])
def test_in_kernel_examples_compile(src, tmp_path):
    nvcc(src, tmp_path / "a.out")


@needs_nvcc
def test_device_bins_match_the_sidecar_bins(tmp_path):
    nvcc("hist_bins.cu", tmp_path / "bins")
    rng = np.random.default_rng(3)
    values = [0, 1, 31, 32, 33, 63, 64, 65, 1000, 123456789, (1 << 53) + 7, (1 << 64) - 1]
    values += rng.integers(0, 1 << 62, 200, dtype=np.uint64).tolist()
    out = subprocess.run([str(tmp_path / "bins")] + [str(v) for v in values], capture_output=True, text=True,
                         check=True).stdout.split()
    assert [int(b) for b in out] == histo.bin_index(np.array(values, dtype=np.uint64)).tolist()


HIPCC = shutil.which("hipcc")


@pytest.mark.skipif(HIPCC is None, reason="hipcc not found (Debian: apt-get install hipcc libamdhip64-dev)")
def test_rocm_header_compiles_in_a_hip_program(tmp_path):
    env = dict(os.environ, HIP_PLATFORM="amd")
    subprocess.run([HIPCC, "--offload-arch=gfx90a", "-I", INCLUDE, "-Wall", "-Wextra", "-Werror",
                    os.path.join(ROOT, "tests", "support", "cuda", "probe_hip.hip"), "-o", str(tmp_path / "probe_hip")],
                   check=True, env=env)
