"""Kernel names a person and an agent can read.

CUPTI reports a kernel by its mangled symbol, and the payload keeps that
symbol in each frame's `name` (the contract). Next to it, a kernel frame
carries:

  display_name   the demangled name shortened the way a person reads it:
                 the function's own name without namespaces, parameters
                 or return type, plus the template argument that says what
                 it does (`Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>`,
                 `vectorized_elementwise_kernel<FillFunctor>`,
                 `mul_mat_vec_q<q4_K>`); plain C names (cuBLAS, NCCL,
                 Triton) as they are
  category       what kind of work it is (graphsignal.naming.taxonomy)

Demangling goes through libstdc++'s own `abi::__cxa_demangle` (ctypes,
a few microseconds a symbol); where libstdc++ cannot be loaded, binutils'
c++filt (one process per batch of new symbols); where neither exists, the
raw symbol. Results are cached per symbol, a bounded number of them, so
the payload's hot path is a dictionary lookup.
"""
import ctypes
import ctypes.util
import re
import shutil
import subprocess
import threading
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, cast

from graphsignal.report import Reporter
from graphsignal.signals_model import Frame
from graphsignal.naming.taxonomy import category as _category

# Profiles whose frames are kernel symbols (the ROCm library names HIP
# kernels the same way).
KERNEL_PROFILES = frozenset(("cuda_kernels_nanoseconds", "rocm_kernels_nanoseconds"))

DISPLAY_LIMIT = 96  # characters of a display name made from a C++ name
PLAIN_LIMIT = 256  # characters of a plain (C) name, kept whole up to there
CACHE_SIZE = 16384  # symbols remembered (a real engine runs a few thousand kernels)
# libstdc++'s demangler keeps its parse on the C stack, sized by the input:
# longer (hostile or absurd) names go to c++filt, a separate process
CXA_MAX_LEN = 16384


# -- demangling ---------------------------------------------------------------------
class _CxaDemangle:
    """abi::__cxa_demangle through ctypes; `ok` is False where libstdc++
    cannot be loaded."""

    def __init__(self) -> None:
        self.fn: Any = None
        self.free: Any = None
        try:
            try:
                lib = ctypes.CDLL("libstdc++.so.6")
            except OSError:
                path = ctypes.util.find_library("stdc++")
                if not path:
                    return
                lib = ctypes.CDLL(path)
            fn = getattr(lib, "__cxa_demangle")  # not lib.__cxa_...: Python would mangle that name in a class
            free = ctypes.CDLL(None).free  # the C library the interpreter runs on
        except (OSError, AttributeError):
            return
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        free.restype = None
        free.argtypes = [ctypes.c_void_p]
        self.fn, self.free = fn, free

    @property
    def ok(self) -> bool:
        return self.fn is not None

    def __call__(self, symbol: str) -> Optional[str]:
        """The demangled text, or None when the symbol is not a valid
        mangled name."""
        status = ctypes.c_int(0)
        try:
            raw = symbol.encode("utf-8")
        except UnicodeError:
            return None
        if b"\0" in raw:
            return None
        p = self.fn(raw, None, None, ctypes.byref(status))
        if not p:
            return None
        try:
            return ctypes.string_at(p).decode("utf-8", "replace") if status.value == 0 else None
        finally:
            self.free(p)


_CXA: Optional[_CxaDemangle] = None
_CXA_LOCK = threading.Lock()


def _cxa() -> _CxaDemangle:
    global _CXA
    with _CXA_LOCK:
        if _CXA is None:
            _CXA = _CxaDemangle()
        return _CXA


