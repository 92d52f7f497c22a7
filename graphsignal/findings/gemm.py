"""GEMMs in fp32 on CUDA cores, where tensor cores (TF32, BF16, FP16, FP8)
would run the same matrix products several times faster.

Read from the kernels' names: cuBLAS's and CUTLASS's fp32 SIMT kernels
say so (sgemm, f32f32_f32f32 with ffma, simt); TF32 and half-precision
kernels say tf32, h16/bf16, tensorop, hmma or a half type. Where the GPU's
own activity counters are present (NVML GPM, Hopper and newer),
gpu_tensor_active_percent is added to the evidence.
"""
import re
from typing import List

from graphsignal.findings.facts import KERNELS, Facts, evidence, finding
from graphsignal.signals_model import Finding

FP32 = re.compile(r"sgemm|f32f32_f32f32|simt_s|gemm_f32|_ffma_", re.I)
TENSOR = re.compile(r"tf32|tensorop|hmma|bf16|h16|f16f16|e4m3|i8816|__half|s1688|s16816", re.I)
MIN_SHARE = 0.2  # of kernel time
MIN_CALLS = 10


def fp32_gemm(f: Facts) -> List[Finding]:
    frames = f.kernel_frames()
    total = sum(fr[1] for fr in frames)
    if total <= 0:
        return []
    hits = [fr for fr in frames if fr[3] in ("gemm", "") and FP32.search(fr[0] + " " + fr[4])
            and not TENSOR.search(fr[0] + " " + fr[4])]
    ns = sum(fr[1] for fr in hits)
    calls = sum(fr[2] for fr in hits)
    share = ns / total
    if share < MIN_SHARE or calls < MIN_CALLS:
        return []
    top = max(hits, key=lambda fr: fr[1])
    ev = [evidence(KERNELS, "share_of_kernel_time", share, ">=", MIN_SHARE, "fraction", {"frame": top[0]}),
          evidence(KERNELS, "calls", calls, ">=", MIN_CALLS, "", {"frame": top[0]})]
    _, tmean, _ = f.gauge("gpu_tensor_active_percent")
    if tmean is not None:
        ev.append(evidence("gpu_tensor_active_percent", "mean", tmean, "", None, "percent"))
    gpu_share = ns / f.gpu_time() if f.gpu_time() > 0 else share
    return [finding(
        f, "fp32_gemm", "gemm", "%.0f%% of kernel time is fp32 GEMMs on CUDA cores (%s): tensor cores unused"
        % (100 * share, top[4][:60]), ev, "gpu_time", gpu_share * 0.75,
        "three quarters of the fp32 GEMMs' GPU time: TF32 tensor cores run them 4x or more faster, BF16 more",
        "high",
        [("pytorch", "torch.set_float32_matmul_precision(\"high\") (TF32), or run the model in bf16/fp16 "
                     "(model.to(torch.bfloat16), torch.autocast(\"cuda\", dtype=torch.bfloat16))"),
         ("cuda", "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH) or cublasGemmEx with "
                  "CUBLAS_COMPUTE_32F_FAST_TF32 / half-precision inputs")],
        [(KERNELS, "down", {"frame": top[0]}), ("gpu_tensor_active_percent", "up")])]


RULES = (fp32_gemm,)
