"""Kernel names (graphsignal.kernel_names): demangling through libstdc++
with c++filt and the raw symbol as fallbacks, display names that keep the
template argument carrying the meaning, and the taxonomy's category, on
real kernel symbols (PyTorch, vLLM, FlashAttention, cuBLAS/CUTLASS, NCCL,
Triton, CUB/Thrust, FlashInfer, ggml-cuda)."""
import os
import re
import shutil
import subprocess

import pytest

from graphsignal.naming import kernels as kn
from graphsignal.naming.taxonomy import CATEGORIES, category

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
CORPUS = os.path.join(HERE, "data", "kernel_symbols.txt")

# symbol -> (category, display name, demangled as c++filt prints it, or None for C names)
KERNELS = {
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_": (
        "memory", "vectorized_elementwise_kernel<FillFunctor>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"),
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_23direct_copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1"
    "_clEvENKUlvE8_clEvEUlfE_St5arrayIPcLm2EEEEviT0_T1_": (
        "memory", "vectorized_elementwise_kernel<direct_copy_kernel_cuda>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>"
        " >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
        "{lambda()#10}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"),
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZNS0_11silu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEvEUlfE_EEviT0_": (
        "activation", "vectorized_elementwise_kernel<silu_kernel>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
        "::operator()() const::{lambda(float)#1}>(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
        "operator()() const::{lambda(float)#1})"),
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIfffffEEjfLi4EEEEEvT1_": (
        "reduction", "reduce_kernel<MeanOps>",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float, float>, unsigned int, float, 4>)"),
    "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardIfEEvPT_PKS3_i": (
        "normalization", "cunn_SoftMaxForward<float>",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<float>(float*, float const*, int)"),
    "_ZN2at6native28vectorized_layer_norm_kernelIN3c108BFloat16EfEEviT0_PKT_S7_S7_PS4_S8_PS5_": (
        "normalization", "vectorized_layer_norm_kernel<BFloat16>",
        "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, "
        "c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"),
    "_ZN2at6native21indexSelectLargeIndexIflEEvPT_T0_": (
        "embedding", "indexSelectLargeIndex<float>", "void at::native::indexSelectLargeIndex<float, long>(float*, long)"),
    "_ZN4vllm15rms_norm_kernelIN3c104HalfELi8ELi4EEEvPT_PKS3_S6_fii": (
        "normalization", "rms_norm_kernel<Half>",
        "void vllm::rms_norm_kernel<c10::Half, 8, 4>(c10::Half*, c10::Half const*, c10::Half const*, float, int, int)"),
    "_ZN4vllm18act_and_mul_kernelIN3c108BFloat16EXadL_ZNS_11silu_kernelIS2_EET_RKS4_EELb1EEEvPS4_PS5_i": (
        "activation", "act_and_mul_kernel<silu_kernel>",
        "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>(c10::BFloat16 "
        "const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"),
    "_ZN4vllm30reshape_and_cache_flash_kernelIN3c108BFloat16EhLi0EEEvPKT_PT0_PKl": (
        "memory", "reshape_and_cache_flash_kernel<BFloat16>",
        "void vllm::reshape_and_cache_flash_kernel<c10::BFloat16, unsigned char, 0>(c10::BFloat16 const*, "
        "unsigned char*, long const*)"),
    "_ZN4vllm26cross_device_reduce_1stageIN3c108BFloat16ELi8EEEvPT_i": (
        "communication", "cross_device_reduce_1stage<BFloat16>",
        "void vllm::cross_device_reduce_1stage<c10::BFloat16, 8>(c10::BFloat16*, int)"),
    "_ZN4vllm23rotary_embedding_kernelIN3c108BFloat16ES2_Lb1EEEvPKlPT_i": (
        "embedding", "rotary_embedding_kernel<BFloat16>",
        "void vllm::rotary_embedding_kernel<c10::BFloat16, c10::BFloat16, true>(long const*, c10::BFloat16*, int)"),
    "_ZN4vllm23scaled_fp8_quant_kernelIN3c108BFloat16EEEvPT_PKfi": (
        "quantization", "scaled_fp8_quant_kernel<BFloat16>",
        "void vllm::scaled_fp8_quant_kernel<c10::BFloat16>(c10::BFloat16*, float const*, int)"),
    "_ZN4vllm3moe17topkGatingSoftmaxIfEEvPKT_i": (
        "sort/scan", "topkGatingSoftmax<float>", "void vllm::moe::topkGatingSoftmax<float>(float const*, int)"),
    "_ZN3cub29DeviceRadixSortOnesweepKernelINS_6PolicyELb1EiljEEvPT1_PT2_": (
        "sort/scan", "DeviceRadixSortOnesweepKernel<int>",
        "void cub::DeviceRadixSortOnesweepKernel<cub::Policy, true, int, long, unsigned int>(int*, long*)"),
    "_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi128ELi32ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_"
    "kernel_traitsILi128ELi128ELi32ELi4ELb0ELb0ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEv16Flash_fwd_params": (
        "attention", "flash_fwd_kernel<Flash_fwd_kernel_traits>",
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, false, false, cutlass::bfloat16_t, "
        "Flash_kernel_traits<128, 128, 32, 4, false, false, cutlass::bfloat16_t> >, false, true, false, false, true, "
        "true, false, false>(Flash_fwd_params)"),
    "_ZN7cutlass7Kernel2I6MyGemmEEvNT_6ParamsE": (
        "gemm", "Kernel2<MyGemm>", "void cutlass::Kernel2<MyGemm>(MyGemm::Params)"),
    "_ZN10flashinfer4norm13RMSNormKernelILj8EfEEvPT0_S3_S3_jjjf": (
        "normalization", "RMSNormKernel<float>",
        "void flashinfer::norm::RMSNormKernel<8u, float>(float*, float*, float*, unsigned int, unsigned int, "
        "unsigned int, float)"),
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x"
    "_cublas": ("gemm", None, None),
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn": ("gemm", None, None),
    "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT": ("gemm", None, None),
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL": ("communication", None, None),
    "ncclDevKernel_AllGather_RING_LL": ("communication", None, None),
    "triton_poi_fused_add_0": ("elementwise", None, None),
    "triton_poi_fused_mul_silu_1": ("activation", None, None),
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0": ("normalization", None, None),
    "triton_per_fused__softmax_0": ("normalization", None, None),
    "triton_red_fused_sum_0": ("reduction", None, None),
    "triton_tem_fused_mm_0": ("gemm", None, None),
    "fused_moe_kernel": ("gemm", None, None),
    "BatchPrefillWithPagedKVCacheKernel": ("attention", None, None),
    "paged_attention_v2_kernel": ("attention", None, None),
    "gelu_new_kernel": ("activation", None, None),
    "my_custom_thing": ("other", None, None),
}