class Demangler:
    """Demangles symbols: __cxa_demangle, then c++filt, then the raw name.

    `cxa`: use libstdc++ (False: c++filt alone, as on a host without it);
    `cxxfilt`: path of c++filt, "auto" to look it up on PATH, None for none.
    Not cached: Names caches what it describes."""

    def __init__(self, cxa: bool = True, cxxfilt: Optional[str] = "auto", timeout: float = 5.0) -> None:
        self.cxa: Optional[_CxaDemangle] = _cxa() if cxa else None
        if self.cxa is not None and not self.cxa.ok:
            self.cxa = None
        self.cxxfilt: Optional[str] = shutil.which("c++filt") if cxxfilt == "auto" else cxxfilt
        self.timeout = timeout

    def demangle_all(self, symbols: Iterable[Any]) -> List[Any]:
        """The demangled name of each symbol, or the symbol itself."""
        out = list(symbols)
        rest = []  # indices that libstdc++ did not answer
        for i, s in enumerate(out):
            if not isinstance(s, str) or not s.startswith("_Z"):
                continue
            d = self.cxa(s) if self.cxa is not None and len(s) <= CXA_MAX_LEN else None
            if d:
                out[i] = d
            elif self.cxa is None or len(s) > CXA_MAX_LEN:
                rest.append(i)
        if rest and self.cxxfilt:
            for i, d in zip(rest, self._cxxfilt([out[i] for i in rest])):
                if d:
                    out[i] = d
        return out

    def demangle(self, symbol: str) -> Any:
        return self.demangle_all([symbol])[0]

    def _cxxfilt(self, symbols: Sequence[str]) -> List[Optional[str]]:
        out: List[Optional[str]] = []
        # chunks keep each command line well under the kernel's argv limit
        chunk: List[str] = []
        size = 0
        for s in symbols:
            if chunk and size + len(s) > 100_000:
                out.extend(self._run(chunk))
                chunk, size = [], 0
            chunk.append(s)
            size += len(s) + 1
        if chunk:
            out.extend(self._run(chunk))
        return out

    def _run(self, chunk: List[str]) -> List[Optional[str]]:
        assert self.cxxfilt is not None  # the caller checks
        try:
            r = subprocess.run([self.cxxfilt, "--"] + chunk, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, timeout=self.timeout, check=False)
            lines = r.stdout.decode("utf-8", "replace").split("\n")
        except (OSError, subprocess.SubprocessError, ValueError):
            self.cxxfilt = None  # missing or broken: raw names from now on
            return [None] * len(chunk)
        if r.returncode != 0 or len(lines) < len(chunk):
            return [None] * len(chunk)
        # c++filt echoes what it cannot demangle
        return [ln if ln and ln != s else None for ln, s in zip(lines, chunk)]


# -- short names --------------------------------------------------------------------
_SCALARS = {
    "float", "double", "half", "int", "unsigned int", "long", "unsigned long", "long long",
    "unsigned long long", "short", "unsigned short", "char", "signed char", "unsigned char", "bool",
    "c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::complex<float>",
    "c10::complex<double>", "cutlass::half_t", "cutlass::bfloat16_t", "cutlass::float_e4m3_t",
    "cutlass::float_e5m2_t", "cutlass::tfloat32_t", "__half", "__nv_bfloat16", "__nv_fp8_e4m3", "__nv_fp8_e5m2",
    "at::Half", "at::BFloat16", "__int128", "unsigned __int128", "void", "float2", "half2", "__half2",
    "__nv_bfloat162", "uint3", "dim3", "char2", "int2", "int4", "float4",
}
# Templates whose own name says less than their argument: the argument is
# shown instead (ReduceOp<float, MeanOps<...>> -> MeanOps).
_WRAPPERS = {
    "ReduceOp", "func_wrapper_t", "AccumulateType", "OpaqueType", "AUnaryFunctor", "BUnaryFunctor",
    "BinaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_kernel_with_scalars",
    "opmath_gpu_kernel_with_scalars", "launch_legacy_kernel", "launch_vectorized_kernel",
    "launch_unrolled_kernel", "binary_op_kernel", "GemmKernel", "CollectiveMma",
}
# Template arguments that describe a layout, not an operation.
_SKIP_PREFIXES = ("std::", "cute::", "thrust::tuple", "cuda::std::", "cub::NullType", "cub::detail::identity",
                  "thrust::detail::normal_iterator", "thrust::device_ptr", "thrust::zip_iterator",
                  "at::detail::Array", "at::native::memory::")
_LITERAL = re.compile(r"^-?\d+[ul]*$|^-?\d+\.\d*(e[+-]?\d+)?f?$|^(true|false)$|^\(([\w: ]+)\)(-?\d+)[ul]*$")
# llama.cpp's ggml_type values (ggml.h), the quantization a ggml-cuda
# kernel is instantiated for: `mul_mat_vec_q<(ggml_type)12, ...>` is Q4_K
GGML_TYPES = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1", 10: "q2_K",
    11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs",
    19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64",
    28: "f64", 29: "iq1_m", 30: "bf16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4", 40: "nvfp4", 41: "q1_0",
    42: "q2_0",
}
# compiler-made namespaces: file-local (nvcc's _INTERNAL_<hash>_..., GCC's
# _GLOBAL__N_) and the versioned inline namespaces of CUB, Thrust, libcu++
_INTERNAL_NS = re.compile(r"_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+::|_GLOBAL__N__[0-9A-Za-z_]+?::"
                          r"|CUB_\d+_SM_[\d_]+::|THRUST_\d+_SM_[\d_]+_NS::|(?<=std::)__\d+::")
# nested names that say less than what they are nested in
_NESTED = {"GemmKernel", "Kernel", "type", "Params", "functor", "Functor", "op", "impl"}
# CUB's tuning policies and similar layout-only arguments
_POLICY = re.compile(r"^(policy\d*|policy_hub(_t)?|policy_\d+_t|\w*policy(hub)?)$", re.I)
_SKIP_SUFFIXES = ("TensorListMetadata", "Metadata")


