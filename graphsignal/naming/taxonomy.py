"""Kernel taxonomy: what kind of work a GPU kernel does, from its
(demangled) name. graphsignal.naming.kernels demangles, shortens and
calls category() for the payload and for graphsignal-top alike.

Rules are ordered regular expressions over the lower-cased demangled
name, template arguments included (they often carry the operation: a
`vectorized_elementwise_kernel<FillFunctor>` is a fill, an
`act_and_mul_kernel<silu_kernel>` an activation). The order resolves
overlaps: communication and attention first (their kernels contain GEMMs
and reductions), then GEMM (its epilogues name activations and norms),
then the narrower families, and plain elementwise last.

ggml-cuda (llama.cpp) names its kernels tersely and reuses words: in
`rope_norm` "norm" is the rope mode, `k_get_rows<..., dequantize_q4_0>`
is a gather that dequantizes, `k_set_rows` is the KV-cache write, `cpy_*`
copies, `mul_mat_vec_f`/`mul_mat_vec_q`/`mul_mat_q`/`mul_mat_f` are its
GEMV/GEMM kernels (float and quantized weights) and `soft_max_f32` its
softmax; its rules sit right after attention's so that these words win.
"""
import re

GEMM = "gemm"
ATTENTION = "attention"
CONVOLUTION = "convolution"
NORMALIZATION = "normalization"
ACTIVATION = "activation"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COMMUNICATION = "communication"
MEMORY = "memory"
SORT = "sort/scan"
EMBEDDING = "embedding"
QUANTIZATION = "quantization"
OTHER = "other"

CATEGORIES = (GEMM, ATTENTION, CONVOLUTION, NORMALIZATION, ACTIVATION, ELEMENTWISE, REDUCTION, COMMUNICATION,
              MEMORY, SORT, EMBEDDING, QUANTIZATION, OTHER)

_B = r"(?<![a-z])"  # start of a word: snake_case and namespaces count as separators
_E = r"(?![a-z])"

_RULES = [
    # KV-cache writes serve attention but are copies; they would otherwise
    # match the attention rule through names like *_cache_flash_kernel
    (MEMORY, r"reshape_and_cache|concat_and_cache|copy_blocks|swap_blocks"),
    (COMMUNICATION, r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"
                    r"|nvshmem|sendrecv|send_recv|" + _B + r"p2p" + _E),
    (ATTENTION, r"flash_?(fwd|bwd|attn|attention|decod|mla)|" + _B + r"flash::|fmha|attention|" + _B + r"attn|"
                + _B + r"mha" + _E + r"|" + _B + r"mla" + _E
                + r"|batch_?prefill|batch_?decode|single_?prefill|single_?decode|paged_?attention|xformers"
                + r"|merge_?attn|merge_?state|" + _B + r"sdpa|" + _B + r"lean_?attn"),
    # ggml-cuda (see the module doc)
    (EMBEDDING, _B + r"rope_(norm|neox|multi|vision)" + _E),
    (MEMORY, _B + r"k_(get|set)_rows|" + _B + r"cpy_|op_repeat|" + _B + r"k_repeat"),
    (COMMUNICATION, _B + r"ggml_cuda_ar_"),
    (GEMM, _B + r"mul_mat_(vec|q|f)"),
    (CONVOLUTION, r"convolution|convolve|" + _B + r"conv[123]?d|" + _B + r"conv_|implicit_?gemm|winograd"
                  + r"|" + _B + r"[dw]grad" + _E + r"|cudnn.*conv"),
    (GEMM, r"gemm|gemv|" + _B + r"b?mm" + _E + r"|addmm|matmul|" + _B + r"w?mma" + _E + r"|xmma|nvjet|cublas"
           + r"|" + _B + r"s\d{3,5}gemm|splitk|marlin|scaled_mm|grouped_mm|fused_moe|moe_gemm|cutlass.*tensorop"),
    (QUANTIZATION, r"quant|" + _B + r"(fp8|fp4|nvfp4|mxfp\d|int8|int4|e4m3|e5m2)" + _E + r"|awq|gptq"),
    (SORT, r"sort|radix|" + _B + r"scan|cumsum|cumprod|" + _B + r"top_?[kp]|sampling|bitonic"),
    (NORMALIZATION, r"(layer|rms|group|batch|instance|l2|weight)_?norm|" + _B + r"norm_|" + _B + r"norm" + _E
                    + r"|soft_?max|" + _B + r"rsqrt"),
    (ACTIVATION, r"silu|gelu|" + _B + r"relu|swiglu|geglu|sigmoid|" + _B + r"tanh|" + _B + r"elu" + _E
                 + r"|mish|swish|act_and_mul|" + _B + r"act_|activation|softplus|" + _B + r"glu" + _E),
    (EMBEDDING, r"embed|rotary|" + _B + r"rope" + _E + r"|index_?select"),
    (REDUCTION, r"reduce|reduction|" + _B + r"(sum|mean|prod|argmax|argmin|amax|amin|max|min)" + _E
                + r"|triton_red_|triton_per_|norm_?two|" + _B + r"var" + _E),
    (MEMORY, r"memcpy|memset|copy|" + _B + r"fill|cat_?array|" + _B + r"cat" + _E + r"|concat|transpose|permute"
             + r"|contiguous|gather|scatter|_cache|" + _B + r"index|" + _B + r"clone" + _E),
    (ELEMENTWISE, r"elementwise|pointwise|triton_poi_|" + _B + r"unary|" + _B + r"binary|foreach|multi_tensor"
                  + r"|" + _B + r"(add|mul|sub|div|where|clamp|exp|log|pow|neg|abs|sqrt|cast|to|scale)" + _E),
]
_COMPILED = [(cat, re.compile(rx)) for cat, rx in _RULES]


def category(text: str) -> str:
    """The category of a (demangled) kernel name."""
    t = text.lower()
    for cat, rx in _COMPILED:
        if rx.search(t):
            return cat
    return OTHER
