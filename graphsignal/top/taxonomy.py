"""Kernel taxonomy: what kind of work a GPU kernel does, from its symbol,
and a short name a person can read in a table row.

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

from graphsignal.top.demangle import Demangler

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
    (ATTENTION, r"flash_?(fwd|bwd|attn|attention|decod|mla)|" + _B + r"flash::|fmha|attention|" + _B + r"attn|" + _B + r"mha" + _E + r"|" + _B + r"mla" + _E
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


def category(text):
    """The category of a (demangled) kernel name."""
    t = text.lower()
    for cat, rx in _COMPILED:
        if rx.search(t):
            return cat
    return OTHER


# -- short names --------------------------------------------------------------------
_SCALARS = {
    "float", "double", "half", "int", "unsigned int", "long", "unsigned long", "long long",
    "unsigned long long", "short", "unsigned short", "char", "signed char", "unsigned char", "bool",
    "c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2", "cutlass::half_t",
    "cutlass::bfloat16_t", "cutlass::float_e4m3_t", "cutlass::float_e5m2_t", "__half", "__nv_bfloat16",
    "__nv_fp8_e4m3", "__nv_fp8_e5m2", "at::Half", "at::BFloat16", "__int128", "void",
}
# wrappers whose own argument says more than they do
_WRAPPERS = {"ReduceOp", "func_wrapper_t", "AccumulateType", "OpaqueType"}
_LITERAL = re.compile(r"^-?\(?[\w: ]*\)?-?\d+[ul]*$|^(true|false)$")
# ggml's weight types (enum ggml_type in ggml.h; the values are GGUF's type ids, so they
# stay put): mul_mat_vec_q<(ggml_type)12, ...> is the Q4_K kernel
_GGML_TYPE = re.compile(r"^\(ggml_type\)(\d+)$")
_GGML_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1", 10: "q2_K",
               11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs", 17: "iq2_xs",
               18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "i8",
               25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 30: "bf16", 34: "tq1_0", 35: "tq2_0",
               39: "mxfp4", 40: "nvfp4", 41: "q1_0", 42: "q2_0"}


def _split_top(s, sep=","):
    """Splits s at top-level `sep` (outside <>, () and {})."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [x for x in out if x]


def _find_top(s, ch, start=0):
    depth = 0
    for i in range(start, len(s)):
        c = s[i]
        if c == ch and depth == 0:
            return i
        if c in "<({":
            depth += 1
        elif c in ">)}":
            depth -= 1
    return -1


def split_function(d):
    """'ret ns::name<args>(params) const' -> ('ns::name', 'args' or None)."""
    d = d.replace("(anonymous namespace)::", "")
    # the qualified name ends where its top-level parameter list begins
    head = d
    p = _find_top(d, "(")
    if p > 0:
        head = d[:p]
    # drop a return type: the last top-level space separates it
    depth, cut = 0, -1
    for i, c in enumerate(head):
        if c in "<({":
            depth += 1
        elif c in ">)}":
            depth -= 1
        elif c == " " and depth == 0:
            cut = i
    if cut >= 0:
        head = head[cut + 1:]
    lt = _find_top(head, "<")
    if lt < 0:
        return head, None
    return head[:lt], head[lt + 1:head.rfind(">")]


def _last_component(qname):
    parts = []
    depth, cur = 0, []
    i = 0
    while i < len(qname):
        c = qname[i]
        if c in "<({":
            depth += 1
        elif c in ">)}":
            depth -= 1
        if depth == 0 and qname.startswith("::", i):
            parts.append("".join(cur))
            cur = []
            i += 2
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts[-1]


def _arg_name(arg, depth=0):
    """A template argument reduced to the word that says what it is, or
    None when it says nothing (a number, a bool, a container)."""
    arg = arg.strip()
    m = _GGML_TYPE.match(arg)
    if m:
        return _GGML_TYPES.get(int(m.group(1)))
    if _LITERAL.match(arg):
        return None
    if arg.startswith("&(") or arg.startswith("&"):
        # a function passed by address: its name
        inner = arg.lstrip("&").strip()
        if inner.startswith("(") and inner.endswith(")"):
            inner = inner[1:-1]
        base, _ = split_function(inner)
        return _last_component(base) or None
    if "::{lambda" in arg:
        # a lambda inside a function: the function names the operation
        owner = arg.split("::{lambda", 1)[0]
        if "::{lambda" in owner or ")::" in owner:
            owner = owner.split(")::", 1)[0] + ")"
        base, _ = split_function(owner)
        return _last_component(base) or None
    arg = arg.replace("(anonymous namespace)::", "")
    if arg.startswith("std::"):
        return None
    if arg.endswith("*") or arg.endswith("&"):
        return None
    lt = _find_top(arg, "<")
    base = _last_component(arg if lt < 0 else arg[:lt])
    if base in _WRAPPERS and lt >= 0 and depth < 2:
        inner = _best_arg(arg[lt + 1:arg.rfind(">")], depth + 1, scalars=False)
        if inner:
            return inner
    return base or None


def _best_arg(targs, depth=0, scalars=True):
    """The most telling template argument: the first that is neither a
    literal nor a scalar type; else (at the top) the first scalar type,
    since a dtype is still worth seeing."""
    first_scalar = None
    for a in _split_top(targs):
        if a.replace("(anonymous namespace)::", "") in _SCALARS:
            if first_scalar is None:
                first_scalar = _last_component(a)
            continue
        name = _arg_name(a, depth)
        if name:
            return name
    return first_scalar if scalars else None


def short_name(demangled, limit=64):
    """A readable name: the function's own name without namespaces,
    parameters or return type, plus its most telling template argument;
    plain (C, Triton, NCCL) names as they are. At most `limit` chars."""
    d = demangled.strip()
    if "(" in d or "<" in d or "::" in d:
        base, targs = split_function(d)
        name = _last_component(base) or d
        if targs:
            arg = _best_arg(targs)
            if arg:
                name = "%s<%s>" % (name, arg)
    else:
        name = d
    if len(name) > limit:
        name = name[:limit - 1] + "\u2026"
    return name


class Taxonomy:
    """Names kernels: category and short name per symbol, cached; symbols
    are demangled in batches (see Demangler)."""

    def __init__(self, demangler=None):
        self.demangler = demangler or Demangler()
        self.cache = {}

    def describe_all(self, symbols):
        """[(category, short name, demangled)] for each symbol."""
        new = [s for s in dict.fromkeys(symbols) if s not in self.cache]
        if new:
            for s, d in zip(new, self.demangler.demangle_all(new)):
                self.cache[s] = (category(d), short_name(d), d)
        return [self.cache[s] for s in symbols]

    def describe(self, symbol):
        return self.describe_all([symbol])[0]