# Nesting is tracked only at these characters, so scanning a name of a
# few thousand characters (CUTLASS 3) costs a few hundred regex steps.
_TOKENS = re.compile(r"[<({]|[>)}]|::|,| ")
_OPEN, _CLOSE = "<({", ">)}"


def _top_tokens(s: str) -> "Iterator[re.Match[str]]":
    """The tokens of s at nesting depth 0 (outside <>, () and {}; a
    bracket that opens there is one)."""
    depth = 0
    for m in _TOKENS.finditer(s):
        c = m.group()
        if depth == 0:
            yield m
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1


def _find_top(s: str, token: str) -> int:
    """Index of `token` (one of `<`, `(`, `::`, `,`, ` ` or `::{lambda`)
    at nesting depth 0 (outside <>, () and {}), or -1."""
    lam = token == "::{lambda"
    want = "::" if lam else token
    for m in _top_tokens(s):
        if m.group() == want and (not lam or s.startswith(token, m.start())):
            return m.start()
    return -1


def _split_top(s: str, sep: str = ",") -> List[str]:
    """Splits s at top-level `sep` (`,` or `::`, outside <>, () and {})."""
    out, last = [], 0
    for m in _top_tokens(s):
        if m.group() == sep:
            out.append(s[last:m.start()].strip())
            last = m.end()
    out.append(s[last:].strip())
    return [x for x in out if x]


def _clean(d: str) -> str:
    d = d.replace("(anonymous namespace)::", "")
    return _INTERNAL_NS.sub("", d)


def split_function(d: str) -> Tuple[str, Optional[str]]:
    """'ret ns::name<args>(params) const' -> ('ns::name', 'args' or None)."""
    d = _clean(d)
    # `operator()` and `operator<` hold parentheses and brackets of their own
    head = d
    p = _find_top(d.replace("operator()", "operator__"), "(")
    if p > 0:
        head = d[:p]
    # drop a return type: the last top-level space separates it
    cut = -1
    for m in _top_tokens(head):
        if m.group() == " ":
            cut = m.start()
    if cut >= 0:
        head = head[cut + 1:]
    lt = _find_top(head, "<")
    if lt < 0:
        return head, None
    return head[:lt], head[lt + 1:head.rfind(">")]


def _components(qname: str) -> List[str]:
    return _split_top(qname, "::")


def _func_name(qname: str) -> Optional[str]:
    """The name a qualified name is known by: its last component, or for
    a call operator or a lambda, the class or function that owns it."""
    parts = _components(qname)
    while parts and (parts[-1].startswith("operator()") or parts[-1].startswith("{lambda")):
        parts.pop()
    if not parts:
        return None
    last = parts[-1]
    lt = _find_top(last, "<")
    return last[:lt] if lt > 0 else last


def _literal(arg: str) -> Tuple[bool, Optional[str]]:
    """(is a literal, its telling name or None): `(ggml_type)12` is q4_K."""
    m = _LITERAL.match(arg)
    if not m:
        return False, None
    if m.group(3) is not None and m.group(3).strip() == "ggml_type":
        return True, GGML_TYPES.get(int(m.group(4)))
    return True, None


def _arg_name(arg: str, depth: int = 0) -> Optional[str]:
    """A template argument reduced to the word that says what it is, or
    None when it says nothing (a number, a pointer, a layout, a policy)."""
    arg = _clean(arg.strip())
    lit, named = _literal(arg)
    if lit:
        return named
    if arg.startswith("&"):
        # a function passed by address: its name, or what a launcher of it names
        inner = arg[1:].strip()
        if inner.startswith("(") and inner.endswith(")"):
            inner = inner[1:-1]
        base, targs = split_function(inner)
        name = _func_name(base)
        if name in _WRAPPERS and targs and depth < 4:
            return _best_arg(targs, depth + 1, scalars=False) or name
        return name
    lam = _find_top(arg, "::{lambda")
    if lam > 0:
        # a lambda defined in a function: the function names the operation,
        # unless it is a launcher whose own argument does
        base, targs = split_function(arg[:lam])
        name = _func_name(base)
        if name in _WRAPPERS and targs and depth < 4:
            return _best_arg(targs, depth + 1, scalars=False) or name
        return name
    if arg.startswith(_SKIP_PREFIXES) or arg.endswith(("*", "&", "const")):
        return None
    parts = _components(arg)
    # a nested type says less than the template it lives in:
    # cutlass_3x_gemm_sm90_fp8<...>::GemmKernel, __uninitialized_fill::functor<...>
    while len(parts) > 1 and _bare(parts[-1]) in _NESTED:
        parts.pop()
    if not parts:
        return None
    last = parts[-1]
    name = _bare(last)
    if _POLICY.match(name) or name.endswith(_SKIP_SUFFIXES):
        return None
    lt = _find_top(last, "<")
    if name in _WRAPPERS and lt > 0 and depth < 4:
        best = _best_arg(last[lt + 1:last.rfind(">")], depth + 1, scalars=False)
        if best:
            return best
    return name.lstrip("_") or None


