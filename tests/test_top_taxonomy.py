"""Kernel taxonomy and demangling on real kernel symbols (PyTorch, vLLM,
FlashAttention, cuBLAS/CUTLASS, NCCL, Triton, CUB, FlashInfer)."""
import shutil
import subprocess

import pytest

from graphsignal.top import demangle as dm
from graphsignal.top.taxonomy import Taxonomy, category, short_name

# symbol -> (category, short name, demangled as c++filt prints it, or None for C names)
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
        "sort/scan", "DeviceRadixSortOnesweepKernel<Policy>",
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


@pytest.fixture(scope="module")
def tax_py():
    # the pure-Python demangler alone, as on a machine without binutils
    return Taxonomy(dm.Demangler(cxxfilt=None))


@pytest.mark.parametrize("symbol", sorted(KERNELS))
def test_category_and_short_name(symbol, tax_py):
    want_cat, want_short, want_full = KERNELS[symbol]
    cat, short, full = tax_py.describe(symbol)
    assert cat == want_cat, (symbol, full)
    assert short == (want_short or symbol[:63] + "\u2026" if len(symbol) > 64 else want_short or symbol)
    assert full == (want_full or symbol)


@pytest.mark.parametrize("symbol", sorted(s for s, v in KERNELS.items() if v[2]))
def test_python_demangler_agrees_with_cxxfilt(symbol):
    assert dm.demangle_py(symbol) == KERNELS[symbol][2]
    if shutil.which("c++filt"):
        ref = subprocess.run(["c++filt", symbol], stdout=subprocess.PIPE, check=True).stdout.decode().strip()
        assert ref == KERNELS[symbol][2]


@pytest.mark.parametrize("symbol,demangled", [
    ("_Z8variadicIJifPcEEvDpT_", "void variadic<int, float, char*>(int, float, char*)"),
    ("_Z3arrIiLi3EEvRAT0__T_yaewDsDn", "void arr<int, 3>(int (&) [3], unsigned long long, signed char, long double, "
                                       "wchar_t, char16_t, decltype(nullptr))"),
    ("_Z7nontypeI1ELS0_1EEvv", "void nontype<E, (E)1>()"),
    ("_Z7nontypeIlLln3EEvv", "void nontype<long, -3l>()"),
    ("_ZNK1SclEi", "S::operator()(int) const"),
    ("_ZN1SD2Ev", "S::~S()"),
    ("_ZNSaIcEC1Ev", "std::allocator<char>::allocator()"),
    ("_ZN1S2stEPFviEMS_i", "S::st(void (*)(int), int S::*)"),
    ("_ZNO1S1mEv", "S::m() &&"),
    ("_ZZN2at6native11silu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEv",
     "at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const"),
    ("_Z1fv.constprop.0", "f() [clone .constprop.0]"),
])
def test_python_demangler_on_grammar_corners(symbol, demangled):
    assert dm.demangle_py(symbol) == demangled


@pytest.mark.parametrize("junk", ["", "_Z", "_ZN", "_ZN3fooE", "_Z3fo", "_ZN2at6native13reduce_kernelILi512E",
                                  "_ZX", "plain_c_name", "_ZTV3Foo", "_Z1fIT_E" + "I" * 200])
def test_python_demangler_returns_what_it_cannot_read(junk):
    out = dm.demangle_py(junk)
    assert out == junk or isinstance(out, str)
    if junk in ("", "_Z", "_ZN", "_Z3fo", "_ZX", "plain_c_name", "_ZTV3Foo"):
        assert out == junk


def test_cxxfilt_runs_once_per_batch_and_caches(monkeypatch):
    if not shutil.which("c++filt"):
        pytest.skip("c++filt not installed")
    calls = []
    real = subprocess.run

    def counting(args, **kw):
        calls.append(args)
        return real(args, **kw)

    monkeypatch.setattr(dm.subprocess, "run", counting)
    d = dm.Demangler()
    syms = [s for s in KERNELS if s.startswith("_Z")]
    out = d.demangle_all(syms + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"])
    assert len(calls) == 1  # one process for the whole batch; plain names never reach it
    assert out[:len(syms)] == [KERNELS[s][2] for s in syms]
    assert out[-1] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    d.demangle_all(syms)
    assert len(calls) == 1  # cached


def test_a_broken_cxxfilt_falls_back_to_python(tmp_path):
    bad = tmp_path / "c++filt"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    missing = tmp_path / "nope"
    sym = "_ZN4vllm15rms_norm_kernelIN3c104HalfELi8ELi4EEEvPT_PKS3_S6_fii"
    for path in (str(bad), str(missing)):
        assert dm.Demangler(cxxfilt=path).demangle(sym) == KERNELS[sym][2]


def test_short_names_are_bounded_and_plain_names_kept():
    assert short_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    long = "x" * 200
    assert len(short_name(long)) == 64 and short_name(long).endswith("\u2026")
    assert short_name("void foo::bar(int)") == "bar"
    assert category("") == "other"
