"""NVTX ranges on a GPU: PyTorch's torch.cuda.nvtx and a C++ CUDA program
(scripts/cuda/percall_bench.cu --nvtx-exact), under graphsignal-run with
NVTX collection on (the default) and with GPU time per range (--nvtx gpu).

Checked through the final payload: exact range counts per nesting path,
host time consistent with the wall clock the workload measured, and GPU
time per range equal to the time of the kernels launched inside it (each
range launches kernels of its own, so the kernel profile gives the
expected GPU time exactly). Diagnostics (the frames, the library's debug
lines) are printed, and kept under GRAPHSIGNAL_TEST_ARTIFACTS."""

import pytest

from graphsignal.launch import injection
from test_cupti_gpu import frames, percall_exe, run  # noqa: F401  (percall_exe: the compiled C++ program)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def library_has_nvtx():
    libs = injection.built_libraries()
    if not libs:
        pytest.skip("no CUPTI injection library built")
    without = [p for p in libs.values() if not injection.has_nvtx(p)]
    assert not without, "built without NVTX headers (no nvtx3/ in the toolkit or the nvidia-nvtx wheel): %s" % without


def nvtx(signals, name, domain="default", pid=None):
    tags = {"nvtx.domain": domain}
    if pid is not None:
        tags["process.pid"] = str(pid)
    return frames(signals, name, **tags)


def only(fr, needle):
    found = {k: v for k, v in fr.items() if needle in k}
    assert len(found) == 1, (needle, fr)
    return next(iter(found.values()))


def show(label, fr):
    print("%s:" % label)
    for k, (v, n) in sorted(fr.items(), key=lambda kv: -kv[1][0])[:20]:
        print("   %12d ns %8d  %s" % (v, n, k[:100]))


# -- PyTorch -------------------------------------------------------------------------
TORCH = ["--steps", 30, "--spins", 3, "--cycles", 2_000_000]


@pytest.fixture(scope="module", params=["on", "gpu"])
def torch_run(request):
    pytest.importorskip("torch")
    lines, signals, err = run("nvtx_torch_" + request.param, "nvtx_ranges.py", *TORCH,
                              options=["--nvtx", request.param])
    print("\n".join(ln for ln in err.splitlines() if "NVTX" in ln or "nvtx" in ln)[-3000:])
    return request.param, lines[-1], signals


def test_torch_nested_ranges_are_counted_exactly(torch_run):
    mode, did, signals = torch_run
    host = nvtx(signals, "nvtx_ranges_nanoseconds", pid=did["pid"])
    show("host (%s)" % mode, host)
    steps = did["steps"]
    assert {k: v[1] for k, v in host.items()} == {"step": steps, "step/compute": steps, "step/wait": steps}
    marks = sum(m["stats"]["total"] for m in signals["metrics"] if m["name"] == "nvtx_marks")
    assert marks == did["marks"]
    dropped = [m for m in signals["metrics"] if m["name"] == "graphsignal_nvtx_dropped"]
    assert not dropped, dropped


def test_torch_without_cuda_tracing_keeps_nvtx_and_telemetry_and_collects_no_cuda_activity():
    # --cuda-trace off: CUPTI never attaches; NVTX reaches the library through its own injection
    pytest.importorskip("torch")
    lines, signals, err = run("nvtx_torch_cuda_trace_off", "nvtx_ranges.py", *TORCH, options=["--cuda-trace", "off"])
    did = lines[-1]
    host = nvtx(signals, "nvtx_ranges_nanoseconds", pid=did["pid"])
    steps = did["steps"]
    assert {k: v[1] for k, v in host.items()} == {"step": steps, "step/compute": steps, "step/wait": steps}
    names = {m["name"] for m in signals["metrics"]}
    assert not {n for n in names if n.startswith("cuda_")}, sorted(names)
    assert "gpu_utilization_percent" in names and signals["context"]["cuda.trace"] == "off"