def _bare(component: str) -> str:
    """A name component without its template arguments."""
    lt = _find_top(component, "<")
    return component[:lt] if lt > 0 else component


def _best_arg(targs: str, depth: int = 0, scalars: bool = True) -> Optional[str]:
    """The most telling template argument: the first that is neither a
    literal nor a scalar type; else (at the top) the first scalar type,
    since a dtype is still worth seeing."""
    first_scalar = None
    for a in _split_top(targs):
        if _clean(a) in _SCALARS:
            if first_scalar is None:
                first_scalar = _components(_clean(a))[-1]
            continue
        name = _arg_name(a, depth)
        if name:
            return name
    return first_scalar if scalars else None


def _clip(name: str, limit: int) -> str:
    return name if len(name) <= limit else name[:limit - 1] + "\u2026"


def short_name(demangled: Optional[str], limit: int = DISPLAY_LIMIT) -> str:
    """A readable name for a demangled kernel name (see the module doc):
    at most `limit` characters; a plain C name is kept whole (up to
    PLAIN_LIMIT), a mangled one that could not be read is cut at `limit`."""
    d = (demangled or "").strip()
    if d.startswith("_Z"):
        return _clip(d, limit)
    if "(" in d or "<" in d or "::" in d:
        base, targs = split_function(d)
        name = _func_name(base) or d
        if targs:
            arg = _best_arg(targs)
            if arg:
                name = "%s<%s>" % (name, arg)
        return _clip(name, limit)
    return _clip(d, max(limit, PLAIN_LIMIT))


# -- described symbols --------------------------------------------------------------
# log lines only (names are made on the request path, where no store is at hand), 100 at most
_say = Reporter(max_keys=100)


def _say_once(msg: str) -> None:
    _say.once(msg, msg, entry=False)


class Name(NamedTuple):
    display_name: str
    category: str
    demangled: str


class Names:
    """Describes kernel symbols, cached per symbol (at most `size`, the
    oldest forgotten first); safe to share between threads."""

    def __init__(self, demangler: Optional[Demangler] = None, size: int = CACHE_SIZE) -> None:
        self.demangler = demangler
        self.size = size
        self.cache: Dict[str, Name] = {}  # insertion-ordered: the first key is the oldest
        self.lock = threading.Lock()

    def describe_all(self, symbols: Iterable[str]) -> "List[Name]":
        """[Name] for each symbol."""
        symbols = list(symbols)
        get = self.cache.get
        out: List[Optional[Name]] = [get(s) for s in symbols]  # dict reads need no lock under the GIL
        missing = [i for i, n in enumerate(out) if n is None]
        if missing:
            if self.demangler is None:
                self.demangler = Demangler()
            new = list(dict.fromkeys(symbols[i] for i in missing))
            made = {}
            for s, d in zip(new, self.demangler.demangle_all(new)):
                d = d if isinstance(d, str) else str(d)
                try:
                    made[s] = Name(short_name(d), _category(d), d)
                except (ValueError, IndexError, RecursionError) as e:
                    # a name this code cannot read costs its display name, never the payload
                    _say_once("cannot shorten kernel name %r: %s: %s" % (s[:200], type(e).__name__, e))
                    made[s] = Name(_clip(s, DISPLAY_LIMIT), "other", d)
            with self.lock:
                for s, n in made.items():
                    self.cache[s] = n
                while len(self.cache) > self.size:
                    del self.cache[next(iter(self.cache))]
            for i in missing:
                out[i] = made[symbols[i]]
        return cast(List[Name], out)

    def describe(self, symbol: str) -> "Name":
        return self.describe_all([symbol])[0]


NAMES = Names()  # the process's cache: the payload and graphsignal-top share it


def describe(symbol: str) -> "Name":
    """Name(display_name, category, demangled) of one kernel symbol."""
    return NAMES.describe(symbol)


def annotate(metric: Optional[str], frames: List[Frame]) -> List[Frame]:
    """Adds `display_name` and `category` to the frame dicts of a kernel
    profile (in place; other profiles are left alone). Returns frames."""
    if metric not in KERNEL_PROFILES or not frames:
        return frames
    get = NAMES.cache.get
    for f in frames:
        n = get(f["name"])
        if n is None:
            break
        f["display_name"], f["category"] = n[0], n[1]  # a hit: the whole payload's usual case
    else:
        return frames
    for f, n in zip(frames, NAMES.describe_all([f["name"] for f in frames])):
        f["display_name"], f["category"] = n[0], n[1]
    return frames
