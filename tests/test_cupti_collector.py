"""The injection library's collector without a GPU: the real library,
linked against a stand-in libcupti (tests/cupti/fake_cupti.cpp) that hands
it buffers and context callbacks the way CUPTI does, runs in a child
process; the sidecar's poller reads what reached the ring. Covers what
the translation tests cannot: InitializeInjection, buffer hand-off to the
collector's thread, the periodic flush, the exit flush, CUPTI's drop
count, the context callback, the trace mode switch.

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from cbuild import cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
import cupti_build  # noqa: E402

from graphsignal.poller import Poller  # noqa: E402
from graphsignal.store import MetricStore  # noqa: E402

KIND_CONCURRENT_KERNEL, KIND_SYNCHRONIZATION, KIND_GRAPH_TRACE = 10, 38, 51
SYNC_STREAM, SYNC_CONTEXT = 3, 4


@pytest.fixture(scope="module")
def libs():
    cxx = cupti_build.compiler()
    sets = cupti_build.find_header_sets()
    hs = cupti_build.pick(sets, 13, need_lib=False) or cupti_build.pick(sets, 12, need_lib=False)
    if not cxx or hs is None:
        pytest.skip("no C++ compiler or CUPTI/CUDA headers here")
    out = cache_dir("fake-cupti")
    os.makedirs(out, exist_ok=True)
    fake = os.path.join(out, "libcupti.so.%d" % hs.major)
    subprocess.run(cxx + ["-std=c++17", "-O1", "-fPIC", "-shared", "-I", hs.cupti_include, "-I", hs.cuda_include,
                          "-I", cupti_build.SRC, "-idirafter", cupti_build.COMPAT,
                          os.path.join(ROOT, "tests", "cupti", "fake_cupti.cpp"),
                          "-Wl,-soname,libcupti.so.%d" % hs.major, "-pthread", "-o", fake], check=True)
    lib = cupti_build.build_variant(hs._replace(libcupti=fake), out, log=lambda m: sys.stderr.write(m + "\n"),
                                    force=True)
    assert lib, "the injection library did not build against the fake libcupti"
    return fake, lib


DRIVER = textwrap.dedent(r"""
    import ctypes, json, mmap, os, struct, sys, time
    fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(sys.argv[2])
    fake.fake_cupti_kernels.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint64]
    fake.fake_cupti_sync.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64]
    fake.fake_cupti_drop.argtypes = [ctypes.c_size_t]
    fake.fake_cupti_refused.restype = ctypes.c_size_t
    out = {"init": lib.InitializeInjection()}
    out["enabled"] = [k for k in range(64) if fake.fake_cupti_enabled(k)]
    for step in json.loads(sys.argv[3]):
        op, args = step[0], step[1:]
        if op == "context":
            fake.fake_cupti_create_context(*args)
        elif op == "kernels":
            fake.fake_cupti_kernels(args[0].encode(), *args[1:])
        elif op == "sync":
            fake.fake_cupti_sync(*args)
        elif op == "complete":
            fake.fake_cupti_complete()
        elif op == "drop":
            fake.fake_cupti_drop(*args)
        elif op == "sleep":
            time.sleep(args[0])
        elif op == "written":  # records the ring holds so far, read from its header
            name = "/dev/shm/gs-%s-%d-cupti" % (os.environ["GRAPHSIGNAL_RUN_ID"], os.getpid())
            with open(name, "rb") as f:
                out["written"] = struct.unpack_from("<Q", f.read(72), 64)[0]
    out["refused"] = fake.fake_cupti_refused()
    print(json.dumps(out))