# more real symbols: what a person should read, and the category
MORE = {
    # cuBLAS (libcublasLt.so.13): fp32 on CUDA cores, the word a person needs
    "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE": (
        "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>", "gemm"),
    "_ZN7cutlass7Kernel2I57cutlass_80_tensorop_s16816gemm_bf16_128x64_64x3_nn_align8EEvNT_6ParamsE": (
        "Kernel2<cutlass_80_tensorop_s16816gemm_bf16_128x64_64x3_nn_align8>", "gemm"),
    # vLLM's CUTLASS 3 FP8 GEMM: the nested GemmKernel names less than its owner
    "_ZN7cutlass13device_kernelIN4vllm24cutlass_3x_gemm_sm90_fp8INS_12float_e4m3_tENS_10bfloat16_tENS1_3c3x14Scaled"
    "EpilogueEN4cute5tupleIJNS7_1CILi64EEENS9_ILi128EEESB_EEENS8_IJNS9_ILi2EEENS9_ILi1EEESE_EEENS_4gemm44KernelTma"
    "WarpSpecializedPingpongFP8FastAccumENS_8epilogue18TmaWarpSpecializedELb0EE10GemmKernelEEEvNT_6ParamsE": (
        "device_kernel<cutlass_3x_gemm_sm90_fp8>", "gemm"),
    # PyTorch: launchers and functor wrappers give way to the operation
    "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel_cudaERNS_18"
    "TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c104HalfEE_EEvS4_RKT_EUliE_EEviT1_": (
        "elementwise_kernel<direct_copy_kernel_cuda>", "memory"),
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEE"
    "St5arrayIPcLm2EEEEviT0_T1_": ("vectorized_elementwise_kernel<MulFunctor>", "elementwise"),
    "_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14Tensor"
    "IteratorEEUlffE_EEjfLi4ELi4EEEEEvT1_": ("reduce_kernel<sum_functor>", "reduction"),
    "_ZN2at6native51_GLOBAL__N__49690f20_18_fused_adam_impl_cu_ffd69f6925multi_tensor_apply_kernelINS1_32FusedOptimizer"
    "TensorListMetadataILi4EEENS1_20FusedAdamMathFunctorIdLi4EEEJdddddbbPfS7_EEEvT_T0_DpT1_": (
        "multi_tensor_apply_kernel<FusedAdamMathFunctor>", "elementwise"),
    "_ZN2at6native43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6319cunn_SoftMaxForwardILi8EN3c104HalfEfS4_NS1_22SoftMax"
    "ForwardEpilogueEEEvPT2_PKT0_i": ("cunn_SoftMaxForward<SoftMaxForwardEpilogue>", "normalization"),
    # ggml-cuda (nvcc build of llama.cpp): the quantization type, the op passed by address
    "_Z13mul_mat_vec_qIL9ggml_type12ELi1ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jjjS7_"
    "jjjj": ("mul_mat_vec_q<q4_K>", "gemm"),
    "_Z11k_bin_bcastIXadL_ZL6op_addffEEfffJPKfEEvPKT0_PKT1_PT2_jjj5uint3SA_SA_SA_SA_jjjjjjjjjjjDpT3_": (
        "k_bin_bcast<op_add>", "elementwise"),
    # CUB (nvcc 13.0): tuning policies and versioned namespaces say nothing
    "_ZN3cub17CUB_300001_SM_9006detail10radix_sort29DeviceRadixSortOnesweepKernelINS1_5radix10policy_hubIfNS0_8NullTypeE"
    "yE10Policy1000ELNS0_9SortOrderE0EfS6_yiiNS1_21identity_decomposer_tEEEvPT5_SC_PT3_PKSD_PT1_PKSH_PT2_PKSL_T4_iiT6_": (
        "DeviceRadixSortOnesweepKernel<float>", "sort/scan"),
    # C names stay as they are
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x256x32_warpgroupsize1x1x1_aux_f16_dgelu_execute_segment_k_on_"
    "kernel__5x_cublas": (None, "gemm"),
}


