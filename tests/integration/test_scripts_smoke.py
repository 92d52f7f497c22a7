"""Every program under scripts/ runs in a smoke mode here, so none rots
unseen (issue 40: bench_fleet.py had ended in a traceback and nothing ran
it). CPU benchmarks run with small sizes and must print JSON lines with no
`error` entry; GPU-only scripts must answer --help and, with every GPU
hidden (CUDA_VISIBLE_DEVICES=""), fail with one line and no traceback.
A file under scripts/ that is in neither SMOKE nor EXCLUDED fails
test_every_script_has_a_smoke_entry_or_a_reason: a new script gets one.

The runs go three at a time (most of their wall time is waiting on
subprocesses and servers), started by a fixture for the entries the session
selected; each entry's test then checks its own results. Together they take
about 40 s on a 2-core machine."""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
PY = sys.executable
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
TIMEOUT = 90


def _json_lines(r, min_lines=1):
    """A benchmark's stdout: JSON lines only, at least min_lines, none an error."""
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(lines) >= min_lines, r.stdout
    assert not [x for x in lines if "error" in x], r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines


def _benches(*names):
    def check(r):
        got = {x.get("bench") for x in _json_lines(r)}
        assert set(names) <= got, (names, got)
    return check


def _exit_0(r):
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-3000:])


def _usage(r):
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("usage:") or r.stdout.strip(), r.stdout


def _one_line_failure(r):
    """A GPU-only script on a host without a GPU: non-zero, one line, no traceback."""
    assert r.returncode != 0, r.stdout[-2000:]
    err = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "needs" in err[0], err


def _gpu_only(name, help_args=("--help",)):
    """--help works; without a GPU, one line and a non-zero exit."""
    argv = ["bash", name] if name.endswith(".sh") else [PY, name]
    runs = [(argv + ["--help"], {}, _usage)] if help_args else []
    return runs + [(argv, NO_GPU, _one_line_failure)]


def _torch_workload(name):
    return [([PY, name], NO_GPU, _one_line_failure)]


def _nocuda(r):
    # 97: this machine cannot hide the toolkit (no unshare): said in one line
    assert r.returncode in (0, 97), r.stderr
    if r.returncode == 0:
        assert r.stdout.strip() == "None", r.stdout  # no nvcc on PATH inside
    else:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def _work_report(r):
    (line,) = _json_lines(r)
    assert line["engine"] == "llamacpp" and line["generation_tokens"] > 0, line


def _floor_path(r):
    assert r.returncode == 0, r.stderr[-3000:]
    path = r.stdout.strip().splitlines()[-1]
    assert path.endswith(".so") and os.path.exists(path), r.stdout


def _crash_trace(tmp):
    """Built as README says, preloaded into a process that dies of SIGSEGV."""
    so = os.path.join(tmp, "crash_trace.so")
    subprocess.run(["gcc", "-O1", "-g", "-fPIC", "-shared", "-o", so, os.path.join(SCRIPTS, "c", "crash_trace.c"),
                    "-ldl"], check=True, capture_output=True)
    return [([PY, "-c", "import ctypes; ctypes.string_at(0)"], {"LD_PRELOAD": so}, _crash_traced)]


def _digests(r):
    """digest_outputs.py: a SHA-256 for every document, each served twice over (a second round through the
    caches the first filled), the final payload and each recorded payload's reference encoding."""
    lines = _json_lines(r, 20)
    docs = {(x["round"], x["doc"]) for x in lines}
    for rnd in ("a", "b"):
        assert {(rnd, d) for d in ("signals", "window5", "history30", "metrics.text.engine1",
                                   "metrics.openmetrics.engine0", "otlp.engine0", "otlp.engine1")} <= docs
    assert ("end", "final") in docs and any(d.startswith("reference.") for _, d in docs)
    assert all(len(x["sha256"]) == 64 and x["bytes"] > 0 for x in lines)


def _crash_traced(r):
    assert r.returncode == -11, (r.returncode, r.stderr[-2000:])
    assert "[crash_trace] signal 11" in r.stderr, r.stderr[-2000:]


