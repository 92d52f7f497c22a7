"""Kernel taxonomy on real ggml-cuda (llama.cpp) kernel symbols: each one
below is a kernel name registered in the object files of a ggml-cuda build
(llama.cpp 0c1e570, the source in ../shared/engines, -DGGML_CUDA=ON
-DCMAKE_CUDA_ARCHITECTURES=90; read from each .cu.o's .rodata strings,
which hold the names __cudaRegisterFunction registers, i.e. the symbols
CUPTI reports). The demangled text is what c++filt prints for it;
graphsignal.kernel_names (libstdc++'s __cxa_demangle) must print the same."""
import shutil
import subprocess

import pytest

from graphsignal.naming import kernels as kernel_names

# symbol -> (category, short name, demangled as c++filt prints it)
GGML = {
    "_Z13mul_mat_vec_fI6__halfS0_Li1ELi128ELb0ELb0EEvPKT_PKfPKi31ggml_cuda_mm_fusion_args_devicePfi5uint3iiiSA_ii"
    "iSA_iiii": (
        "gemm", 'mul_mat_vec_f<__half>',
        "void mul_mat_vec_f<__half, __half, 1, 128, false, false>(__half const*, float const*, int const*, ggml_c"
        "uda_mm_fusion_args_device, float*, int, uint3, int, int, int, uint3, int, int, int, uint3, int, int, int"
        ", int)"),
    "_Z13mul_mat_vec_qIL9ggml_type8ELi1ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jj"
    "jS7_jjjj": (
        "gemm", 'mul_mat_vec_q<q8_0>',
        "void mul_mat_vec_q<(ggml_type)8, 1, false, false, false>(void const*, void const*, int const*, ggml_cuda"
        "_mm_fusion_args_device, float*, unsigned int, uint3, unsigned int, unsigned int, unsigned int, uint3, un"
        "signed int, unsigned int, unsigned int, uint3, unsigned int, unsigned int, unsigned int, unsigned int)"),
    "_Z13mul_mat_vec_qIL9ggml_type2ELi4ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jj"
    "jS7_jjjj": (
        "gemm", 'mul_mat_vec_q<q4_0>',
        "void mul_mat_vec_q<(ggml_type)2, 4, false, false, false>(void const*, void const*, int const*, ggml_cuda"
        "_mm_fusion_args_device, float*, unsigned int, uint3, unsigned int, unsigned int, unsigned int, uint3, un"
        "signed int, unsigned int, unsigned int, uint3, unsigned int, unsigned int, unsigned int, unsigned int)"),
    "_Z13quantize_q8_1PKfPvlllllj5uint3": (
        "quantization", "quantize_q8_1",
        "quantize_q8_1(float const*, void*, long, long, long, long, long, unsigned int, uint3)"),
    "_Z17quantize_mmq_q8_1IL18mmq_q8_1_ds_layout0ELb0EEvPKfPKiPvllllliii": (
        "quantization", "quantize_mmq_q8_1",
        "void quantize_mmq_q8_1<(mmq_q8_1_ds_layout)0, false>(float const*, int const*, void*, long, long, long, "
        "long, long, int, int, int)"),
    "_Z18flash_attn_ext_f16ILi192ELi128ELi1ELi16ELb0ELb0ELb0EEvPKcS1_S1_S1_S1_PKiPfP6float2ffffjfi5uint3iiiiiiiii"
    "iiliiliiiiil": (
        "attention", "flash_attn_ext_f16",
        "void flash_attn_ext_f16<192, 128, 1, 16, false, false, false>(char const*, char const*, char const*, cha"
        "r const*, char const*, int const*, float*, float2*, float, float, float, float, unsigned int, float, int"
        ", uint3, int, int, int, int, int, int, int, int, int, int, int, long, int, int, long, int, int, int, int"
        ", int, long)"),
    "_Z15flash_attn_tileILi112ELi112ELi16ELi1ELb0EEvPKcS1_S1_S1_S1_PKiPfP6float2ffffjfi5uint3iiiiiiiiiiiliiliiiii"
    "l": (
        "attention", "flash_attn_tile",
        "void flash_attn_tile<112, 112, 16, 1, false>(char const*, char const*, char const*, char const*, char co"
        "nst*, int const*, float*, float2*, float, float, float, float, unsigned int, float, int, uint3, int, int"
        ", int, int, int, int, int, int, int, int, int, long, int, int, long, int, int, int, int, int, long)"),
    "_Z26flash_attn_combine_resultsILi112EEvPKfPK6float2Pfi": (
        "attention", "flash_attn_combine_results",
        "void flash_attn_combine_results<112>(float const*, float2 const*, float*, int)"),
    "_Z33flash_attn_stream_k_fixup_generalILi112ELi16ELi1EEvPfPK6float2iiii5uint3S4_S4_S4_": (
        "attention", "flash_attn_stream_k_fixup_general",
        "void flash_attn_stream_k_fixup_general<112, 16, 1>(float*, float2 const*, int, int, int, int, uint3, uin"
        "t3, uint3, uint3)"),
    "_Z12soft_max_f32ILb0ELi0ELi0E6__halfEvPKfPKT2_S2_Pf15soft_max_params": (
        "normalization", "soft_max_f32<__half>",
        "void soft_max_f32<false, 0, 0, __half>(float const*, __half const*, float const*, float*, soft_max_param"
        "s)"),
    "_Z12rms_norm_f32ILi1024ELb0ELb0ELb0EEvPKfPfilllfS1_lll5uint3S3_S3_S3_S1_lllS3_S3_S3_S3_f": (
        "normalization", "rms_norm_f32",
        "void rms_norm_f32<1024, false, false, false>(float const*, float*, int, long, long, long, float, float c"
        "onst*, long, long, long, uint3, uint3, uint3, uint3, float const*, long, long, long, uint3, uint3, uint3"
        ", uint3, float)"),
    "_Z21rms_norm_mul_rope_f32ILi1024ELb0E6__halfEvPKfPT1_illllllfS2_lll5uint3S5_S5_S5_iPKifff14rope_corr_dimsfS2"
    "_PKlib": (
        "normalization", "rms_norm_mul_rope_f32<__half>",
        "void rms_norm_mul_rope_f32<1024, false, __half>(float const*, __half*, int, long, long, long, long, long"
        ", long, float, float const*, long, long, long, uint3, uint3, uint3, uint3, int, int const*, float, float"
        ", float, rope_corr_dims, float, float const*, long const*, int, bool)"),
    "_Z9rope_normILb0ELb0E6__halfS0_EvPKT1_PT2_iiiiiiiiiiiPKifff14rope_corr_dimsfPKfPKlib": (
        "embedding", "rope_norm<__half>",
        "void rope_norm<false, false, __half, __half>(__half const*, __half*, int, int, int, int, int, int, int, "
        "int, int, int, int, int const*, float, float, float, rope_corr_dims, float, float const*, long const*, i"
        "nt, bool)"),
    "_Z9rope_neoxILb0ELb0E6__halfS0_EvPKT1_PT2_iiiiiiiiiiiPKifff14rope_corr_dimsfPKfPKlib": (
        "embedding", "rope_neox<__half>",
        "void rope_neox<false, false, __half, __half>(__half const*, __half*, int, int, int, int, int, int, int, "
        "int, int, int, int, int const*, float, float, float, rope_corr_dims, float, float const*, long const*, i"
        "nt, bool)"),
    "_Z10cpy_scalarIXadL_ZN36_INTERNAL_56385b09_6_cpy_cu_bfba63e212cpy_1_scalarI13__nv_bfloat166__halfEEvPKcPcEEE"
    "vS5_S6_lllllllllllllll": (
        "memory", "cpy_scalar<cpy_1_scalar>",
        "void cpy_scalar<&(void _INTERNAL_56385b09_6_cpy_cu_bfba63e2::cpy_1_scalar<__nv_bfloat16, __half>(char co"
        "nst*, char*))>(char const*, char*, long, long, long, long, long, long, long, long, long, long, long, lon"
        "g, long, long, long)"),
    "_Z9cpy_f32_qIXadL_ZN36_INTERNAL_56385b09_6_cpy_cu_bfba63e217cpy_blck_f32_q4_0EPKcPcEELi32EEvS2_S3_llllllllll"
    "lllll": (
        "memory", "cpy_f32_q<cpy_blck_f32_q4_0>",
        "void cpy_f32_q<&_INTERNAL_56385b09_6_cpy_cu_bfba63e2::cpy_blck_f32_q4_0, 32>(char const*, char*, long, l"
        "ong, long, long, long, long, long, long, long, long, long, long, long, long, long)"),
    "_Z16k_get_rows_floatI13__nv_bfloat166__halfEvPKT_PKiPT0_ll5uint3mmmmmmmmm": (
        "memory", "k_get_rows_float<__nv_bfloat16>",
        "void k_get_rows_float<__nv_bfloat16, __half>(__nv_bfloat16 const*, int const*, __half*, long, long, uint"
        "3, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned lo"
        "ng, unsigned long, unsigned long)"),
    "_Z10k_get_rowsILi32ELi1EXadL_ZN41_INTERNAL_111a62ff_10_getrows_cu_f63e7a9315dequantize_q8_0EPKvliR6float2EE1"
    "3__nv_bfloat16EvS2_PKiPT2_ll5uint3mmmmmmmmm": (
        "memory", "k_get_rows<dequantize_q8_0>",
        "void k_get_rows<32, 1, &_INTERNAL_111a62ff_10_getrows_cu_f63e7a93::dequantize_q8_0, __nv_bfloat16>(void "
        "const*, int const*, __nv_bfloat16*, long, long, uint3, unsigned long, unsigned long, unsigned long, unsi"
        "gned long, unsigned long, unsigned long, unsigned long, unsigned long, unsigned long)"),
    "_Z10k_set_rowsI6__halfiS0_EvPKT_PKT0_PT1_llllllllllllll5uint3S9_S9_S9_S9_": (
        "memory", "k_set_rows<__half>",
        "void k_set_rows<__half, int, __half>(__half const*, int const*, __half*, long, long, long, long, long, l"
        "ong, long, long, long, long, long, long, long, long, uint3, uint3, uint3, uint3, uint3)"),
    "_Z16k_set_rows_quantIi10block_q4_0Li32EXadL_ZN42_INTERNAL_0ce66ef1_11_set_rows_cu_7ddb16fd23quantize_f32_q4_"
    "0_blockEPKfPS0_EEEvS3_PKT_PT0_llllllllllllll5uint3SA_SA_SA_SA_": (
        "memory", "k_set_rows_quant<block_q4_0>",
        "void k_set_rows_quant<int, block_q4_0, 32, &_INTERNAL_0ce66ef1_11_set_rows_cu_7ddb16fd::quantize_f32_q4_"
        "0_block>(float const*, int const*, block_q4_0*, long, long, long, long, long, long, long, long, long, lo"
        "ng, long, long, long, long, uint3, uint3, uint3, uint3, uint3)"),
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_2305e5a9_11_binbcast_cu_6840010b6op_addEffEEfffJPKfEEvPKT0_PKT1_PT2_jjj5u"
    "int3SB_SB_SB_SB_jjjjjjjjjjjDpT3_": (
        "elementwise", "k_bin_bcast<op_add>",
        "void k_bin_bcast<&_INTERNAL_2305e5a9_11_binbcast_cu_6840010b::op_add, float, float, float, float const*>"
        "(float const*, float const*, float*, unsigned int, unsigned int, unsigned int, uint3, uint3, uint3, uint"
        "3, uint3, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned i"
        "nt, unsigned int, unsigned int, unsigned int, unsigned int, float const*)"),
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_2305e5a9_11_binbcast_cu_6840010b6op_mulEffEEfffJPKfEEvPKT0_PKT1_PT2_jjj5u"
    "int3SB_SB_SB_SB_jjjjjjjjjjjDpT3_": (
        "elementwise", "k_bin_bcast<op_mul>",
        "void k_bin_bcast<&_INTERNAL_2305e5a9_11_binbcast_cu_6840010b::op_mul, float, float, float, float const*>"
        "(float const*, float const*, float*, unsigned int, unsigned int, unsigned int, uint3, uint3, uint3, uint"
        "3, uint3, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned i"
        "nt, unsigned int, unsigned int, unsigned int, unsigned int, float const*)"),
    "_Z11k_bin_bcastIXadL_ZN42_INTERNAL_2305e5a9_11_binbcast_cu_6840010b9op_repeatEffEEfffJEEvPKT0_PKT1_PT2_jjj5u"
    "int3S9_S9_S9_S9_jjjjjjjjjjjDpT3_": (
        "memory", "k_bin_bcast<op_repeat>",
        "void k_bin_bcast<&_INTERNAL_2305e5a9_11_binbcast_cu_6840010b::op_repeat, float, float, float>(float cons"
        "t*, float const*, float*, unsigned int, unsigned int, unsigned int, uint3, uint3, uint3, uint3, uint3, u"
        "nsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigne"
        "d int, unsigned int, unsigned int, unsigned int)"),
    "_Z9scale_f32IfEvPKT_PS0_ffl": (
        "elementwise", "scale_f32<float>",
        "void scale_f32<float>(float const*, float*, float, float, long)"),
    "_Z10argmax_f32PKfPil": (
        "reduction", "argmax_f32",
        "argmax_f32(float const*, int*, long)"),
    "_Z15unary_op_kernelIXadL_ZN38_INTERNAL_c203c18c_8_unary_cu_eb6d53667op_siluEfEEfEvPKT0_PS1_i": (
        "activation", "unary_op_kernel<op_silu>",
        "void unary_op_kernel<&_INTERNAL_c203c18c_8_unary_cu_eb6d5366::op_silu, float>(float const*, float*, int)"),
    "_Z21unary_gated_op_kernelIXadL_ZN38_INTERNAL_c203c18c_8_unary_cu_eb6d53667op_siluEfEEfEvPKT0_S3_PS1_llll": (
        "activation", "unary_gated_op_kernel<op_silu>",
        "void unary_gated_op_kernel<&_INTERNAL_c203c18c_8_unary_cu_eb6d5366::op_silu, float>(float const*, float "
        "const*, float*, long, long, long, long)"),
    "_Z13convert_unaryI6__halffEvPKvPT0_lll5uint3lll": (
        "elementwise", "convert_unary<__half>",
        "void convert_unary<__half, float>(void const*, float*, long, long, long, uint3, long, long, long)"),
    "_Z11concat_contIhLi0EEvPKT_S2_PS0_llllll": (
        "memory", "concat_cont<unsigned char>",
        "void concat_cont<unsigned char, 0>(unsigned char const*, unsigned char const*, unsigned char*, long, lon"
        "g, long, long, long, long)"),
    "_Z19ggml_cuda_ar_kernelI13__nv_bfloat16S0_EvPKT_PS1_PT0_PKS5_iPiS9_i": (
        "communication", "ggml_cuda_ar_kernel<__nv_bfloat16>",
        "void ggml_cuda_ar_kernel<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat"
        "16*, __nv_bfloat16 const*, int, int*, int*, int)"),

    "_Z9mul_mat_qIL9ggml_type2ELi104ELb0EL9ggml_prec30EEvPKcPKiS5_S5_PfS6_PKf5uint3iiiiiS9_S9_iiiS9_S9_iiiS9_": (
        "gemm", "mul_mat_q<q4_0>",
        "void mul_mat_q<(ggml_type)2, 104, false, (ggml_prec)30>(char const*, int const*, int const*, int const*,"
        " float*, float*, float const*, uint3, int, int, int, int, int, uint3, uint3, int, int, int, uint3, uint3"
        ", int, int, int, uint3)"),
    "_Z24mul_mat_q_stream_k_fixupIL9ggml_type2ELi104ELb0EL9ggml_prec30EEvPKiS3_PfS4_5uint3iiiS5_iS5_iS5_": (
        "gemm", "mul_mat_q_stream_k_fixup<q4_0>",
        "void mul_mat_q_stream_k_fixup<(ggml_type)2, 104, false, (ggml_prec)30>(int const*, int const*, float*, f"
        "loat*, uint3, int, int, int, uint3, int, uint3, int, uint3)"),

}


