"""The injection library's collector without a GPU: the real library,
linked against a stand-in libcupti (tests/support/cupti/fake_cupti.cpp) that hands
it buffers and context callbacks the way CUPTI does, runs in a child
process; the sidecar's poller reads what reached the ring. Covers what
the translation tests cannot: InitializeInjection, buffer hand-off to the
collector's thread, the periodic flush, the exit flush, CUPTI's drop
count, the context callback, the trace mode switch.

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import json
import os
import re
import subprocess
import sys
import textwrap
import uuid

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
import cupti_build  # noqa: E402

from graphsignal.sidecar.poller import Poller  # noqa: E402
from graphsignal.sidecar.store import MetricStore  # noqa: E402

KIND_CONCURRENT_KERNEL, KIND_SYNCHRONIZATION, KIND_GRAPH_TRACE = 10, 38, 51
SYNC_STREAM, SYNC_CONTEXT = 3, 4


def header_set():
    """The CUPTI/CUDA headers the stand-in libcupti and the library are
    built with (the newest major here), or None."""
    sets = cupti_build.find_header_sets()
    return cupti_build.pick(sets, 13, need_lib=False) or cupti_build.pick(sets, 12, need_lib=False)


@pytest.fixture(scope="module")
def libs():
    """(the stand-in libcupti, the injection library built against it), built once a session."""
    from support import fake_cupti

    built = fake_cupti.build()
    if "why" in built:
        pytest.skip(built["why"])
    return built["fake"], built["lib"]


DRIVER = textwrap.dedent(r"""
    import ctypes, json, mmap, os, re, struct, sys, time
    fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(sys.argv[2])
    P, I, U32, U64, S = ctypes.c_size_t, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_char_p
    sigs = {
        "fake_cupti_kernels": ([S, U32, I, U64], None), "fake_cupti_sync": ([U32, U32, U64], None),
        "fake_cupti_drop": ([P], None), "fake_cupti_refused": ([], P),
        "fake_cupti_set_context": ([U32, U32], None), "fake_cupti_api_sync": ([I, P, I, I, I], I),
        "fake_cupti_rt_memcpy": ([P, P, P, I, P, I, I, I], I), "fake_cupti_dr_memcpy": ([I, P, P, P, P], I),
        "fake_cupti_memset": ([P, P, P, I], I), "fake_cupti_alloc": ([I, P, P], I),
        "fake_cupti_pointer": ([P, I], None), "fake_cupti_pointer_queries": ([], U64),
        "fake_cupti_capture": ([P, I], None), "fake_cupti_graph": ([S, U32], P),
        "fake_cupti_instantiate": ([P, P, U32, I, I], I),
        "fake_cupti_memcpy_record": ([U32, U32, U32, U64, U64, U32], I),
        "fake_cupti_memset_record": ([U32, U64, U64, U32], I), "fake_cupti_graph_records": ([U32, I, U64, U32], None),
        "fake_cupti_callback_enabled": ([I, I], I), "fake_cupti_enable_count": ([I], I),
        "fake_cupti_refuse_api_callbacks": ([I], None), "fake_cupti_clone": ([P, U32, P], None),
        "fake_cupti_threads": ([I, I, I, P, P], None), "fake_cupti_host_pinned": ([], I),
    }
    for name, (args, res) in sigs.items():
        f = getattr(fake, name)
        f.argtypes, f.restype = args, res
    out = {"returns": []}
    saved = {}
    steps = json.loads(sys.argv[3])
    if not any(s[0] == "init" for s in steps):
        steps = [["init"]] + steps
    for step in steps:
        op, args = step[0], step[1:]
        args = [saved[a[1:]] if isinstance(a, str) and a.startswith("$") and a[1:] in saved else
                re.sub(r"\$(\w+)", lambda m: str(saved[m.group(1)]), a) if isinstance(a, str) else a for a in args]
        if op == "init":
            out["init"] = lib.InitializeInjection()
            out["enabled"] = [k for k in range(64) if fake.fake_cupti_enabled(k)]
        elif op == "context":
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
        elif op == "call":  # any test hook: ["call", name, args...]
            out["returns"].append(getattr(fake, "fake_cupti_" + args[0])(*[x.encode() if isinstance(x, str) else x
                                                                           for x in args[1:]]))
        elif op == "save":  # ["save", key, name, args...]: keeps the hook's result as $key
            saved[args[0]] = getattr(fake, "fake_cupti_" + args[1])(*[x.encode() if isinstance(x, str) else x
                                                                      for x in args[2:]])
        elif op == "wait_enabled":  # until an activity kind is on (1) or off (0)
            deadline = time.monotonic() + 10
            while bool(fake.fake_cupti_enabled(args[0])) != bool(args[1]) and time.monotonic() < deadline:
                time.sleep(0.002)
            out.setdefault("waited", []).append(bool(fake.fake_cupti_enabled(args[0])) == bool(args[1]))
        elif op == "written":  # records the ring holds so far, read from its header
            name = "/dev/shm/gs-%s-%d-cupti" % (os.environ["GRAPHSIGNAL_RUN_ID"], os.getpid())
            with open(name, "rb") as f:
                out["written"] = struct.unpack_from("<Q", f.read(72), 64)[0]
    out["refused"] = fake.fake_cupti_refused()
    out["pointer_queries"] = fake.fake_cupti_pointer_queries()
    print(json.dumps(out))