def test_torch_host_time_is_consistent_with_the_wall_clock(torch_run):
    _, did, signals = torch_run
    host = nvtx(signals, "nvtx_ranges_nanoseconds", pid=did["pid"])
    wall = did["loop_wall_ns"]
    step, compute, wait = host["step"][0], host["step/compute"][0], host["step/wait"][0]
    print("loop wall %d ns; step %d, compute %d, wait %d" % (wall, step, compute, wait))
    assert step <= wall  # the ranges are inside the loop the workload timed
    assert step >= 0.8 * wall  # and the loop is nothing but steps
    assert step >= compute + wait


def test_torch_gpu_time_per_range_is_the_kernels_launched_inside(torch_run):
    mode, did, signals = torch_run
    gpu = nvtx(signals, "nvtx_range_gpu_nanoseconds", pid=did["pid"])
    show("gpu (%s)" % mode, gpu)
    kernels = frames(signals, "cuda_kernels_nanoseconds", **{"process.pid": str(did["pid"])})
    show("kernels", kernels)
    if mode == "on":
        assert not gpu  # GPU time per range is --nvtx gpu's
        return
    spin = only(kernels, "spin_kernel")
    assert spin[1] == did["steps"] * did["spins"]
    # every spin kernel was launched inside step/compute, and nothing else was launched in a range
    assert gpu == {"step/compute": spin}
    host = nvtx(signals, "nvtx_ranges_nanoseconds", pid=did["pid"])
    assert host["step"][0] >= 0.95 * spin[0]  # each step waited for its kernels


# -- C++ -------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["on", "gpu"])
def cpp_run(request, percall_exe):  # noqa: F811
    lines, signals, err = run("nvtx_cpp_" + request.param, percall_exe, "--nvtx-exact",
                              options=["--nvtx", request.param])
    print("\n".join(ln for ln in err.splitlines() if "NVTX" in ln or "nvtx" in ln)[-3000:])
    return request.param, lines[-1], signals


def test_cpp_ranges_are_counted_exactly(cpp_run):
    mode, did, signals = cpp_run
    host = nvtx(signals, "nvtx_ranges_nanoseconds", pid=did["pid"])
    show("host (%s)" % mode, host)
    assert {k: v[1] for k, v in host.items()} == {"outer": 1, "outer/inner": 1, "thread": 1}
    assert {k: v[1] for k, v in nvtx(signals, "nvtx_ranges_nanoseconds", "gs-exact").items()} == {"inner": 1}
    assert host["outer"][0] <= did["outer_wall_ns"]
    assert host["outer"][0] >= 0.8 * did["outer_wall_ns"]


def test_cpp_gpu_time_per_range_is_exactly_its_kernels(cpp_run):
    mode, did, signals = cpp_run
    pid = str(did["pid"])
    gpu = nvtx(signals, "nvtx_range_gpu_nanoseconds", pid=pid)
    kernels = frames(signals, "cuda_kernels_nanoseconds", **{"process.pid": pid})
    graphs = frames(signals, "cuda_graphs_nanoseconds", **{"process.pid": pid})
    show("gpu (%s)" % mode, gpu)
    show("kernels", kernels)
    show("graphs", graphs)
    if mode == "on":
        assert not gpu
        return
    outer, inner = only(kernels, "gs_nvtx_outer"), only(kernels, "gs_nvtx_inner")
    thread, outside = only(kernels, "gs_nvtx_thread"), only(kernels, "gs_nvtx_outside")
    assert outer[1] == did["outer"] and thread[1] == did["thread"] and outside[1] == did["outside"]
    assert inner[1] == did["inner_runtime"] + did["inner_driver"]  # the runtime's launches and the driver's
    (graph,) = graphs.values()
    assert graph[1] == did["replays"]
    # kernels go to the innermost range on their thread: the default domain's
    # "inner" was pushed after the other domain's, so it is the innermost
    assert gpu == {"outer": outer, "outer/inner": (inner[0] + graph[0], inner[1] + graph[1]), "thread": thread}
    assert not nvtx(signals, "nvtx_range_gpu_nanoseconds", "gs-exact", pid=pid)