@pytest.fixture(scope="module")
def tax_py():
    names = kernel_names.Names(kernel_names.Demangler(cxxfilt=None))

    class Describe:
        @staticmethod
        def describe(symbol):
            n = names.describe(symbol)
            return n.category, n.display_name, n.demangled

    return Describe


@pytest.mark.parametrize("symbol", sorted(GGML))
def test_ggml_kernel_category_and_short_name(symbol, tax_py):
    cat, short, full = tax_py.describe(symbol)
    assert (cat, short) == GGML[symbol][:2], full
    assert full == GGML[symbol][2]


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not installed")
def test_cxxfilt_prints_what_the_table_says():
    out = subprocess.run(["c++filt"], input="\n".join(sorted(GGML)).encode(), stdout=subprocess.PIPE,
                         check=True).stdout.decode().splitlines()
    assert out == [GGML[s][2] for s in sorted(GGML)]


def test_a_decode_step_ranks_into_the_categories_an_engine_user_expects(tax_py):
    # one Llama decode step's kernels as ggml-cuda runs them (f16 weights, flash attention)
    cats = {GGML[s][1]: tax_py.describe(s)[0] for s in GGML}
    assert cats["mul_mat_vec_f<__half>"] == cats["mul_mat_vec_q<q8_0>"] == cats["mul_mat_q<q4_0>"] == "gemm"
    assert cats["flash_attn_ext_f16"] == cats["flash_attn_tile"] == "attention"
    assert cats["rms_norm_f32"] == cats["soft_max_f32<__half>"] == "normalization"
    assert cats["rope_norm<__half>"] == cats["rope_neox<__half>"] == "embedding"  # "norm" is rope's mode there
    # the KV-cache write, copies, gathers
    assert cats["k_set_rows<__half>"] == cats["cpy_f32_q<cpy_blck_f32_q4_0>"] == "memory"
    assert cats["k_get_rows<dequantize_q8_0>"] == cats["k_bin_bcast<op_repeat>"] == "memory"
    assert cats["k_bin_bcast<op_add>"] == cats["k_bin_bcast<op_mul>"] == cats["scale_f32<float>"] == "elementwise"
    assert cats["unary_gated_op_kernel<op_silu>"] == "activation"


@pytest.mark.parametrize("mangled,demangled", [
    # the address of a function as a template argument: c++filt drops the signature of a
    # qualified non-template function, keeps it (in parens) otherwise
    ("_Z1gIXadL_Z1fvEEEvv", "void g<&(f())>()"),
    ("_Z1gIXadL_ZN2ns1fEvEEEvv", "void g<&ns::f>()"),
    ("_Z1gIXadL_Z1fIiEvvEEEvv", "void g<&(void f<int>())>()"),
    ("_Z1gIXadL_ZN2ns1fIiEEvvEEEvv", "void g<&(void ns::f<int>())>()"),
    # an empty parameter pack prints as nothing
    ("_Z1hIiJEEvT_DpT0_", "void h<int>(int)"),
])
def test_demangler_matches_cxxfilt_on_function_addresses_and_empty_packs(mangled, demangled):
    assert kernel_names.Demangler(cxxfilt=None).demangle(mangled) == demangled
    if shutil.which("c++filt"):
        assert subprocess.run(["c++filt", mangled], stdout=subprocess.PIPE).stdout.decode().strip() == demangled