""")


def run_child(libs, steps, **env):
    fake, lib = libs
    run_id = uuid.uuid4().hex[:12]
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
    e.update({k: str(v) for k, v in env.items()}, GRAPHSIGNAL_RUN_ID=run_id)
    p = subprocess.run([sys.executable, "-c", DRIVER, fake, lib, json.dumps(steps)], env=e, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    store = MetricStore()
    poller = Poller(store, run_id)
    poller.poll_once(final=True)  # the child is gone: drains and retires its ring
    poller.cleanup_all()
    return out, store, p.stderr


def frames(store, name, **tags):
    out = {}
    for s in store.lookup(name, "profile", tags):
        for f, (v, n) in s.frames.items():
            pv, pn = out.get(f, (0, 0))
            out[f] = (pv + v, pn + n)
    return out


def total(store, name, **tags):
    return sum(s.total for s in store.lookup(name, "counter", tags))


def test_every_record_arrives_through_buffers_and_the_exit_flush(libs):
    steps = [["context", 5, 1], ["kernels", "k_a", 1, 30000, 100], ["complete"], ["kernels", "k_b", 1, 10, 7],
             ["sync", SYNC_STREAM, 5, 40], ["sync", SYNC_CONTEXT, 5, 60]]
    # k_a fills more than one 4 MiB buffer; the rest waits in a buffer only
    # the exit flush returns (the periodic flush is a minute away)
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_FLUSH_MS=60000)
    assert out["init"] == 1
    assert frames(store, "cuda_kernels_nanoseconds", **{"device.cuda_index": "1"}) == {
        "k_a": (30000 * 100, 30000), "k_b": (70, 10)}
    # the context callback mapped context 5 to device 1
    assert frames(store, "cuda_sync_nanoseconds", **{"device.cuda_index": "1"}) == {"stream": (40, 1), "context": (60, 1)}
    assert total(store, "graphsignal_dropped_records", writer="cupti") == 0
    assert [g.value for g in store.lookup("cuda_graph_trace_mode", "gauge")] == [0]


@pytest.mark.parametrize("handoff", ["1", "0"])
def test_both_completion_paths_translate_everything(libs, handoff):
    steps = [["kernels", "k", 0, 50000, 3], ["sleep", 0.2], ["kernels", "k", 0, 5, 3]]
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_HANDOFF=handoff, GRAPHSIGNAL_CUPTI_FLUSH_MS=50)
    assert frames(store, "cuda_kernels_nanoseconds") == {"k": (150015, 50005)}


def test_graph_mode_enables_graph_trace_and_node_mode_does_not(libs):
    out, store, _ = run_child(libs, [])
    assert KIND_GRAPH_TRACE in out["enabled"] and KIND_CONCURRENT_KERNEL in out["enabled"]
    assert KIND_SYNCHRONIZATION in out["enabled"]
    out, store, _ = run_child(libs, [], GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")
    assert KIND_GRAPH_TRACE not in out["enabled"] and KIND_CONCURRENT_KERNEL in out["enabled"]
    assert [g.value for g in store.lookup("cuda_graph_trace_mode", "gauge")] == [1]


def test_periodic_flush_delivers_while_the_process_runs(libs):
    out, store, _ = run_child(libs, [["kernels", "k", 0, 500, 5], ["sleep", 0.5], ["written"]],
                              GRAPHSIGNAL_CUPTI_FLUSH_MS=50)
    assert out["written"] >= 500  # before exit: the flush thread returned the buffer
    assert frames(store, "cuda_kernels_nanoseconds") == {"k": (2500, 500)}


def test_cupti_drops_are_counted(libs):
    out, store, _ = run_child(libs, [["kernels", "k", 0, 3, 5], ["drop", 7], ["complete"]])
    assert total(store, "graphsignal_dropped_records", writer="cupti") == 7
    assert frames(store, "cuda_kernels_nanoseconds") == {"k": (15, 3)}


def test_out_of_buffers_drops_and_counts_instead_of_growing(libs):
    # two 4 MiB buffers at most; the collector thread cannot keep up with a
    # fake that completes nothing until it has asked for a third
    # fake that completes nothing until it has asked for a third. CUPTI
    # reports drops with the next buffer it returns: the last steps make one.
    steps = [["kernels", "k", 0, 60000, 1], ["sleep", 0.3], ["kernels", "last", 0, 1, 1], ["complete"]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_MAX_BUFFERS=2, GRAPHSIGNAL_LOG_LEVEL="warning")
    kept = frames(store, "cuda_kernels_nanoseconds").get("k", (0, 0))[1]
    dropped = total(store, "graphsignal_dropped_records", writer="cupti")
    assert kept + dropped == 60000
    assert dropped == out["refused"]
    assert frames(store, "cuda_kernels_nanoseconds")["last"] == (1, 1)
    assert kept >= 2 * 19000  # what two buffers hold
