"""A workload for graphsignal-top's tests: writes probe-like and
CUPTI-like records into a ring of the run (as probe.h and the injection
library would), then idles until killed or `GS_CHILD_SECONDS` pass.

Writes, every 0.1 s: a probe histogram, counter, gauge and profile, and
kernel, graph, memcpy and sync records with symbols the taxonomy knows.
Prints "ready" once the first batch is written.
"""
import os
import struct
import sys
import time

from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer

KERNELS = [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", 40_000),
    ("_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi32ELi4ELb0ELb0EN7cutlass10bfloat16_tE19"
     "Flash_kernel_traitsILi128ELi128ELi32ELi4ELb0ELb0ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEv16Flash_fwd_params",
     25_000),
    ("_ZN4vllm15rms_norm_kernelIN3c104HalfELi8ELi4EEEvPT_PKS3_S6_fii", 3_000),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 12_000),
    ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_", 1_000),
]


def main():
    run = os.environ["GRAPHSIGNAL_RUN_ID"]
    pid = os.getpid()
    probe = Writer("gs-%s-%d-probe" % (run, pid), kind=L.KIND_PROBE)
    cupti = Writer("gs-%s-%d-cupti" % (run, pid), kind=L.KIND_CUPTI)
    hist = probe.name("histogram\x1fmyengine_batch_duration_nanoseconds", L.NAME_INSTRUMENT)
    ctr = probe.name("counter\x1fmyengine_tokens", L.NAME_INSTRUMENT)
    gauge = probe.name("gauge\x1fmyengine_queue_depth", L.NAME_INSTRUMENT)
    prof = probe.name("profile\x1fmyengine_ops_nanoseconds", L.NAME_INSTRUMENT)
    ops = [probe.name(n) for n in ("attention", "mlp", "sampling")]
    dev_uuid = cupti.name("GPU-00000000-1111-2222-3333-444444444444")
    cupti.write(L.REC_DEVICE, device=0, name_id=dev_uuid)
    cupti.write(L.REC_META, sub=L.META_CUDA_GRAPH_TRACE_MODE, value=0)
    kern = [(cupti.name(sym), ns) for sym, ns in KERNELS]
    graph = cupti.name("graph_1")
    seconds = float(os.environ.get("GS_CHILD_SECONDS", "60"))
    deadline = time.monotonic() + seconds
    first = True
    n = 0
    while time.monotonic() < deadline:
        n += 1
        for v in (1_000_000, 1_200_000, 5_000_000):
            probe.write(L.REC_HISTOGRAM, name_id=hist, value=v)
        probe.write(L.REC_COUNTER, name_id=ctr, value=32)
        probe.write(L.REC_GAUGE, name_id=gauge, value=struct.unpack("<Q", struct.pack("<d", float(n % 7)))[0])
        for i, op in enumerate(ops):
            probe.write(L.REC_PROFILE, name_id=prof, extra=op, value=(i + 1) * 100_000)
        for nid, ns in kern:
            cupti.write(L.REC_KERNEL, device=0, name_id=nid, value=ns)
        cupti.write(L.REC_GRAPH, device=0, name_id=graph, value=900_000)
        # memcpy: sub = copy kind (1 host_to_device), name_id low bits = src | dst << 8 memory kinds
        cupti.write(L.REC_MEMCPY, sub=1, device=0, name_id=1 | (3 << 8), value=50_000, extra=1 << 20)
        cupti.write(L.REC_SYNC, sub=3, device=0, value=20_000)
        if first:
            first = False
            print("ready", flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
