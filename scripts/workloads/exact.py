"""A PyTorch workload with known launch counts, for the CUPTI GPU tests.

Prints one JSON line with what it did; the tests compare graphsignal's
counts with it. Only kernels and copies whose counts are known are used:
torch.cuda._sleep launches `spin_kernel` (nothing else in PyTorch does),
tensors are made with torch.empty (no fill kernels), copies are explicit.

  python exact.py --eager 200000 --graph-nodes 64 --replays 1000
"""
import argparse
import ctypes
import json
import os
import sys

try:
    import torch
except ImportError:  # a CPU host without PyTorch: one line, not a traceback
    raise SystemExit("exact.py: needs PyTorch with CUDA (import torch failed)")
if not torch.cuda.is_available():
    raise SystemExit("exact.py: needs PyTorch with CUDA (torch.cuda.is_available() is False)")


def cudart():
    # The runtime PyTorch already loaded (found by soname), for cudaMemset:
    # PyTorch has no op that is guaranteed to be a memset rather than a kernel.
    for name in ("libcudart.so.%s" % torch.version.cuda.split(".")[0], "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    import glob
    import site
    for sp in site.getsitepackages():
        for p in glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libcudart.so.*")):
            return ctypes.CDLL(p)
    raise OSError("libcudart not found")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eager", type=int, default=0, help="eager spin kernels")
    ap.add_argument("--graph-nodes", type=int, default=0)
    ap.add_argument("--replays", type=int, default=0)
    ap.add_argument("--copy-bytes", type=int, default=0, help="bytes per pinned copy")
    ap.add_argument("--copies", type=int, default=0, help="pinned H2D, D2H and D2D copies of each")
    ap.add_argument("--pageable-bytes", type=int, default=0, help="one pageable H2D copy of this size")
    ap.add_argument("--memsets", type=int, default=0)
    ap.add_argument("--memset-bytes", type=int, default=1 << 20)
    ap.add_argument("--syncs", type=int, default=0, help="context, stream, event and stream-wait syncs of each")
    ap.add_argument("--no-final-sync", action="store_true", help="exit with kernels possibly still running")
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()

    torch.cuda.set_device(a.device)
    did = {"pid": os.getpid(), "device": a.device}

    for _ in range(a.eager):
        torch.cuda._sleep(1)
    did["eager_spins"] = a.eager

    if a.graph_nodes and a.replays:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g.capture_begin()
            for _ in range(a.graph_nodes):
                torch.cuda._sleep(1)
            g.capture_end()
        torch.cuda.current_stream().wait_stream(s)
        for _ in range(a.replays):
            g.replay()
        did.update(graph_nodes=a.graph_nodes, replays=a.replays)

    if a.copies and a.copy_bytes:
        n = a.copy_bytes
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        dev2 = torch.empty(n, dtype=torch.uint8, device="cuda")
        for _ in range(a.copies):
            dev.copy_(host, non_blocking=True)
            host.copy_(dev, non_blocking=True)
            dev2.copy_(dev)
        torch.cuda.current_stream().synchronize()
        did.update(h2d_pinned=n * a.copies, d2h_pinned=n * a.copies, d2d=n * a.copies, copies=a.copies)
    if a.pageable_bytes:
        src = torch.empty(a.pageable_bytes, dtype=torch.uint8)
        dst = torch.empty(a.pageable_bytes, dtype=torch.uint8, device="cuda")
        dst.copy_(src)
        did["h2d_pageable"] = a.pageable_bytes

    if a.memsets:
        rt = cudart()
        buf = torch.empty(a.memset_bytes, dtype=torch.uint8, device="cuda")
        for i in range(a.memsets):
            rc = rt.cudaMemset(ctypes.c_void_p(buf.data_ptr()), ctypes.c_int(i & 0xFF), ctypes.c_size_t(a.memset_bytes))
            assert rc == 0, rc
        did.update(memsets=a.memsets, memset_bytes=a.memsets * a.memset_bytes)

    if a.syncs:
        stream = torch.cuda.current_stream()
        other = torch.cuda.Stream()
        for _ in range(a.syncs):
            torch.cuda.synchronize()  # context
            stream.synchronize()  # stream
            ev = torch.cuda.Event()
            ev.record(stream)
            ev.synchronize()  # event
            other.wait_event(ev)  # stream wait event
        did["syncs"] = a.syncs

    if not a.no_final_sync:
        torch.cuda.synchronize()
    sys.stdout.write(json.dumps(did) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