# name -> runs: (argv, extra environment, check) each, or a function of a temp folder giving them.
SMOKE = {
    # CPU benchmarks at small sizes: they must still print their JSON lines
    "bench_callbacks.py": [([PY, "bench_callbacks.py", "--reps", "1", "--calls", "1000", "--installed"], {},
                            _benches("callbacks"))],
    "bench_history.py": [([PY, "bench_history.py", "--smoke", "--reps", "1"], {},
                          _benches("history_block", "payload_bytes"))],
    "digest_outputs.py": [([PY, "digest_outputs.py"], {}, _digests)],
    "bench_hostile.py": [([PY, "bench_hostile.py", "--only", "foreign_ring,symlink_ring,malformed_line"], {},
                          lambda r: _json_lines(r, 3))],
    "bench_hostmem.py": [([PY, "bench_hostmem.py", "--reps", "1", "--calls", "1000"], {}, _benches("hostmem"))],
    "bench_kernel_names.py": [([PY, "bench_kernel_names.py", "--smoke"], {},
                               _benches("kernel_names_demangle", "kernel_profile_render"))],
    "bench_memory.py": [([PY, "bench_memory.py", "--minutes", "0.05", "--histograms", "20", "--others", "10",
                          "--sample-seconds", "1"], {}, _benches("sidecar_rss", "sidecar_rss_summary"))],
    "bench_metrics.py": [([PY, "bench_metrics.py", "-n", "1", "--reps", "1", "--series", "200"], {},
                          _benches("metrics_scrape"))],
    "bench_nvtx.py": [([PY, "bench_nvtx.py", "--reps", "1", "--calls", "1000", "--threads", "2", "--installed"], {},
                       _benches("nvtx"))],
    "bench_otlp.py": [([PY, "bench_otlp.py", "--reps", "1", "--series", "200"], {}, _benches("otlp_export"))],
    "bench_probes.py": [([PY, "bench_probes.py", "--bursts", "1"], {}, _benches("probe_record"))],
    "bench_readers.py": [([PY, "bench_readers.py", "--readers", "1", "--series", "100", "--rate", "10000",
                           "--seconds", "0.3", "--reps", "1"], {}, _benches("readers"))],
    "bench_ring.py": [([PY, "bench_ring.py", "--total", "100000", "--rate", "10000", "--seconds", "0.2",
                        "--contended-total", "100000"], {},
                       _benches("drain_rate", "steady", "contended"))],
    "bench_sidecar.py": [([PY, "bench_sidecar.py", "--reps", "1", "--idle-seconds", "0.3"], {},
                          _benches("start_latency", "true", "idle_cpu"))],
    "bench_signals.py": [([PY, "bench_signals.py", "-n", "3", "--live-seconds", "0.3", "--series", "200"], {},
                          _benches("signals_latency"))],
    # without NVML (a CPU host) it says so in one JSON line and exits 0; on a GPU host it polls
    "bench_telemetry.py": [([PY, "bench_telemetry.py", "--cycles", "2", "--interval", "0.1"], {},
                            _benches("telemetry"))],
    "benchutil.py": [([PY, "benchutil.py", "--require-gpu", "x"], NO_GPU, _one_line_failure)],
    "build_floor_inject.py": [([PY, "build_floor_inject.py"], {}, _floor_path)],
    "gen_metric_docs.py": [([PY, "gen_metric_docs.py", "--check"], {}, _exit_0)],
    "nocuda.py": [([PY, "nocuda.py", PY, "-c", "import shutil; print(shutil.which('nvcc'))"], {}, _nocuda)],
    "work_report.py": [([PY, "work_report.py", os.path.join(ROOT, "tests", "data", "h200",
                                                            "llamacpp_graph_c1.signals.json")], {}, _work_report)],
    "c/crash_trace.c": _crash_trace,
    # GPU only: --help, and one line without a GPU
    "bench_graph_toggle.py": _gpu_only("bench_graph_toggle.py"),
    "bench_overhead.py": _gpu_only("bench_overhead.py"),
    "bench_percall.py": _gpu_only("bench_percall.py"),
    "bench_probe_kernel.py": _gpu_only("bench_probe_kernel.py"),
    "interpose_census.py": _gpu_only("interpose_census.py"),
    "record_findings_cases.py": [([PY, "record_findings_cases.py", "--help"], {}, _usage),
                                 ([PY, "record_findings_cases.py", "--llama-server", "x", "--model", "x"], NO_GPU,
                                  _one_line_failure)],
    "gpu_light_spike.sh": _gpu_only("gpu_light_spike.sh"),
    "run_gpu_suite.sh": _gpu_only("run_gpu_suite.sh"),
    # PyTorch workloads of the GPU tests and bench_overhead.py: one line without CUDA
    **{"workloads/" + w: _torch_workload(os.path.join("workloads", w)) for w in (
        "add_loop.py", "bench.py", "exact.py", "gemm_loop.py", "graph_latency.py", "multi_gpu.py", "nvtx_ranges.py",
        "torch_mix.py", "two_procs.py")},
    # --help only, each for its reason:
    # a real llama-server end to end; tests/integration/test_engine_e2e_script.py runs it on a stand-in server
    "engine_e2e.py": [([PY, "engine_e2e.py", "--help"], {}, _usage)],
    # downloads from PyPI; tests/unit/test_fetch_perfetto_ui.py tests the unpacking
    "fetch_perfetto_ui.py": [([PY, "fetch_perfetto_ui.py", "--help"], {}, _usage)],
    # fresh virtual environments and downloads (minutes); tests/integration/test_install.py installs for real
    "install_matrix.py": [([PY, "install_matrix.py", "--help"], {}, _usage)],
    # needs npm and the registry; the vendored files it wrote are checked by tests/integration/test_install.py
    "vendor_uplot.py": [([PY, "vendor_uplot.py", "--help"], {}, _usage)],
    # its shortest real run (--backends sqlite --only ingest --seconds 1) takes 13 s on 2 cores, over this
    # test's budget; the fleet tests (tests/integration/test_fleet_*.py) run the server it measures, on both backends
    "bench_fleet.py": [([PY, "bench_fleet.py", "--help"], {}, _usage)],
    "bench_fleet_hostile.py": [([PY, "bench_fleet_hostile.py", "--help"], {}, _usage)],
}

