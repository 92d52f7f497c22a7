"""What graphsignal's own API-callback code costs per call, on the CPU: the
injection library linked against the stand-in libcupti of the tests
(tests/support/cupti/fake_cupti.cpp), which calls the library's callbacks the way
CUPTI does, as fast as it can, with no GPU and no CUPTI in the way. The
per-call benchmark on a GPU (bench_percall.py) measures CUPTI's dispatch
plus this; this isolates the part graphsignal controls.

  off       GRAPHSIGNAL_CUPTI_CALLBACKS=0: no subscriber, the fake's own cost
  hybrid    the default collection
  nowrite   GRAPHSIGNAL_CUPTI_CB_WRITE=0: the callbacks without ring records
  both      syncs/copies/memsets hooked in both API domains (op rt_copy only
            differs: a runtime call and the driver call inside it)

Ops: sync (cuStreamSynchronize), copy (cuMemcpyHtoDAsync of 64 pinned
bytes), memset (cuMemsetD8Async), rt_copy (cudaMemcpyAsync with its driver
call inside). One JSON line per (config, op, repetition), then per op the
median ns per call of each config and its difference to off.

  python scripts/bench_callbacks.py [--reps 5] [--calls 200000]
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cupti_build  # noqa: E402
from benchutil import emit, installed_library, work_dir  # noqa: E402

OPS = {"sync": 0, "copy": 1, "memset": 2, "rt_copy": 3}
CONFIGS = {"off": {"GRAPHSIGNAL_CUPTI_CALLBACKS": "0"}, "hybrid": {}, "nowrite": {"GRAPHSIGNAL_CUPTI_CB_WRITE": "0"},
           "both": {"GRAPHSIGNAL_CUPTI_CB_DOMAINS": "runtime,driver"}}

CHILD = r"""
import ctypes, json, sys
fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[2])
fake.fake_cupti_bench.restype = ctypes.c_uint64
fake.fake_cupti_bench.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
fake.fake_cupti_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
fake.fake_cupti_set_context.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
lib.InitializeInjection()
fake.fake_cupti_set_context(1, 0)
pinned, dev = 0x7f0000000000, 0x7e0000000000
fake.fake_cupti_alloc(7, pinned, 1 << 20)  # cuMemHostAlloc: a pinned range
n = int(sys.argv[4])
out = {}
for op, which in json.loads(sys.argv[3]).items():
    fake.fake_cupti_bench(which, n // 10, pinned, dev)  # warm-up
    out[op] = fake.fake_cupti_bench(which, n, pinned, dev) / n
print(json.dumps(out))
"""


def build(installed=False):
    hs = cupti_build.pick(cupti_build.find_header_sets(), 13, need_lib=False) or \
        cupti_build.pick(cupti_build.find_header_sets(), 12, need_lib=False)
    cxx = cupti_build.compiler()
    if hs is None or not cxx:
        raise SystemExit("no C++ compiler or CUPTI/CUDA headers here")
    d = work_dir("callbacks-" + hashlib.sha1(ROOT.encode()).hexdigest()[:10])
    fake = os.path.join(d, "libcupti.so.%d" % hs.major)
    subprocess.run(cxx + ["-std=c++17", "-O2", "-fPIC", "-shared", "-I", hs.cupti_include, "-I", hs.cuda_include,
                          "-I", cupti_build.SRC, "-idirafter", cupti_build.COMPAT,
                          os.path.join(ROOT, "tests", "support", "cupti", "fake_cupti.cpp"),
                          "-Wl,-soname,libcupti.so.%d" % hs.major, "-pthread", "-o", fake], check=True)
    if installed:  # its NEEDED libcupti.so.N is the stand-in, loaded first with RTLD_GLOBAL (CHILD)
        return fake, installed_library(hs.major)
    lib = cupti_build.build_variant(hs._replace(libcupti=fake), d, log=lambda m: sys.stderr.write(m + "\n"), force=True)
    if not lib:
        raise SystemExit("the injection library did not build")
    return fake, lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--installed", action="store_true",
                    help="use the injection library pip install built (graphsignal/lib/) instead of building one "
                         "from csrc/ here: seconds instead of a minute, for the smoke test")
    a = ap.parse_args()
    fake, lib = build(a.installed)
    res = {}
    names = list(CONFIGS)
    for rep in range(a.reps):
        for config in names[rep % len(names):] + names[:rep % len(names)]:
            run_id = "cbbench%s" % uuid.uuid4().hex[:8]
            env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
            env.update(CONFIGS[config], GRAPHSIGNAL_RUN_ID=run_id, GRAPHSIGNAL_CUPTI_DRIVER_LIB=fake,
                       GRAPHSIGNAL_LOG_LEVEL="error")
            p = subprocess.run([sys.executable, "-c", CHILD, fake, lib, json.dumps(OPS), str(a.calls)], env=env,
                               capture_output=True, text=True, timeout=300)
            for f in os.listdir("/dev/shm"):
                if f.startswith("gs-%s-" % run_id):
                    os.unlink(os.path.join("/dev/shm", f))
            if p.returncode != 0:
                raise SystemExit("%s failed:\n%s" % (config, p.stderr[-2000:]))
            for op, ns in json.loads(p.stdout.strip().splitlines()[-1]).items():
                res.setdefault((config, op), []).append(ns)
                emit(bench="callbacks", event="run", rep=rep, config=config, op=op, ns_per_call=round(ns, 1))
    for op in OPS:
        off = statistics.median(res[("off", op)])
        line = {"bench": "callbacks", "event": "summary", "op": op, "reps": a.reps, "off_ns": round(off, 1)}
        for config in names[1:]:
            med = statistics.median(res[(config, op)])
            line[config + "_ns"] = round(med, 1)
            line[config + "_over_off_ns"] = round(med - off, 1)
        emit(**line)


if __name__ == "__main__":
    main()
