"""The agent loop on a real GPU: a PyTorch workload's payload read after
the run tells busy from idle (gpu_busy_time_nanoseconds agrees with the
kernel time CUPTI measured), and graphsignal-diff of an fp32 and a bf16
GEMM run names the GEMM kernel on its first line.

Workload: scripts/workloads/gemm_loop.py under graphsignal-run. Set
GRAPHSIGNAL_TEST_ARTIFACTS=DIR to keep the payloads and the diff."""
import json
import os
import subprocess
import sys

import pytest

from support.gsrun import metrics, quiet_env, run_wrapped

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMM_LOOP = os.path.join(ROOT, "scripts", "workloads", "gemm_loop.py")
DIFF = [sys.executable, "-m", "graphsignal.cli.diff"]


def _artifact(name, data):
    art = os.environ.get("GRAPHSIGNAL_TEST_ARTIFACTS")
    if art:
        os.makedirs(art, exist_ok=True)
        with open(os.path.join(art, name), "w") as f:
            f.write(data if isinstance(data, str) else json.dumps(data, indent=1))


def gemm_run(name, *args):
    proc, signals = run_wrapped([sys.executable, GEMM_LOOP] + [str(a) for a in args], env=quiet_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    assert signals is not None, proc.stderr.decode(errors="replace")[-3000:]
    _artifact(name + ".signals.json", signals)
    (did,) = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return did, signals


def kernel_ns(signals, **tags):
    return sum(f["value"] for name in ("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds")
               for m in metrics(signals, name, **tags) for f in m["stats"]["frames"])


def test_post_run_gpu_busy_time_agrees_with_cupti_kernel_time():
    # ~4 s of back-to-back bf16 GEMMs between idle stretches
    did, signals = gemm_run("busy_bf16", "--dtype", "bfloat16", "--size", 8192, "--iters", 2500)
    pid = str(did["pid"])
    kern = [m for m in metrics(signals, "cuda_kernels_nanoseconds", **{"process.pid": pid}) if m["stats"]["frames"]]
    assert kern, "no kernel profile"
    uuid = kern[0]["tags"]["device.uuid"]
    cupti_ns = kernel_ns(signals, **{"process.pid": pid, "device.uuid": uuid})
    (busy,) = metrics(signals, "gpu_busy_time_nanoseconds", **{"device.uuid": uuid})
    assert busy["type"] == "counter"
    busy_ns = busy["stats"]["total"]
    # read after the run the gauge is the idle tail; the twin still has the loop
    assert cupti_ns > 2e9, cupti_ns
    assert abs(busy_ns - cupti_ns) <= 0.10 * cupti_ns, (busy_ns, cupti_ns, did)


def test_diff_of_fp32_and_bf16_gemm_runs_names_the_gemm_first(tmp_path):
    args = ("--size", 4096, "--iters", 400, "--idle-before", 1, "--idle-after", 1)
    _, before = gemm_run("diff_fp32", "--dtype", "float32", *args)
    _, after = gemm_run("diff_bf16", "--dtype", "bfloat16", *args)
    b, a = tmp_path / "fp32.json", tmp_path / "bf16.json"
    b.write_text(json.dumps(before))
    a.write_text(json.dumps(after))
    r = subprocess.run(DIFF + [str(b), str(a)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    _artifact("diff_fp32_bf16.txt", r.stdout)
    first = r.stdout.splitlines()[0]
    # the largest kernel of the fp32 run is its GEMM, and the first line names it
    frames = [f for m in metrics(before, "cuda_kernels_nanoseconds") for f in m["stats"]["frames"]]
    top = max(frames, key=lambda f: f["value"])
    assert top["category"] == "gemm", top
    assert first.startswith("largest change: kernel " + top["display_name"]), (first, top)
    assert "[gemm]" in first
    out = json.loads(subprocess.run(DIFF + [str(b), str(a), "--json"], capture_output=True, text=True,
                                    timeout=60).stdout)
    assert out["warnings"] == []
    prof = [c for c in out["changes"] if c["kind"] == "profile"]
    assert prof[0]["frame"] == top["name"] and prof[0]["delta"] < 0