""")


def run_child(libs, steps, **env):
    fake, lib = libs
    run_id = uuid.uuid4().hex[:12]
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
    e.update({k: str(v) for k, v in env.items()}, GRAPHSIGNAL_RUN_ID=run_id, GRAPHSIGNAL_CUPTI_DRIVER_LIB=fake)
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


@pytest.mark.parametrize("value,want", [(None, -1), ("0", -1), ("1", 1)])
def test_pinned_buffers_are_asked_of_cupti_only_when_set(libs, value, want):
    env = {} if value is None else {"GRAPHSIGNAL_CUPTI_PINNED": value}
    out, store, _ = run_child(libs, [["kernels", "k", 0, 3, 10], ["call", "host_pinned"]], **env)
    assert out["init"] == 1
    assert out["returns"] == [want]  # -1: the attribute was never set, CUPTI keeps its default
    assert frames(store, "cuda_kernels_nanoseconds") == {"k": (30, 3)}  # collection unchanged


def test_every_record_arrives_through_buffers_and_the_exit_flush(libs):
    steps = [["context", 5, 1], ["kernels", "k_a", 1, 30000, 100], ["complete"], ["kernels", "k_b", 1, 10, 7],
             ["sync", SYNC_STREAM, 5, 40], ["sync", SYNC_CONTEXT, 5, 60]]
    # k_a fills more than one 4 MiB buffer; the rest waits in a buffer only
    # the exit flush returns (the periodic flush is a minute away)
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_FLUSH_MS=60000, GRAPHSIGNAL_CUPTI_COLLECTION="activity")
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


# -- the hybrid collection: API callbacks for syncs, copies, memsets ------------
KIND_MEMCPY, KIND_MEMSET, KIND_MEMCPY2 = 1, 2, 22
RUNTIME_DOMAIN = 2
CB_STREAM_SYNC, CB_MEMCPY_ASYNC = 131, 41  # runtime ids
CB_CU_STREAM_SYNC, CB_CU_MEMCPY_HTOD_ASYNC = 126, 277  # driver ids
DRIVER_DOMAIN = 1
H2H, H2D, D2H, D2D, DEFAULT = 0, 1, 2, 3, 4
PINNED_BUF, PAGEABLE_BUF, DEV_BUF, DEV_BUF2, MANAGED_BUF = 0x7f0000000000, 0x600000200000, 0x7e0000000000, 0x7e0000100000, 0x7d0000000000
STREAM, CAPTURED = 0x9000, 0x9100
MIB = 1 << 20


def labeled(store, name, **tags):
    """{(frame, host_memory, duration): (value, samples)}"""
    out = {}
    for s in store.lookup(name, "profile", tags):
        for f, (v, n) in s.frames.items():
            k = (f, s.tags.get("host_memory"), s.tags.get("duration"))
            pv, pn = out.get(k, (0, 0))
            out[k] = (pv + v, pn + n)
    return out


def test_hybrid_is_the_default_and_times_syncs_by_callback(libs):
    steps = [["call", "set_context", 5, 1], ["context", 5, 1]]
    for driver in (0, 1):
        steps += [["call", "api_sync", 0, STREAM, 2000, 0, driver], ["call", "api_sync", 1, 0, 3000, 0, driver],
                  ["call", "api_sync", 2, 0, 0, 0, driver], ["call", "api_sync", 3, STREAM, 0, 0, driver]]
    steps += [["call", "api_sync", 0, STREAM, 0, 700, 0],  # a failed call (cudaErrorInvalidResourceHandle)
              ["sync", SYNC_STREAM, 5, 40],  # CUPTI makes no record of a disabled kind: the fake neither
              ["call", "callback_enabled", DRIVER_DOMAIN, CB_CU_STREAM_SYNC],
              ["call", "callback_enabled", RUNTIME_DOMAIN, CB_STREAM_SYNC]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug")
    assert KIND_SYNCHRONIZATION not in out["enabled"]
    assert out["returns"][-2:] == [1, 0]  # hooked where every call passes: the driver's entry points
    fr = frames(store, "cuda_sync_nanoseconds", **{"device.cuda_index": "1"})
    assert {k: n for k, (v, n) in fr.items()} == {"stream": 2, "context": 2, "event": 2, "stream_wait_event": 2}
    assert fr["stream"][0] >= 2 * 2000 * 1000 and fr["context"][0] >= 2 * 3000 * 1000  # host time blocked, ns
    assert "synchronization by API callbacks" in err
    assert "1 failed" in err


def test_activity_collection_uses_records_for_everything(libs):
    steps = [["call", "set_context", 5, 0], ["context", 5, 0],
             ["call", "api_sync", 0, STREAM, 0, 0, 0], ["sync", SYNC_STREAM, 5, 40],
             ["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 64, H2D, STREAM, 0, 1, 0],
             ["call", "memcpy_record", 1, 1, 3, 64, 900, 0], ["complete"],
             ["call", "callback_enabled", DRIVER_DOMAIN, CB_CU_STREAM_SYNC],
             ["call", "callback_enabled", DRIVER_DOMAIN, CB_CU_MEMCPY_HTOD_ASYNC]]
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_COLLECTION="activity")
    for k in (KIND_SYNCHRONIZATION, KIND_MEMCPY, KIND_MEMSET, KIND_MEMCPY2):
        assert k in out["enabled"]
    assert out["returns"][-2:] == [0, 0]  # no API callbacks for syncs and copies
    assert frames(store, "cuda_sync_nanoseconds") == {"stream": (40, 1)}
    assert labeled(store, "cuda_memcpy_nanoseconds") == {("host_to_device", "pageable", None): (900, 1)}


def test_copies_counted_by_callback_with_direction_bytes_and_host_memory(libs):
    steps = [["call", "set_context", 5, 0],
             ["call", "alloc", 0, PINNED_BUF, 64 * MIB],  # cudaHostAlloc
             ["call", "alloc", 3, MANAGED_BUF, MIB],  # cudaMallocManaged
             ["call", "pointer", DEV_BUF, 1], ["call", "pointer", DEV_BUF2, 1]]
    for _ in range(5):
        steps += [["call", "rt_memcpy", DEV_BUF, PINNED_BUF + 4096, 64, H2D, STREAM, 0, 1, 0],
                  ["call", "rt_memcpy", PINNED_BUF, DEV_BUF, 128, D2H, STREAM, 0, 1, 0],
                  ["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 1000, H2D, 0, 1, 1, 0],  # cudaMemcpy, pageable
                  ["call", "rt_memcpy", DEV_BUF2, DEV_BUF, MIB, D2D, STREAM, 0, 1, 0]]
    steps += [["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 4096, DEFAULT, STREAM, 0, 1, 0],  # from the ranges
              ["call", "rt_memcpy", PAGEABLE_BUF, DEV_BUF, 512, DEFAULT, STREAM, 0, 1, 0],  # asks the driver
              ["call", "rt_memcpy", DEV_BUF, MANAGED_BUF, 256, H2D, STREAM, 0, 1, 0],
              ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 77, H2D, STREAM, 0, 1, 1],  # failed: not counted
              ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 0, H2D, STREAM, 0, 1, 0],  # zero bytes: no copy
              ["call", "dr_memcpy", 0, DEV_BUF, PINNED_BUF, 32, STREAM],
              ["call", "dr_memcpy", 1, PAGEABLE_BUF, DEV_BUF, 48, STREAM],
              ["call", "dr_memcpy", 2, DEV_BUF2, DEV_BUF, 16, STREAM],
              ["call", "dr_memcpy", 3, DEV_BUF, PINNED_BUF + 64, 8, STREAM],  # unified cuMemcpyAsync
              ["call", "dr_memcpy", 4, DEV_BUF, PAGEABLE_BUF, 400, STREAM],  # cuMemcpy2DAsync
              ["call", "memset", DEV_BUF, 4096, STREAM, 0], ["call", "memset", DEV_BUF, 256, STREAM, 1],
              ["call", "memset", MANAGED_BUF, 64, STREAM, 0],
              ["call", "alloc", 4, PINNED_BUF, 0],  # cudaFreeHost: now ordinary memory
              ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 64, H2D, STREAM, 0, 1, 0]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug")
    got = labeled(store, "cuda_memcpy_nanoseconds")
    assert {k: n for k, (v, n) in got.items()} == {
        ("host_to_device", "pinned", "sampled"): 5 + 1 + 1 + 1,
        ("device_to_host", "pinned", "sampled"): 5,
        ("host_to_device", "pageable", "sampled"): 5 + 1 + 1,
        ("device_to_device", None, "sampled"): 5 + 1,
        ("device_to_host", "pageable", "sampled"): 1 + 1,
        ("host_to_device", "managed", "sampled"): 1,
    }
    assert total(store, "cuda_memcpy_bytes", kind="host_to_device", host_memory="pinned") == 5 * 64 + 4096 + 32 + 8
    assert total(store, "cuda_memcpy_bytes", kind="host_to_device", host_memory="pageable") == 5 * 1000 + 400 + 64
    assert total(store, "cuda_memcpy_bytes", kind="device_to_host", host_memory="pinned") == 5 * 128
    assert total(store, "cuda_memcpy_bytes", kind="device_to_host", host_memory="pageable") == 512 + 48
    assert total(store, "cuda_memcpy_bytes", kind="device_to_device") == 5 * MIB + 16
    # only unified-address pointers outside the known ranges ask the driver, once per 2 MiB region:
    # DEV_BUF and PAGEABLE_BUF (cudaMemcpyDefault), then both are known (cuMemcpyAsync)
    assert out["pointer_queries"] == 2
    ms = {k: n for k, (v, n) in labeled(store, "cuda_memset_nanoseconds").items()}
    assert ms == {("device", None, "sampled"): 2, ("managed", None, "sampled"): 1}
    assert total(store, "cuda_memset_bytes", kind="device") == 4096 + 256 * 4
    assert total(store, "cuda_memset_bytes", kind="managed") == 64
    assert "copies and memsets by API callbacks" in err


def test_a_driver_call_inside_a_runtime_call_counts_once(libs):
    steps = [["call", "set_context", 5, 0], ["call", "alloc", 1, PINNED_BUF, MIB]]
    steps += [["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 64, H2D, STREAM, 0, 1, 0]] * 7
    # both domains: the runtime call is reported, the driver call inside it skipped
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug", GRAPHSIGNAL_CUPTI_CB_DOMAINS="runtime,driver")
    assert labeled(store, "cuda_memcpy_nanoseconds")[("host_to_device", "pinned", "sampled")][1] == 7
    assert "skipped 7 driver calls inside runtime calls" in err
    assert "41>277" in err  # the debug log names the pairs seen
    # the default: the driver call inside is the one counted
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug")
    assert labeled(store, "cuda_memcpy_nanoseconds")[("host_to_device", "pinned", "sampled")][1] == 7
    assert "and 7 driver calls" in err and "skipped 0 driver calls" in err
    # runtime only: the same
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_CB_DOMAINS="runtime")
    assert labeled(store, "cuda_memcpy_nanoseconds")[("host_to_device", "pinned", "sampled")][1] == 7
    # and the driver alone, as a driver-API program calls it
    steps = [["call", "set_context", 5, 0], ["call", "alloc", 7, PINNED_BUF, MIB]]
    steps += [["call", "dr_memcpy", 0, DEV_BUF, PINNED_BUF, 64, STREAM]] * 3 + [["call", "alloc", 8, PINNED_BUF, 0]]
    steps += [["call", "dr_memcpy", 0, DEV_BUF, PINNED_BUF, 64, STREAM]]
    out, store, err = run_child(libs, steps)
    got = labeled(store, "cuda_memcpy_nanoseconds")
    assert got[("host_to_device", "pinned", "sampled")][1] == 3 and got[("host_to_device", "pageable", "sampled")][1] == 1


def test_calls_from_many_threads_are_counted_exactly(libs):
    # per-thread tables, flushed while the threads run (every 50 ms) and at exit
    steps = [["call", "set_context", 5, 0], ["call", "alloc", 7, PINNED_BUF, MIB],
             ["call", "threads", 8, 20000, 1, PINNED_BUF, DEV_BUF],  # cuMemcpyHtoDAsync
             ["call", "threads", 8, 15000, 0, PINNED_BUF, DEV_BUF],  # cuStreamSynchronize
             ["call", "threads", 3, 7000, 2, PINNED_BUF, DEV_BUF]]  # cuMemsetD8Async
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_FLUSH_MS=50)
    assert labeled(store, "cuda_memcpy_nanoseconds")[("host_to_device", "pinned", "sampled")][1] == 8 * 20000
    assert total(store, "cuda_memcpy_bytes", kind="host_to_device") == 8 * 20000 * 64
    assert {k: n for k, (v, n) in frames(store, "cuda_sync_nanoseconds").items()} == {"stream": 8 * 15000}
    assert labeled(store, "cuda_memset_nanoseconds")[("device", None, "sampled")][1] == 3 * 7000
    assert total(store, "cuda_memset_bytes") == 3 * 7000 * 64
    assert total(store, "graphsignal_dropped_records", writer="cupti") == 0


def test_work_captured_into_a_graph_is_not_counted(libs):
    steps = [["call", "set_context", 5, 0], ["call", "capture", CAPTURED, 1]]
    steps += [["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 64, H2D, CAPTURED, 0, 1, 0],
              ["call", "memset", DEV_BUF, 16, CAPTURED, 0], ["call", "api_sync", 3, CAPTURED, 0, 0, 0],
              ["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 64, H2D, STREAM, 0, 1, 0],  # another stream runs
              ["call", "capture", CAPTURED, 0],
              ["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 64, H2D, CAPTURED, 0, 1, 0]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug")
    assert labeled(store, "cuda_memcpy_nanoseconds") == {("host_to_device", "pageable", "sampled"): (0, 2)}
    assert frames(store, "cuda_memset_nanoseconds") == {}
    assert frames(store, "cuda_sync_nanoseconds") == {}
    assert "3 captured" in err


def test_copy_time_is_estimated_from_sampling_windows(libs):
    steps = [["call", "set_context", 5, 0], ["call", "alloc", 0, PINNED_BUF, MIB],
             ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 64, H2D, STREAM, 0, 1, 0],  # before any sample: estimated at flush
             ["wait_enabled", KIND_MEMCPY, 1]]  # a window opens at start (and at the first copy)
    steps += [["call", "memcpy_record", 1, 2, 3, 64, 5000, 0]] * 4  # HtoD pinned, 64 B: 5 us on the GPU
    steps += [["call", "memcpy_record", 1, 2, 3, 8 * MIB, 400000, 0]] * 2  # 8 MiB: 400 us
    steps += [["call", "memset_record", 3, 4096, 1500, 0], ["complete"], ["wait_enabled", KIND_MEMCPY, 0]]
    steps += [["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 64, H2D, STREAM, 0, 1, 0]] * 9
    steps += [["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 100, H2D, STREAM, 0, 1, 0],  # same bucket as 64 B
              ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 4 * MIB, H2D, STREAM, 0, 1, 0],  # bandwidth-scaled
              ["call", "rt_memcpy", PINNED_BUF, DEV_BUF, 64, D2H, STREAM, 0, 1, 0],  # a kind never sampled
              ["call", "memset", DEV_BUF, 4096, STREAM, 0],
              ["call", "memcpy_record", 1, 2, 3, 64, 1, 0], ["complete"]]  # window closed: no record
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_SAMPLE_MS=300, GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS=3600000,
                                GRAPHSIGNAL_CUPTI_SAMPLE_KINDS="memcpy,memset", GRAPHSIGNAL_LOG_LEVEL="debug")
    assert out["waited"] == [True, True]
    assert out["returns"][3:9] == [1] * 6 and out["returns"][-2] == 0
    got = labeled(store, "cuda_memcpy_nanoseconds")
    # counted only by callbacks (the sampled records time them, never count them)
    assert got[("host_to_device", "pinned", "sampled")] == (11 * 5000 + 200000, 12)
    assert got[("device_to_host", "pinned", "sampled")] == (0, 1)
    assert labeled(store, "cuda_memset_nanoseconds") == {("device", None, "sampled"): (1500, 1)}
    assert "7 copy durations sampled" in err
    # by default windows time copies only: memset times stay unestimated
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUPTI_SAMPLE_MS=300, GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS=3600000)
    assert out["returns"][9] == 0  # no memset record: its kind stayed off
    assert labeled(store, "cuda_memset_nanoseconds") == {("device", None, "sampled"): (0, 1)}
    assert labeled(store, "cuda_memcpy_nanoseconds")[("host_to_device", "pinned", "sampled")] == (11 * 5000 + 200000, 12)


def test_the_first_copy_opens_a_sampling_window(libs):
    # the start window is long over (period: an hour); the first copy opens another
    steps = [["call", "set_context", 5, 0], ["sleep", 0.5], ["call", "memcpy_record", 1, 2, 3, 64, 5000, 0],
             ["call", "rt_memcpy", DEV_BUF, PINNED_BUF, 64, H2D, STREAM, 0, 1, 0], ["wait_enabled", KIND_MEMCPY, 1],
             ["call", "memcpy_record", 1, 1, 3, 64, 3000, 0], ["complete"]]
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_SAMPLE_MS=200, GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS=3600000)
    assert out["returns"][1] == 0 and out["returns"][-1] == 1 and out["waited"] == [True]
    assert labeled(store, "cuda_memcpy_nanoseconds") == {("host_to_device", "pageable", "sampled"): (3000, 1)}


def test_node_mode_keeps_copies_on_activity_records(libs):
    steps = [["call", "set_context", 5, 0], ["call", "rt_memcpy", DEV_BUF, PAGEABLE_BUF, 64, H2D, STREAM, 0, 1, 0],
             ["call", "memcpy_record", 1, 1, 3, 64, 700, 0], ["call", "api_sync", 0, STREAM, 0, 0, 0], ["complete"],
             ["call", "callback_enabled", DRIVER_DOMAIN, CB_CU_MEMCPY_HTOD_ASYNC],
             ["call", "callback_enabled", DRIVER_DOMAIN, CB_CU_STREAM_SYNC]]
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")
    assert KIND_MEMCPY in out["enabled"] and KIND_SYNCHRONIZATION not in out["enabled"]
    assert out["returns"][-2:] == [0, 1]
    assert labeled(store, "cuda_memcpy_nanoseconds") == {("host_to_device", "pageable", None): (700, 1)}
    assert {k: n for k, (v, n) in frames(store, "cuda_sync_nanoseconds").items()} == {"stream": 1}


def test_without_api_callbacks_hybrid_falls_back_to_activity(libs):
    steps = [["call", "refuse_api_callbacks", 1], ["init"], ["call", "set_context", 5, 0], ["context", 5, 0],
             ["call", "api_sync", 0, STREAM, 0, 0, 0], ["sync", SYNC_STREAM, 5, 40], ["complete"]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="info")
    assert KIND_SYNCHRONIZATION in out["enabled"] and KIND_MEMCPY in out["enabled"]
    assert frames(store, "cuda_sync_nanoseconds") == {"stream": (40, 1)}
    assert "traced by activity records" in err


# -- graph names ------------------------------------------------------------------
NODE_KERNEL, NODE_MEMCPY, NODE_GRAPH = 0, 1, 4


def fnv_name(nodes):
    """graph_<FNV-1a 64 of the walk>_n<nodes>, as the library names graphs."""
    h = 0xcbf29ce484222325

    def mix(data):
        nonlocal h
        for b in data:
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    count = 0

    def walk(ns):
        nonlocal count
        for n in ns:
            count += 1
            if isinstance(n, list):
                mix(bytes([NODE_GRAPH]) + b"(")
                walk(n)
                mix(b")")
            elif n == "memcpy":
                mix(bytes([NODE_MEMCPY]))
            else:
                mix(bytes([NODE_KERNEL]) + n.encode() + b"\0")
    walk(nodes)
    return "graph_%016x_n%d" % (h, count)


def test_graphs_are_named_by_what_they_do_and_recaptures_fold(libs):
    decode = ["mul_mat_vec", "rms_norm", "rope"]
    steps = [["call", "set_context", 5, 0],
             ["save", "g1", "graph", "k:mul_mat_vec;k:rms_norm;k:rope", 3],
             ["save", "g2", "graph", "k:mul_mat_vec;k:rms_norm;k:rope", 8],  # a re-capture of the same step
             ["save", "g3", "graph", "k:mul_mat_vec;m;k:softmax", 9],
             ["save", "g4", "graph", "k:outer;g:$g1", 12],
             ["call", "instantiate", 0x100, "$g1", 21, 0, 0],
             ["call", "instantiate", 0x200, "$g2", 22, 0, 0],
             ["call", "instantiate", 0x300, "$g3", 23, 0, 1],  # through the driver API
             ["call", "instantiate", 0x100, "$g2", 21, 1, 0],  # cudaGraphExecUpdate in place
             ["call", "instantiate", 0x400, "$g4", 24, 0, 0],
             ["call", "graph_records", 21, 5, 100, 0], ["call", "graph_records", 22, 7, 100, 0],
             ["call", "graph_records", 23, 2, 300, 0], ["call", "graph_records", 24, 1, 50, 0],
             ["call", "graph_records", 77, 1, 10, 0],  # never instantiated here
             ["call", "clone", 0x900, 40, "$g3"],  # records may carry the id of a clone made by instantiation
             ["call", "graph_records", 40, 1, 5, 0],
             ["complete"]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_LOG_LEVEL="debug")
    name = fnv_name(decode)
    assert re.match(r"^graph_[0-9a-f]{16}_n3$", name)
    assert frames(store, "cuda_graphs_nanoseconds") == {
        name: (1200, 12), fnv_name(["mul_mat_vec", "memcpy", "softmax"]): (605, 3),
        fnv_name(["outer", decode]): (50, 1), "graph_77": (10, 1)}
    captures = {s.tags["graph"]: s.total for s in store.lookup("cuda_graph_captures", "counter")}
    assert captures == {name: 3, fnv_name(["mul_mat_vec", "memcpy", "softmax"]): 1, fnv_name(["outer", decode]): 1}
    assert "CUDA graph exec 21 (graph 3) is %s" % name in err


def test_graph_names_work_in_the_activity_collection_too_and_fall_back_without_callbacks(libs):
    steps = [["save", "g", "graph", "k:a;k:b", 3], ["call", "instantiate", 0x100, "$g", 5, 0, 0],
             ["call", "graph_records", 5, 2, 100, 0], ["complete"]]
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_COLLECTION="activity")
    assert frames(store, "cuda_graphs_nanoseconds") == {fnv_name(["a", "b"]): (200, 2)}
    out, store, _ = run_child(libs, steps, GRAPHSIGNAL_CUPTI_CALLBACKS=0)
    assert frames(store, "cuda_graphs_nanoseconds") == {"graph_5": (200, 2)}