@pytest.fixture(scope="module")
def names():
    return kn.Names()


@pytest.mark.parametrize("symbol", sorted(KERNELS))
def test_category_display_name_and_demangled(symbol, names):
    want_cat, want_short, want_full = KERNELS[symbol]
    n = names.describe(symbol)
    assert n.category == want_cat, (symbol, n.demangled)
    assert n.display_name == (want_short or kn.short_name(symbol))
    assert n.demangled == (want_full or symbol)


@pytest.mark.parametrize("symbol", sorted(MORE))
def test_display_names_keep_the_argument_that_carries_the_meaning(symbol, names):
    want, cat = MORE[symbol]
    n = names.describe(symbol)
    assert (n.display_name, n.category) == (want or symbol, cat), n.demangled


def corpus():
    with open(CORPUS) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def test_real_corpus_demangles_exactly_as_cxxfilt_and_reads_short():
    syms = corpus()
    assert len(syms) > 500
    n = kn.Names().describe_all(syms)
    if shutil.which("c++filt"):
        ref = subprocess.run(["c++filt"], input="\n".join(syms), capture_output=True, text=True,
                             check=True).stdout.split("\n")
        assert [x.demangled for x in n] == ref[:len(syms)]
    for s, x in zip(syms, n):
        assert x.category in CATEGORIES
        d = x.display_name
        assert 0 < len(d) <= (kn.DISPLAY_LIMIT if s.startswith("_Z") else kn.PLAIN_LIMIT)
        if s.startswith("_Z"):
            assert x.demangled != s, s  # every corpus symbol is valid
            assert "(" not in d and "::" not in d, (d, x.demangled)
            name = d.split("<")[0]
            # a template argument is shown whenever one says something
            if name in ("Kernel2", "Kernel", "device_kernel", "elementwise_kernel", "vectorized_elementwise_kernel",
                        "k_bin_bcast", "mul_mat_vec_q", "reduce_kernel"):
                assert "<" in d, (d, x.demangled)


