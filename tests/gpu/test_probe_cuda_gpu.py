"""In-kernel probes on a GPU: exact counts from every block, CUDA graph
replays multiply them, the global timer gives plausible durations, the
reader's copies stay out of the workload's memcpy profile; both memory
modes."""
import os
import shutil
import subprocess

import pytest

from support.cbuild import INCLUDE, ROOT
from support.gsrun import metrics, quiet_env, run_wrapped

pytestmark = pytest.mark.gpu

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


@pytest.fixture(scope="module")
def probe_kernel(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda") / "probe_kernel"
    subprocess.run([NVCC, "-std=c++17", "-arch=native", "-I", INCLUDE,
                    os.path.join(ROOT, "tests", "support", "cuda", "probe_kernel.cu"), "-o", str(out)], check=True)
    return str(out)


def _stats(signals, name):
    found = metrics(signals, name)
    assert len(found) == 1, found
    return found[0]["stats"]


@pytest.mark.parametrize("memory", ["device", "mapped"])
def test_in_kernel_records_are_exact(probe_kernel, memory):
    blocks, replays, spin_us = 1000, 50, 100
    proc, signals = run_wrapped([probe_kernel, str(blocks), str(replays), str(spin_us)],
                                env=quiet_env(GRAPHSIGNAL_PROBE_CUDA_MEMORY=memory))
    assert proc.returncode == 0, proc.stderr
    assert b"active 1" in proc.stdout
    st = _stats(signals, "kp_blocks_value")
    assert (st["count"], st["sum"], st["min"], st["max"]) == (blocks, blocks * (blocks + 1) // 2, 1, blocks)
    st = _stats(signals, "kp_graph_value")
    assert (st["count"], st["sum"], st["min"], st["max"]) == (
        blocks * replays, replays * blocks * (blocks + 1) // 2, 1, blocks)
    st = _stats(signals, "kp_spin_nanoseconds")
    assert st["count"] == 8
    assert spin_us * 1000 <= st["min"] <= st["max"] < spin_us * 1000 + 1_000_000
    # the reader's own copies are not the workload's (it copies nothing itself)
    copied = sum(m["stats"]["total"] for m in metrics(signals, "cuda_memcpy_bytes"))
    assert copied == 0


def test_inert_outside_graphsignal_run(probe_kernel):
    env = {k: v for k, v in os.environ.items() if k != "GRAPHSIGNAL_RUN_ID"}
    out = subprocess.run([probe_kernel, "10", "2", "1"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "active 0" in out.stdout
