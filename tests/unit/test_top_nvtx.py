"""graphsignal-top's NVTX RANGES section from payloads: one row per
(domain, path) summed over processes, the window's largest first, GPU time
beside host time when the run had --nvtx gpu, totals since start when the
window holds nothing, and no row of it among the probes."""
from graphsignal.top.render import UI, render
from graphsignal.top.text import line_text
from graphsignal.top.state import TopState


def profile(name, pid, domain, frames, window=False):
    stats = {"frames": [{"name": n, "value": v, "samples": s} for n, v, s in frames]}
    m = {"name": name, "type": "profile", "tags": {"process.pid": pid, "nvtx.domain": domain}, "stats": stats}
    if not window:
        m["updated_ns"] = 1
    return m


def payload(metrics, window_metrics=None):
    p = {"profiler": {"version": "test"}, "payload_ns": 2_000_000_000, "start_ns": 1_000_000_000, "metrics": metrics,
         "errors": [], "resources": []}
    if window_metrics is not None:
        p["window"] = {"seconds": 5, "covered_seconds": 5.0, "partial": False, "metrics": window_metrics}
    return p


def section(p):
    lines = [line_text(ln) for ln in render(TopState().update(p), UI(), width=140)]
    at = next(i for i, ln in enumerate(lines) if ln.startswith(" NVTX RANGES"))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith(" ") and not lines[i].startswith("   ")),
               len(lines))
    return lines, lines[at:end]


def test_rows_per_path_summed_over_processes_with_gpu_time():
    host = [("step", 9_000_000, 30), ("step/forward", 6_000_000, 30)]
    metrics = [profile("nvtx_ranges_nanoseconds", "11", "default", host),
               profile("nvtx_ranges_nanoseconds", "12", "default", host),
               profile("nvtx_range_gpu_nanoseconds", "11", "default", [("step/forward", 4_000_000, 90)])]
    window = [profile("nvtx_ranges_nanoseconds", "11", "default", [("step/forward", 2_000_000, 10)], True),
              profile("nvtx_range_gpu_nanoseconds", "11", "default", [("step/forward", 1_500_000, 30)], True)]
    lines, sec = section(payload(metrics, window))
    print("\n".join(sec))
    assert sec[0].split()[:4] == ["NVTX", "RANGES", "2", "paths"]
    assert sec[1].split() == ["TIME", "RANGES", "AVG", "GPU", "NAME"]
    # the window's: step/forward first; one domain: names without it
    assert sec[2].split() == ["2.00", "ms", "10", "200.0", "us", "1.50", "ms", "step/forward"]
    assert sec[3].split()[-1] == "step"
    assert "no probe metrics" in next(ln for ln in lines if ln.startswith(" PROBES"))


def test_an_empty_window_shows_totals_and_domains_are_named():
    metrics = [profile("nvtx_ranges_nanoseconds", "11", "default", [("io", 3_000, 3)]),
               profile("nvtx_ranges_nanoseconds", "11", "NCCL", [("allreduce", 8_000, 4)])]
    _, sec = section(payload(metrics, []))
    print("\n".join(sec))
    assert "totals since start" in sec[0]
    assert sec[1].split() == ["TIME", "RANGES", "AVG", "NAME"]  # no GPU column without --nvtx gpu
    assert sec[2].split()[-2:] == ["NCCL:", "allreduce"] and sec[2].split()[2] == "4"
    assert sec[3].split()[-2:] == ["default:", "io"]


def test_no_nvtx_no_section():
    lines = [line_text(ln) for ln in render(TopState().update(payload([])), UI(), width=140)]
    assert not [ln for ln in lines if "NVTX" in ln]