def test_ggml_types_name_the_quantization():
    assert kn.short_name("void mul_mat_vec_q<(ggml_type)12, 1, false>(void const*)") == "mul_mat_vec_q<q4_K>"
    assert kn.short_name("void mul_mat_vec_q<(ggml_type)39, 1, false>(void const*)") == "mul_mat_vec_q<mxfp4>"
    # an enum nobody maps is a number like any other
    assert kn.short_name("void k<(other_enum)3, float>(float*)") == "k<float>"


def test_short_names_are_bounded_and_plain_names_kept():
    assert kn.short_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    assert kn.short_name("x" * 200) == "x" * 200  # a C name is the name
    assert len(kn.short_name("x" * 1000)) == kn.PLAIN_LIMIT and kn.short_name("x" * 1000).endswith("\u2026")
    long = "void ns::k<%s>(int)" % ("a" * 200)
    assert len(kn.short_name(long)) == kn.DISPLAY_LIMIT and kn.short_name(long).endswith("\u2026")
    assert kn.short_name("void foo::bar(int)") == "bar"
    assert kn.short_name("") == ""
    assert category("") == "other"


# -- the demangler's fallbacks ------------------------------------------------------
SYM = "_ZN4vllm15rms_norm_kernelIN3c104HalfELi8ELi4EEEvPT_PKS3_S6_fii"
SYM_D = KERNELS[SYM][2]


