"""graphsignal-export on a real GPU run: a PyTorch GEMM loop under
graphsignal-run writes its final payload with the per-second history
block; its Chrome trace has per-second GPU utilization and kernel-time
tracks that agree with the payload, and its flame graphs hold every
kernel's time. Where the consumers are installed (support.consumers) the
files are also opened in speedscope and DevTools' trace engine.

Set GRAPHSIGNAL_TEST_ARTIFACTS=DIR to keep the payload and the files."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from support import browser as sb
from support import consumers
from support.gsrun import quiet_env, run_wrapped

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMM_LOOP = os.path.join(ROOT, "scripts", "workloads", "gemm_loop.py")
EXPORT = [sys.executable, "-m", "graphsignal.cli.export"]


def test_a_gpu_runs_payload_exports_per_second_tracks_and_whole_flame_graphs(tmp_path):
    proc, signals = run_wrapped([sys.executable, GEMM_LOOP, "--dtype", "bfloat16", "--size", "8192", "--iters",
                                 "2500"], env=quiet_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    assert signals is not None and "history" in signals, proc.stderr.decode(errors="replace")[-3000:]
    art = os.environ.get("GRAPHSIGNAL_TEST_ARTIFACTS") or str(tmp_path)
    os.makedirs(art, exist_ok=True)
    src = os.path.join(art, "export_gemm.signals.json")
    with open(src, "w") as f:
        json.dump(signals, f)
    h = signals["history"]
    print("history: %d points, series %s" % (len(h["times_ns"]), sorted({s["name"] for s in h["series"]})))
    util = [s for s in h["series"] if s["name"] == "gpu_utilization_percent"]
    kern = [s for s in h["series"] if s["name"] == "cuda_kernels_nanoseconds" and s["frames"]]
    assert util and kern, h["series"]
    # the loop keeps the GPU busy for seconds: some points near full, a GEMM category carrying the time
    assert max(v for s in util for v in s["values"] if v is not None) >= 80, util
    gemm = [v for s in kern for v in s["frames"].get("gemm", []) if v is not None]
    assert gemm and max(gemm) >= 0.5e9, kern  # ns of GEMM per second: over half of each busy second
    # the history's kernel time adds up to (at most) the payload's total
    total = sum(f["value"] for m in signals["metrics"] if m["name"] == "cuda_kernels_nanoseconds"
                for f in m["stats"]["frames"])
    gaps = [(b - a) / 1e9 for a, b in zip(h["times_ns"], h["times_ns"][1:])]
    summed = sum((v or 0) * gaps[i - 1] for s in kern for vals in s["frames"].values()
                 for i, v in enumerate(vals) if i)
    print("kernel ns: payload %d, history %d" % (total, summed))
    assert 0.8 * total <= summed <= 1.01 * total
    outs = {}
    for fmt, ext in (("chrome", "trace.json"), ("speedscope", "speedscope.json"), ("folded", "folded.txt")):
        outs[fmt] = os.path.join(art, "export_gemm." + ext)
        r = subprocess.run(EXPORT + [src, "--format", fmt, "-o", outs[fmt]], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
    with open(outs["chrome"]) as f:
        trace = json.load(f)
    cats = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"].startswith("kernel time by category")]
    utils = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "utilization (%)"]
    print("trace: %d kernel-category points, %d utilization points" % (len(cats), len(utils)))
    assert len(cats) >= 3 and len(utils) >= 3
    with open(outs["folded"]) as f:
        lines = f.read().splitlines()
    kernel_lines = [x for x in lines if ";kernels;" in x]
    assert sum(int(x.rsplit(" ", 1)[1]) for x in kernel_lines) == total
    if consumers.trace_engine() is not None:
        seen = consumers.devtools_trace_summary(outs["chrome"])
        assert seen["events"] == len(trace["traceEvents"])
    if sb.find() is not None and consumers.speedscope_release() is not None:
        site = tmp_path / "site"
        shutil.copytree(consumers.speedscope_release(), site)
        shutil.copy(outs["speedscope"], site / "gemm.speedscope.json")
        with sb.Browser.start() as b, consumers.StaticServer(str(site)) as srv:
            page, title = consumers.open_in_speedscope(b, srv, "gemm.speedscope.json")
            assert title.endswith(" - speedscope") and page.problems() == []
            page.screenshot(os.path.join(art, "export_gemm.speedscope.png"))
