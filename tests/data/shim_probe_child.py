"""A workload for the /metrics and upload tests: CUPTI kernel activity
through the injection library's own translator (the CUPTI test shim,
tests/cupti/test_shim.cpp, path in GS_SHIM) into a ring of the run, plus a
probe counter from graphsignal.probes. Every 0.1 s: KERNELS_PER_TICK
kernels of KERNEL_NS each and COUNTER_PER_TICK on the counter, until
GS_CHILD_SECONDS pass. With GS_CHILD_HISTOGRAM=1 it first records
HIST_VALUES values spread log-uniformly over 1-10 ms (in ns) into the
probe histogram myapp_latency_nanoseconds. Prints "ready" after the first
tick."""
import ctypes
import os
import sys
import time

from graphsignal import probes

KERNEL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_"
UUID = "GPU-2c44f54a-9fd0-dfe6-9927-372066286df5"
KERNEL_NS = 700_000
KERNELS_PER_TICK = 10
COUNTER_PER_TICK = 3
HIST_VALUES = 20_000


def log_uniform_ns(n=HIST_VALUES, seed=11):
    import random
    rng = random.Random(seed)
    return [int(10 ** (6 + rng.random())) for _ in range(n)]  # 1e6 .. 1e7 ns


def main():
    lib = ctypes.CDLL(os.environ["GS_SHIM"])
    lib.gs_test_open.argtypes, lib.gs_test_open.restype = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int], \
        ctypes.c_void_p
    lib.gs_test_set_uuid.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p]
    lib.gs_test_kernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                                   ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int]
    lib.gs_test_translate.argtypes, lib.gs_test_translate.restype = [ctypes.c_void_p], ctypes.c_size_t
    name = "gs-%s-%d-cupti" % (os.environ["GRAPHSIGNAL_RUN_ID"], os.getpid())
    h = lib.gs_test_open(name.encode(), 1 << 16, 0)
    if not h:
        sys.stderr.write("cannot open ring %s\n" % name)
        return 1
    lib.gs_test_set_uuid(h, 0, UUID.encode())
    requests = probes.counter("myapp_requests_total", {"route": "/v1"})
    if os.environ.get("GS_CHILD_HISTOGRAM") == "1":
        latency = probes.histogram("myapp_latency_nanoseconds", {"route": "/v1"})
        for v in log_uniform_ns():
            latency.record(v)
    deadline = time.monotonic() + float(os.environ.get("GS_CHILD_SECONDS", "60"))
    t = 0
    first = True
    while time.monotonic() < deadline:
        for _ in range(KERNELS_PER_TICK):
            lib.gs_test_kernel(h, KERNEL.encode(), 0, 1, t, t + KERNEL_NS, 0, 0)
            t += KERNEL_NS + 1000
        lib.gs_test_translate(h)
        requests.add(COUNTER_PER_TICK)
        if first:
            first = False
            print("ready", flush=True)
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