# Files under scripts/ with no smoke run of their own, and why.
EXCLUDED = {
    # C and CUDA sources the benchmarks compile and run: their entries above build them
    "c/counter_writer.c": "bench_readers.py",
    "c/hostmem_bench.c": "bench_hostmem.py",
    "c/hostile_writer.c": "bench_hostile.py (its vandal cases; compiled by tests/integration/test_probes_host.py)",
    "c/nvtx_bench.cpp": "bench_nvtx.py",
    "c/print_time.c": "bench_sidecar.py",
    "c/probe_bench.c": "bench_probes.py",
    "c/register_many.c": "bench_hostile.py (its register case; compiled by tests/integration/test_probes_host.py)",
    "c/ring_contended.c": "bench_ring.py (its contended run)",
    "c/ring_writer.c": "bench_ring.py",
    "cuda/floor_inject.cpp": "build_floor_inject.py (and tests/integration/test_floor_inject.py)",
    "cuda/graph_trace_toggle.cu": "bench_graph_toggle.py (GPU)",
    "cuda/percall_bench.cu": "bench_percall.py (GPU)",
    "cuda/probe_overhead.cu": "bench_probe_kernel.py (GPU)",
    # a module, not a command: engine_e2e.py and record_findings_cases.py import it (their entries above run it)
    "llama_harness.py": "engine_e2e.py, record_findings_cases.py",
}


def _files():
    out = set()
    for d, dirs, files in os.walk(SCRIPTS):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out.update(os.path.relpath(os.path.join(d, f), SCRIPTS) for f in files if not f.endswith(".pyc"))
    return out


def test_every_script_has_a_smoke_entry_or_a_reason():
    files = _files()
    assert not set(SMOKE) & set(EXCLUDED)
    assert sorted(files - set(SMOKE) - set(EXCLUDED)) == [], "give it a SMOKE entry or an EXCLUDED reason"
    assert sorted((set(SMOKE) | set(EXCLUDED)) - files) == [], "listed but gone: remove its entry"


def _run_entry(name, tmp):
    runs = SMOKE[name]
    if callable(runs):
        runs = runs(tmp)
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error", PYTHONUNBUFFERED="1")
    results = []
    t0 = time.monotonic()
    for argv, extra, check in runs:
        r = subprocess.run(argv, cwd=SCRIPTS, env=dict(env, **extra), capture_output=True, text=True,
                           timeout=TIMEOUT)
        results.append((argv, r, check))
    return results, time.monotonic() - t0


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
    """Runs every selected entry, three at a time, once per module."""
    names = [it.callspec.params["name"] for it in request.session.items
             if getattr(it, "originalname", None) == "test_script_runs_in_its_smoke_mode"]
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futs = {n: pool.submit(_run_entry, n, str(tmp_path_factory.mktemp("smoke"))) for n in names}
        done = {}
        for n, f in futs.items():
            try:
                done[n] = f.result()
            except Exception as e:  # a timeout or a failed build: that entry's test reports it
                done[n] = e
    sys.stderr.write("\nscripts smoke: %d entries in %.1f s wall\n" % (len(names), time.monotonic() - t0))
    return done


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_script_runs_in_its_smoke_mode(name, smoke_runs):
    got = smoke_runs[name]
    if isinstance(got, Exception):
        raise got
    results, _ = got
    for argv, r, check in results:
        try:
            check(r)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (" ".join(argv[1:]), e)) from None