def test_libstdcxx_demangles_without_any_process(monkeypatch):
    calls = []
    monkeypatch.setattr(kn.subprocess, "run", lambda *a, **k: calls.append(a))
    d = kn.Demangler()
    assert d.cxa is not None, "libstdc++ is part of every Python on Linux"
    assert d.demangle(SYM) == SYM_D
    assert d.demangle("_Z1fv.constprop.0") == "f() [clone .constprop.0]"
    assert calls == []


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not installed")
def test_without_libstdcxx_cxxfilt_runs_once_per_batch(monkeypatch):
    calls = []
    real = subprocess.run

    def counting(args, **kw):
        calls.append(args)
        return real(args, **kw)

    monkeypatch.setattr(kn.subprocess, "run", counting)
    names = kn.Names(kn.Demangler(cxa=False))
    syms = [s for s in KERNELS if s.startswith("_Z")]
    out = names.describe_all(syms + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"])
    assert len(calls) == 1  # one process for the whole batch; plain names never reach it
    assert [x.demangled for x in out[:len(syms)]] == [KERNELS[s][2] for s in syms]
    assert out[-1].demangled == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    names.describe_all(syms)
    assert len(calls) == 1  # cached


def test_neither_libstdcxx_nor_cxxfilt_gives_the_raw_symbol(tmp_path):
    bad = tmp_path / "c++filt"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    for path in (str(bad), str(tmp_path / "nope"), None):
        n = kn.Names(kn.Demangler(cxa=False, cxxfilt=path)).describe(SYM)
        assert n.demangled == SYM and n.display_name == SYM[:kn.DISPLAY_LIMIT]
        assert n.category == "normalization"  # the raw symbol still names its family


def test_names_too_long_for_libstdcxx_go_to_cxxfilt(monkeypatch):
    seen = []
    d = kn.Demangler(cxxfilt="c++filt-that-is-not-there")
    monkeypatch.setattr(d, "_cxxfilt", lambda syms: seen.extend(syms) or [None] * len(syms))
    huge = "_Z1fI" + "i" * (kn.CXA_MAX_LEN + 10) + "Evv"
    assert d.demangle_all([huge, SYM]) == [huge, SYM_D]
    assert seen == [huge]


@pytest.mark.parametrize("junk", ["", "_Z", "_ZN", "_Z3fo", "_ZN2at6native13reduce_kernelILi512E",
                                  "_ZX", "plain_c_name", "_ZTV3Foo", "_Z1fIT_E" + "I" * 200, "_Z1f\x00v",
                                  "_Z" + "P" * 60000 + "i", "_Z1fI" + "1aI" * 5000 + "i" + "E" * 5000 + "Evv",
                                  "_Z\udcff1fv", "\u00e9\u00e9"])
def test_hostile_symbols_come_back_unchanged(junk, names):
    n = names.describe(junk)
    assert n.demangled == junk or junk == "_ZTV3Foo"  # a vtable name is valid C++ and demangles
    assert len(n.display_name) <= kn.PLAIN_LIMIT and n.category in CATEGORIES


def test_the_cache_is_bounded():
    names = kn.Names(size=50)
    names.describe_all(["_Z1fILi%dEEvv" % i for i in range(200)])
    assert len(names.cache) == 50
    assert names.describe("_Z1fILi199EEvv").demangled == "void f<199>()"


def test_annotate_adds_names_to_kernel_frames_only():
    frames = [{"name": SYM, "value": 5, "samples": 1}]
    assert kn.annotate("cuda_kernels_nanoseconds", frames) is frames
    assert frames == [{"name": SYM, "value": 5, "samples": 1, "display_name": "rms_norm_kernel<Half>",
                       "category": "normalization"}]
    other = [{"name": "stream", "value": 1, "samples": 1}]
    kn.annotate("cuda_sync_nanoseconds", other)
    assert other == [{"name": "stream", "value": 1, "samples": 1}]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_kernels_nvcc_builds_here_read_as_written(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(r'''
#include <cuda_bf16.h>
namespace cutlass { template <typename Op> __global__ void Kernel2(typename Op::Params p) {} }
struct cutlass_80_simt_sgemm_128x64_8x5_nn_align1 { struct Params { int m; }; };
namespace at { namespace native {
struct FillFunctor { float v; __device__ float operator()() const { return v; } };
template <int vec, typename F> __global__ void vectorized_elementwise_kernel(int n, F f) {}
}}
template <typename T, int N> __global__ void rms_norm_kernel(T* out, const T* in, int n) {}
void launch() {
  cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1><<<1, 1>>>({1});
  at::native::vectorized_elementwise_kernel<4><<<1, 1>>>(1, at::native::FillFunctor{0.f});
  auto silu = [] __device__ (float x) { return x; };
  at::native::vectorized_elementwise_kernel<4><<<1, 1>>>(1, silu);
  rms_norm_kernel<__nv_bfloat16, 8><<<1, 1>>>(nullptr, nullptr, 1);
}
''')
    obj = tmp_path / "k.o"
    subprocess.run(["nvcc", "-std=c++17", "--extended-lambda", "-arch=sm_90", "-c", str(src), "-o", str(obj)],
                   check=True, capture_output=True)
    nm = subprocess.run(["nm", str(obj)], check=True, capture_output=True, text=True).stdout
    # each kernel's host stub is named _ZL<n>__device_stub__Z<the kernel's symbol after _Z>...: the
    # length n bounds the kernel's part
    stubs = set()
    for m in re.finditer(r"_ZL?(\d+)(__device_stub__Z\S*)", nm):
        stubs.add("_" + m.group(2)[:int(m.group(1))][len("__device_stub__"):])
    assert len(stubs) == 4
    got = {kn.describe(s).display_name for s in stubs}
    assert {"Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>", "vectorized_elementwise_kernel<FillFunctor>",
            "rms_norm_kernel<__nv_bfloat16>"} <= got, got
    assert any(g.startswith("vectorized_elementwise_kernel<") and "lambda" not in g for g in got)


def test_a_name_the_shortener_cannot_read_costs_only_its_display_name(monkeypatch, caplog):
    def broken(d, limit=kn.DISPLAY_LIMIT):
        raise IndexError("boom")

    monkeypatch.setattr(kn, "short_name", broken)
    n = kn.Names().describe(SYM)
    assert n == (SYM, "other", SYM_D)
    assert any("cannot shorten kernel name" in r.message for r in caplog.records)
