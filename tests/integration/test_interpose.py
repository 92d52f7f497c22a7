"""The CUDA driver interposer (csrc/interpose, --cuda-trace light's
counting) against a stand-in libcuda (tests/support/interpose/fake_libcuda.c):
real preloading, real dlsym and cuGetProcAddress lookups, a threaded C
program reaching the driver as the CUDA runtime does and as a program
linked to libcuda does, and the interposer's own report of what it
counted."""
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from tests.support import cbuild

ROOT = cbuild.ROOT
SUPPORT = os.path.join(ROOT, "tests", "support", "interpose")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
                                reason="the interposer's dlsym trampoline is x86-64 Linux only")


@pytest.fixture(scope="module")
def built():
    """(interposer, folder holding the stand-in libcuda.so.1, programs)."""
    d = cbuild.cache_dir("interpose")
    os.makedirs(d, exist_ok=True)
    lib = cbuild.cupti_build().build_interpose_lib(d, log=lambda m: None)
    assert lib, "the interposer did not build"
    fake_dir = os.path.join(d, "fake")
    os.makedirs(fake_dir, exist_ok=True)
    warn = ["-O2", "-Wall", "-Wextra", "-Werror"]
    # -Bsymbolic: the stand-in's own references bind inside it, as the real driver's do
    # every build renamed into place (cbuild.build_to): test_cuda_trace_light builds the same in another pytest worker
    cbuild.build_to(os.path.join(fake_dir, "libcuda.so.1"), ["gcc", "-shared", "-fPIC"] + warn + [
        "-Wl,-Bsymbolic", os.path.join(SUPPORT, "fake_libcuda.c")])
    old_dir = os.path.join(d, "fake-old")  # a driver that lacks cuCtxGetDevice
    os.makedirs(old_dir, exist_ok=True)
    cbuild.build_to(os.path.join(old_dir, "libcuda.so.1"), ["gcc", "-shared", "-fPIC", "-DFAKE_OLD_DRIVER"] + warn + [
        "-Wl,-Bsymbolic", os.path.join(SUPPORT, "fake_libcuda.c")])
    link = os.path.join(fake_dir, "libcuda.so")
    if not os.path.lexists(link):
        try:
            os.symlink("libcuda.so.1", link)
        except FileExistsError:  # made by another worker meanwhile
            pass
    progs = {
        "runtime": [os.path.join(SUPPORT, "cuda_user.c"), "-ldl", "-lpthread"],
        "linked": ["-DLINKED", os.path.join(SUPPORT, "cuda_user.c"), "-L" + fake_dir, "-lcuda", "-ldl", "-lpthread"],
    }
    out = {}
    for name, args in progs.items():
        out[name] = os.path.join(d, "cuda_user_" + name)
        cbuild.build_to(out[name], ["gcc"] + warn + args)
    out["hostmem"] = os.path.join(d, "hostmem_user")
    cbuild.build_to(out["hostmem"], ["gcc"] + warn + ["-I", os.path.join(ROOT, "csrc", "interpose"),
                                                      os.path.join(SUPPORT, "hostmem_user.c"), "-ldl", "-lpthread"])
    out["fork"] = os.path.join(d, "fork_user")
    cbuild.build_to(out["fork"], ["gcc"] + warn + [os.path.join(SUPPORT, "fork_user.c"), "-ldl"])
    out["next"] = os.path.join(d, "libnext_getpid.so")
    cbuild.build_to(out["next"], ["gcc", "-shared", "-fPIC"] + warn + [os.path.join(SUPPORT, "next_getpid.c"), "-ldl"])
    return lib, fake_dir, out


