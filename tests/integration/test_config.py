"""graphsignal.config: the names C writers share with the sidecar are the
header's, the flags and environment resolve once, and a flag this build
cannot honour says so once."""
import os
import re
import sys

from graphsignal import config
from graphsignal.cli.run import parse_args
from graphsignal.launch import injection
from support.gsrun import quiet_env, run_wrapped

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable


def header_strings():
    text = open(os.path.join(ROOT, "include", "graphsignal", "probe.h")).read()
    return dict(re.findall(r'^#define (GRAPHSIGNAL_\w+) "([^"]*)"', text, re.M))


def test_the_names_c_writers_share_are_the_headers():
    h = header_strings()
    assert h["GRAPHSIGNAL_RUN_ID_ENV"] == config.RUN_ID_ENV
    assert h["GRAPHSIGNAL_RING_PREFIX"] == config.RING_PREFIX
    assert h["GRAPHSIGNAL_SHM_DIR"] == config.SHM_DIR
    assert h["GRAPHSIGNAL_RING_CAPACITY_ENV"] == config.RING_CAPACITY_ENV
    # the header writes rings as PREFIX "%s-%ld-%s" (run, pid, kind)
    text = open(os.path.join(ROOT, "include", "graphsignal", "probe.h")).read()
    assert 'GRAPHSIGNAL_RING_PREFIX "%s-%ld-%s", run, (long)getpid(), kind_name' in text
    assert config.ring_prefix("abc") == "gs-abc-"
    # the sidecar's values come from the header itself, through the compiled helper
    from graphsignal.rings import layout

    assert (layout.SHM_DIR, layout.RING_PREFIX, layout.RUN_ID_ENV, layout.RING_CAPACITY_ENV) == (
        h["GRAPHSIGNAL_SHM_DIR"], h["GRAPHSIGNAL_RING_PREFIX"], h["GRAPHSIGNAL_RUN_ID_ENV"],
        h["GRAPHSIGNAL_RING_CAPACITY_ENV"])
    assert layout.lib.gs_header_string(4) == layout.ffi.NULL


def test_settings_resolve_flags_over_environment_once():
    cfg = parse_args(["--cuda-graph-trace", "node", "--output", "out.json", "true"])
    env = {"GRAPHSIGNAL_CUDA_GRAPH_TRACE": "graph", "GRAPHSIGNAL_ROCM_KERNEL_TRACE": "ALL",
           "GRAPHSIGNAL_SIGNALS_FILE": "env.json", "GRAPHSIGNAL_LINGER": "2.5", "GRAPHSIGNAL_API_KEY": " "}
    s = config.resolve(cfg, env)
    assert (s.cuda_graph_trace, s.rocm_kernel_trace, s.signals_file, s.linger, s.uploads) == \
        ("node", "all", os.path.abspath("out.json"), 2.5, False)
    assert s.wants_final
    s = config.resolve(parse_args(["true"]), {"GRAPHSIGNAL_LINGER": "soon", "GRAPHSIGNAL_API_KEY": "k"})
    assert (s.cuda_graph_trace, s.rocm_kernel_trace, s.signals_file, s.linger, s.uploads) == \
        ("graph", "none", None, 0.0, True)
    try:
        s.linger = 1.0
    except AttributeError:
        pass
    else:
        raise AssertionError("Settings is frozen")


def test_rocm_kernel_trace_without_a_rocm_library_says_once_that_it_does_nothing(tmp_path):
    assert injection.rocm_tracing_library(str(tmp_path)) is None
    show = [PY, "-c", "import os; print(os.environ['GRAPHSIGNAL_ROCM_KERNEL_TRACE'])"]
    env = quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning")
    proc, signals = run_wrapped(show, options=["--rocm-kernel-trace", "all"], env=env)
    assert proc.returncode == 0 and proc.stdout == b"all\n"
    lines = [ln for ln in proc.stderr.decode().splitlines() if "--rocm-kernel-trace" in ln]
    assert len(lines) == 1 and "does nothing in this build" in lines[0]
    entries = [e for e in signals["errors"] if "--rocm-kernel-trace" in e["message"]]
    assert len(entries) == 1 and entries[0]["level"] == "warning"
    # the same from the environment; and nothing at all for the default
    proc, _ = run_wrapped(show, env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning", GRAPHSIGNAL_ROCM_KERNEL_TRACE="all"))
    assert sum("does nothing in this build" in ln for ln in proc.stderr.decode().splitlines()) == 1
    proc, signals = run_wrapped(show, env=env)
    assert proc.stdout == b"none\n" and b"rocm" not in proc.stderr.lower()
    assert not [e for e in signals["errors"] if "rocm" in e["message"].lower()]