def run(built, tmp_path, prog="runtime", args=("8", "1000", "0"), env=None, preload=None):
    lib, fake_dir, progs = built
    prefix = str(tmp_path / "report")
    e = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GRAPHSIGNAL_INTERPOSE_REPORT")
         and not k.startswith("GRAPHSIGNAL_CUDA_SAMPLE") and k != "GRAPHSIGNAL_RUN_ID"}
    e.update(LD_LIBRARY_PATH=fake_dir, LD_PRELOAD=preload or lib, GRAPHSIGNAL_INTERPOSE_REPORT=prefix,
             GRAPHSIGNAL_CUDA_SAMPLE_RATE="0")
    e.update(env or {})
    p = subprocess.run([progs[prog]] + list(args), env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    did = json.loads(p.stdout.strip().splitlines()[-1])
    reports = glob.glob(prefix + ".*.json")
    assert len(reports) == 1, reports
    with open(reports[0]) as f:
        return did, json.load(f), p


def fnv_graph_name(nodes):
    """graph_<FNV-1a of each node's type byte and kernel name + NUL>_n<nodes>:
    the CUPTI library's GraphRegistry naming, written again here."""
    h = 0xcbf29ce484222325
    for node_type, name in nodes:
        for b in bytes([node_type]) + name.encode() + b"\0":
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "graph_%016x_n%d" % (h, len(nodes))


def assert_counts(did, rep, internal=False):
    kernels = {k["name"]: k["count"] for k in rep["kernels"]}
    assert kernels == did["kernels"]
    expected_graph = fnv_graph_name([(0, "_Z6kernelAv"), (0, "_Z6kernelBPf"), (0, "gemm_kernel"), (0, "_Z6kernelAv")])
    assert [(g["name"], g["count"]) for g in rep["graphs"]] == [(expected_graph, did["graph_launches"])]
    assert rep["syncs"]["stream"][0] == did["stream_syncs"]
    assert rep["syncs"]["context"][0] == did["context_syncs"]
    assert rep["syncs"]["copy"][0] == did["htod"][0]  # the synchronous copies' implicit waits
    assert rep["copies"] == {"1": did["htod"], "2": did["dtoh"]}
    if not internal:  # there cuMemAllocHost goes out uncounted: its buffer's copies are "unknown"
        assert rep["copies_host_memory"] == {"1": {"pageable": did["htod_pageable"], "pinned": did["htod_pinned"]},
                                             "2": {"pinned": did["dtoh"]}}
    assert rep["memsets"] == did["memsets"]
    assert rep["captured"] == did["captured"]
    assert rep["graph_captures"] == 1 and rep["graphs_unnamed"] == 0
    assert rep["kernels_overflow"] == 0 and rep["graphs_overflow"] == 0


@pytest.mark.parametrize("tsc", ["1", "0"], ids=["tsc", "clock_gettime"])
def test_sync_wall_time_is_the_calls_wait(built, tmp_path, tsc):
    """Each stream sync of the stand-in sleeps 3 ms: the report's sync time is at least that per call and at
    most the threads' wall time, whether the hot path reads the TSC (scaled against CLOCK_MONOTONIC) or the clock."""
    env = {"FAKE_CUDA_SYNC_US": "3000"}
    if tsc == "0":
        env["GRAPHSIGNAL_INTERPOSE_NO_TSC"] = "1"
    t0 = time.monotonic()
    did, rep, _ = run(built, tmp_path, args=("2", "60", "0"), env=env)
    wall_ns = (time.monotonic() - t0) * 1e9
    calls, ns = rep["syncs"]["stream"]
    assert calls == did["stream_syncs"] > 0
    assert calls * 3_000_000 * 0.999 <= ns <= 2 * wall_ns, (calls, ns, wall_ns)


@pytest.mark.parametrize("flags", ["0", "2"], ids=["legacy-stream", "per-thread-stream"])
def test_counts_exact_through_cuGetProcAddress_under_8_threads(built, tmp_path, flags):
    did, rep, _ = run(built, tmp_path, args=("8", "3001", flags))
    assert_counts(did, rep)
    rows = {r["name"]: r["calls"] for r in rep["rows"]}
    launch_row = "cuLaunchKernel_ptsz" if flags == "2" else "cuLaunchKernel"
    # every launch reached the wrapper of the flavour asked for: 4 captured, 1 failed, the rest counted
    assert rows[launch_row] == sum(did["kernels"].values()) + 4 + 1
    assert rep["bound_by_export"] > 0 and rep["bound_by_rule"] == 0 and rep["unbound"] == 0


def test_one_device_counts_on_ordinal_0_without_asking_the_driver_per_call(built, tmp_path):
    """A process that sees one device: every sync, copy and memset counts on
    ordinal 0, and the interposer never asks for the thread's context (a
    cuCtxGetCurrent cost more than the rest of a sync's counting)."""
    did, rep, _ = run(built, tmp_path, args=("8", "3001", "0"))
    assert_counts(did, rep)
    assert rep["devices_seen"] == 1
    assert rep["per_device"] == did["per_device"]
    assert did["ctx_queries"] == 0, did["ctx_queries"]


@pytest.mark.parametrize("prog", ["runtime", "linked"])
def test_several_devices_each_call_counted_on_its_threads_current_device(built, tmp_path, prog):
    """Three devices, 8 threads each on one device's context, each stream
    sync also made once on the next device's: every count lands on the
    device current when the call was made, exactly, through
    cuGetProcAddress and through the PLT alike; the thread's context is
    asked on every counted call (nothing cheaper is exact when a thread can
    switch contexts at any time)."""
    did, rep, _ = run(built, tmp_path, prog=prog, args=("8", "1001", "0", "0", "3"), env={"FAKE_CUDA_DEVICES": "3"})
    assert_counts(did, rep)
    assert rep["devices_seen"] == 2
    assert rep["per_device"] == did["per_device"]
    counted = sum(sum(d.values()) for d in did["per_device"].values())
    assert did["ctx_queries"] >= counted


def test_a_driver_that_cannot_count_its_devices_asks_per_call(built, tmp_path):
    """A driver without cuDeviceGetCount (and without cuCtxGetDevice): the
    device count stays unknown, and every count goes to device 0."""
    _, fake_dir, _ = built
    did, rep, _ = run(built, tmp_path, args=("4", "1001", "0"),
                      env={"LD_LIBRARY_PATH": os.path.join(os.path.dirname(fake_dir), "fake-old")})
    assert_counts(did, rep)
    assert rep["devices_seen"] == 0 and list(rep["per_device"]) == ["0"]


def test_internal_entry_points_bound_by_name_and_flavour(built, tmp_path):
    """A driver may answer cuGetProcAddress with functions that are not its
    exports: they are counted all the same."""
    did, rep, _ = run(built, tmp_path, env={"FAKE_CUDA_INTERNAL": "1"})
    assert_counts(did, rep, internal=True)
    assert rep["bound_by_rule"] == 2  # cuLaunchKernel, cuStreamSynchronize


def test_program_linked_to_libcuda_counted_through_its_plt(built, tmp_path):
    # the program also checks that dlsym(RTLD_NEXT, ...) stays relative to its caller (exit 4 otherwise)
    did, rep, _ = run(built, tmp_path, prog="linked")
    assert_counts(did, rep)
    assert rep["bound_by_export"] == 0  # no cuGetProcAddress involved


def test_another_interposer_using_rtld_next_still_reaches_libc(built, tmp_path):
    """Preloaded after ours, a library wrapping getpid through
    dlsym(RTLD_NEXT, "getpid") must get libc's: a lookup made relative to
    our library would hand it its own getpid, and it would recurse."""
    lib, _, progs = built
    did, rep, _ = run(built, tmp_path, preload="%s %s" % (lib, progs["next"]))
    assert_counts(did, rep)


def test_unknown_symbols_and_failed_calls_untouched(built, tmp_path):
    # cuda_user exits 5 when cuMemAlloc through cuGetProcAddress differs from
    # the driver's export, 6 when a missing symbol is found or leaves no
    # dlerror, 7 when a failed launch returns anything but the driver's error
    did, rep, _ = run(built, tmp_path, args=("1", "10", "0"))
    assert_counts(did, rep)


# -- host memory: a copy's host side classified once per allocation (csrc/interpose/hostmem.h) --------
@pytest.fixture(scope="module")
def hostmem_split(built, tmp_path_factory):
    """8 threads copying from every kind of host memory while a ninth page-locks, registers and frees buffers
    of its own; then failed calls, an unregister, a registry filled past its bound and emptied (hostmem_user.c)."""
    return run(built, tmp_path_factory.mktemp("hostmem"), prog="hostmem", args=("split", "8", "2000"))


def test_copies_counted_per_host_memory_exactly_while_another_thread_pins_and_frees(hostmem_split):
    did, rep, _ = hostmem_split
    # every (kind, host memory) count and byte total as the program tallied them from its own memory: pinned
    # (cuMemAllocHost, the old 32-bit one, cuMemHostAlloc, cuMemHostRegister, a host-located cuMemMap), managed,
    # pageable (malloc, the stack, memory unregistered or unmapped, a device mapping, what a failed call wrote)
    assert rep["copies_host_memory"] == did["copies"]
    assert did["churn_rounds"] >= 200 and rep["hostmem"]["gave_up"] == 0
    # the totals per kind are the same copies
    assert rep["copies"] == {k: [sum(v[0] for v in m.values()), sum(v[1] for v in m.values())]
                             for k, m in did["copies"].items()}
    rows = {r["name"]: r["calls"] for r in rep["rows"]}
    assert rows["cuMemAllocHost"] == 1 and rows["cuMemHostRegister"] == 1  # the old signatures, bound by export
    assert rows["cuMemHostAlloc"] == 2  # found by dlsym; its failed call forwarded too
    assert rep["unbound"] == 0 and rep["hostmem"]["unsure"] == 0  # a device memory pool leaves it sure


def test_a_full_registry_says_unknown_never_pageable_until_what_it_missed_is_freed(hostmem_split):
    did, rep, proc = hostmem_split
    # two page-locked ranges past the bound: a copy from one of them, and from malloc memory while they live,
    # is unknown; freed, the registry vouches again (hostmem_user.c's last block)
    assert rep["copies_host_memory"]["1"]["unknown"] == did["copies"]["1"]["unknown"] == [4, 32]
    assert rep["hostmem"] == {"ranges": 0, "unrecorded": 0, "unsure": 0, "overflows": 2, "gave_up": 0}
    lines = [ln for ln in proc.stderr.splitlines() if "graphsignal-interpose" in ln]
    assert len(lines) == 1 and "page-locked host ranges" in lines[0] and "unknown" in lines[0], lines


def test_page_locking_handed_out_uncounted_makes_unseen_memory_unknown(built, tmp_path):
    """cuMemAllocHost answered with an internal entry point it cannot bind (two signatures share the name), and
    a pool created on the host: memory page-locked where the interposer cannot see is never called pageable."""
    did, rep, proc = run(built, tmp_path, prog="hostmem", args=("unsure",), env={"FAKE_CUDA_INTERNAL": "1"})
    assert rep["copies_host_memory"] == did["copies"] == {"1": {"pinned": [1, 8], "unknown": [2, 16]}}
    assert rep["hostmem"]["unsure"] == 3 and rep["unbound"] == 2
    lines = [ln for ln in proc.stderr.splitlines() if "graphsignal-interpose" in ln]
    assert len(lines) == 2 and "uncounted" in lines[0] and "pool" in lines[1], lines


@pytest.mark.parametrize("argv", [["/bin/echo", "hello", "world"], [sys.executable, "-c", "print('hello world')"]])
def test_process_without_cuda_runs_as_if_alone(built, tmp_path, argv):
    """Preloaded into every process a workload starts: one that never
    reaches the driver prints nothing more, writes no report, exits the same."""
    lib = built[0]
    env = dict(os.environ, GRAPHSIGNAL_INTERPOSE_REPORT=str(tmp_path / "report"))
    bare = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    pre = subprocess.run(argv, env=dict(env, LD_PRELOAD=lib), capture_output=True, timeout=60)
    assert (pre.returncode, pre.stdout, pre.stderr) == (bare.returncode, bare.stdout, bare.stderr)
    assert not glob.glob(str(tmp_path / "report*"))


def test_library_needs_only_libc(built):
    lib = built[0]
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = sorted(line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line)
    assert set(needed) <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, needed
    syms = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
    versions = {w.strip("()") for line in syms.splitlines() for w in line.split() if w.startswith("(GLIBC_")}
    # glibc 2.17 (manylinux2014) has every one
    assert versions and max(tuple(int(x) for x in v[len("GLIBC_"):].split(".")) for v in versions) <= (2, 17), \
        versions


def test_abi_declarations_match_cuda_h(tmp_path):
    """The interposer declares the driver types it reads (it builds without
    a toolkit); where cuda.h is installed, every offset must agree."""
    sys.path.insert(0, os.path.join(ROOT, "csrc"))
    try:
        import cupti_build
    finally:
        sys.path.pop(0)
    sets = cupti_build.find_header_sets()
    headers = [hs.cuda_include for hs in sets if os.path.exists(os.path.join(hs.cuda_include, "cuda.h"))]
    if not headers:
        pytest.skip("no cuda.h on this machine")
    src = tmp_path / "abi_check.c"
    src.write_text("""
#include <stddef.h>
#include <cuda.h>
#include "cuda_abi.h"
#define SAME(a, b) typedef char check_##b[(a) ? 1 : -1]
SAME(offsetof(CUlaunchConfig, hStream) == offsetof(gs_CUlaunchConfig, hStream), stream);
SAME(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, func) == offsetof(gs_KernelNodeParams, func), func);
SAME(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern) == offsetof(gs_KernelNodeParams, kern), kern);
SAME(sizeof(CUDA_KERNEL_NODE_PARAMS_v2) == sizeof(gs_KernelNodeParams), node_size);
SAME(offsetof(CUDA_MEMCPY2D, srcMemoryType) == offsetof(gs_Memcpy2D, srcMemoryType), src_type);
SAME(offsetof(CUDA_MEMCPY2D, dstMemoryType) == offsetof(gs_Memcpy2D, dstMemoryType), dst_type);
SAME(offsetof(CUDA_MEMCPY2D, WidthInBytes) == offsetof(gs_Memcpy2D, WidthInBytes), width);
SAME(offsetof(CUDA_MEMCPY2D, Height) == offsetof(gs_Memcpy2D, Height), height);
SAME(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM == GS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, pt);
SAME(CU_GRAPH_NODE_TYPE_KERNEL == GS_CU_GRAPH_NODE_TYPE_KERNEL && CU_GRAPH_NODE_TYPE_GRAPH == GS_CU_GRAPH_NODE_TYPE_GRAPH,
     node_types);
SAME(CU_MEMORYTYPE_HOST == GS_CU_MEMORYTYPE_HOST && CU_MEMORYTYPE_DEVICE == GS_CU_MEMORYTYPE_DEVICE &&
     CU_MEMORYTYPE_ARRAY == GS_CU_MEMORYTYPE_ARRAY && CU_MEMORYTYPE_UNIFIED == GS_CU_MEMORYTYPE_UNIFIED, mem_types);
SAME(offsetof(CUmemAllocationProp, location) == offsetof(gs_MemAllocationProp, location) &&
     offsetof(CUmemAllocationProp, location.type) == offsetof(gs_MemAllocationProp, location.type) &&
     sizeof(CUmemAllocationProp) == sizeof(gs_MemAllocationProp), alloc_prop);
SAME(offsetof(CUmemPoolProps, allocType) == offsetof(gs_MemPoolPropsHead, allocType) &&
     offsetof(CUmemPoolProps, location.type) == offsetof(gs_MemPoolPropsHead, location.type), pool_props);
SAME(CU_MEM_LOCATION_TYPE_DEVICE == GS_CU_MEM_LOCATION_TYPE_DEVICE &&
     CU_MEM_ALLOCATION_TYPE_PINNED == GS_CU_MEM_ALLOCATION_TYPE_PINNED, mem_location);
#if CUDA_VERSION >= 12020 /* host locations came with CUDA 12.2 */
SAME(CU_MEM_LOCATION_TYPE_HOST == GS_CU_MEM_LOCATION_TYPE_HOST &&
     CU_MEM_LOCATION_TYPE_HOST_NUMA == GS_CU_MEM_LOCATION_TYPE_HOST_NUMA &&
     CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT == GS_CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, host_locations);
#endif
int main(void) { return 0; }
""")
    for inc in headers:
        subprocess.run(["gcc", "-Wall", "-Werror", "-I", inc, "-I", os.path.join(ROOT, "csrc", "interpose"),
                        "-c", str(src), "-o", str(tmp_path / "abi_check.o")], check=True)


def test_graph_time_sampled_by_event_pairs(built, tmp_path):
    """GRAPHSIGNAL_CUDA_SAMPLE=4: one graph launch in four per graph gets an
    event pair, harvested by cuEventQuery on the interposer's own thread;
    every count stays exact."""
    did, rep, _ = run(built, tmp_path, args=("4", "4000", "0", "200"), env={"GRAPHSIGNAL_CUDA_SAMPLE": "4"})
    assert_counts(did, rep)
    g = rep["graphs"][0]
    s = rep["samples"]
    assert s["failed"] == 0
    # each sampled launch was taken or skipped (every pair in flight); the last ones may be in flight at exit
    assert s["taken"] + s["skipped"] == (g["count"] + 3) // 4
    assert 0 < g["sampled_n"] <= s["taken"]
    assert g["sampled_ns"] > 0


def test_no_sampling_without_the_variable(built, tmp_path):
    did, rep, _ = run(built, tmp_path)
    assert rep["samples"] == {"taken": 0, "skipped": 0, "failed": 0}
    assert rep["graphs"][0]["sampled_n"] == 0


def test_the_report_is_never_written_through_a_planted_symlink(built, tmp_path):
    """GRAPHSIGNAL_INTERPOSE_REPORT's temporary name is predictable: one that exists
    already (another user's file, a symlink) is not written through."""
    lib, fake_dir, progs = built
    victim = tmp_path / "victim"
    victim.write_text("keep")
    prefix = tmp_path / "report"
    e = dict(os.environ, LD_LIBRARY_PATH=fake_dir, LD_PRELOAD=lib, GRAPHSIGNAL_INTERPOSE_REPORT=str(prefix))
    # 2,000 graph launches 200 us apart: the program is still running when the name is planted
    p = subprocess.Popen([progs["runtime"], "1", "20000", "0", "200"], env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    os.symlink(str(victim), "%s.%d.json.tmp" % (prefix, p.pid))
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert victim.read_text() == "keep"
    assert not os.path.exists("%s.%d.json" % (prefix, p.pid))
