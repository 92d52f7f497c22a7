"""Builds graphsignal's native libraries (called by setup.py, by tests, or
by hand: python csrc/cupti_build.py OUT_DIR):

- libgraphsignal_probes.so: probe.h's functions as plain C exports, for
  graphsignal.probes under a Python that cannot load the cffi helper
  (csrc/probe_lib.c; needs only a C compiler);
- libgraphsignal_cupti_cu<major>.so: the CUPTI injection library, once per
  CUDA major (12 and 13) whose headers can be found;
- libgraphsignal_interpose.so: the CUDA driver interposer of
  --cuda-trace light (csrc/interpose; needs only a C compiler and libc, no
  CUDA headers: it declares the few driver types it reads; x86-64 only);
- build-report.json: what became of each, which graphsignal-run --check
  and its hints read.

Each variant is compiled against the oldest minor of its major that is
found, so it runs with every libcupti of that major (CUPTI only appends
fields to its records within a major; csrc/cupti/records.h pins the offsets
read). libcupti is linked dynamically by soname, without an rpath:
graphsignal-run makes the workload's own libcupti loadable
(graphsignal/launch/injection.py).

Where headers are looked for (graphsignal/launch/cuda_discovery.py,
find_header_sets; the lowest minor wins per major, the first found a tie):
the toolkits ($CUDA_HOME, $CUDA_PATH, $CUDA_ROOT, /usr/local/cuda-*,
/usr/local/cuda, /opt/cuda, the nvcc on PATH, /usr), then the PyPI wheels
in any site-packages this interpreter knows about: nvidia-cuda-cupti[-cu12]
(cupti.h, libcupti) and nvidia-cuda-runtime[-cu12] (cuda.h).

pyproject.toml names the oldest wheels of each major as build
requirements, so pip's and uv's isolated builds always find both majors,
toolkit or not.

Linking: libstdc++ dynamically (every CUDA process has one loaded; a
static copy would bring the build machine's glibc symbols along), held to
what gcc 4.8's libstdc++ exports, and glibc held at 2.17 by
csrc/compat/glibc_compat.h: the manylinux2014 floor, whatever machine
builds it. No rpath, and no path of the build machine in the binary
(-ffile-prefix-map).

A missing compiler, header set or libcupti skips that variant with one
line; it never fails the install, with one exception: the project's own
builds set GRAPHSIGNAL_WERROR=1 (.ci/run), and then every warning is an
error and a library that does not compile fails the build (strict()).
Users' builds never do: a warning that a newer compiler adds must not cost
an install its CUPTI library.
"""
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(HERE, "cupti")
INCLUDE = os.path.join(ROOT, "include")
COMPAT = os.path.join(SRC, "compat")  # crt/host_defines.h for wheel-only header sets
DISCOVERY = os.path.join(ROOT, "graphsignal", "launch", "cuda_discovery.py")


def _load_discovery():
    """graphsignal/launch/cuda_discovery.py by its path: importing it as
    graphsignal.launch.* would run graphsignal/__init__ (and need what the
    package needs, which a build environment may lack)."""
    spec = importlib.util.spec_from_file_location("graphsignal_build_cuda_discovery", DISCOVERY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


discovery = _load_discovery()
SUPPORTED_MAJORS = discovery.SUPPORTED_MAJORS
HeaderSet = discovery.HeaderSet  # scripts/bench_percall.py builds a baseline tree's library with its own
find_header_sets = discovery.find_header_sets
pick = discovery.pick
header_wheels = discovery.header_wheels

COMPAT_DIR = os.path.join(HERE, "compat")  # glibc / libstdc++ floor (see the module docstring)
GLIBC_COMPAT = os.path.join(COMPAT_DIR, "glibc_compat.h")


# Every csrc/cupti/*.cpp: a new source file is part of the library without
# touching this script (test drivers live in tests/cupti/).
LIB_SOURCES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SRC, "*.cpp")))

CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
            "-fno-exceptions", "-fno-rtti", "-Wall", "-Wextra"]
# The old std::string ABI and no sized delete keep the libstdc++ symbols
# needed at gcc 4.8's (GLIBCXX_3.4.19, CXXABI_1.3.7); libstdcxx_compat.cpp
# covers the one newer helper that gcc 11+ headers call. Tried first; a
# toolchain that refuses any of it gets the plain build.
COMPAT_FLAGS = ["-include", GLIBC_COMPAT, "-D_GLIBCXX_USE_CXX11_ABI=0", "-fno-sized-deallocation"]
COMPAT_SOURCES = [os.path.join(COMPAT_DIR, "libstdcxx_compat.cpp")]
RUNTIME = ["-static-libgcc", "-Wl,--exclude-libs,ALL"]

WERROR_ENV = "GRAPHSIGNAL_WERROR"


class BuildError(RuntimeError):
    """A native library did not compile in a strict build."""


def strict(environ=None):
    """Whether this is one of the project's own builds (GRAPHSIGNAL_WERROR=1):
    warnings are errors, the compat-less retry is not taken (the floor is
    part of what is tested), and a failed compile raises BuildError."""
    environ = os.environ if environ is None else environ
    return environ.get(WERROR_ENV, "") not in ("", "0")


PROBE_LIB = "libgraphsignal_probes.so"
PROBE_SOURCE = os.path.join(HERE, "probe_lib.c")
CFLAGS = ["-std=gnu99", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-ffile-prefix-map=%s=." % ROOT]
REPORT = "build-report.json"


def library_name(major):
    return "libgraphsignal_cupti_cu%d.so" % major


# -- compiling -----------------------------------------------------------------
def _first_tool(names):
    for c in names:
        if c and shutil.which(c.split()[0]):
            return c.split()
    return None


def compiler(environ=None):
    """The C++ compiler: $CXX, else the first of g++, c++, clang++ on PATH."""
    environ = os.environ if environ is None else environ
    return _first_tool((environ.get("CXX"), "g++", "c++", "clang++"))


def c_compiler(environ=None):
    """The C compiler: $CC, else the first of gcc, cc, clang on PATH."""
    environ = os.environ if environ is None else environ
    return _first_tool((environ.get("CC"), "gcc", "cc", "clang"))


def _prefix_maps(hs):
    """-ffile-prefix-map flags: __FILE__ and any debug info name files
    relative to the project or as cuda/..., never the build machine's path."""
    maps = [(ROOT + os.sep, ""), (hs.cupti_include, "cuda/include"), (hs.cuda_include, "cuda/include")]
    return ["-ffile-prefix-map=%s=%s" % (src, dst) for src, dst in maps]


def _system_lib(cxx, name):
    """The path of a system library as the compiler would link it, or None."""
    try:
        p = subprocess.run(cxx + ["-print-file-name=" + name], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = p.stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _compat_link(cxx):
    """libdl and libpthread as NEEDED entries: on a glibc older than 2.34,
    the dlopen/pthread_* that glibc_compat.h binds to live there."""
    libs = [p for p in (_system_lib(cxx, "libdl.so.2"), _system_lib(cxx, "libpthread.so.0")) if p]
    return ["-Wl,--push-state,--no-as-needed"] + libs + ["-Wl,--pop-state"] if libs else []


def _build_first(attempts, out, log, timeout):
    """Runs the compiler commands of attempts (argv without -o) in turn
    until one builds out; a later one is the fallback of a toolchain that
    refuses the earlier one's compat flags (none in a strict build).
    Returns whether out was built; timeout is in seconds per command."""
    werror = strict()
    work = tempfile.mkdtemp(prefix="graphsignal-native-build-")
    tmp = os.path.join(work, os.path.basename(out))
    errors = ""
    try:
        for argv in attempts[:1] if werror else attempts:
            try:
                p = subprocess.run(argv + ["-o", tmp], capture_output=True, text=True, timeout=timeout, cwd=work)
            except (OSError, subprocess.TimeoutExpired) as e:
                errors = str(e)
                break
            if p.returncode == 0:
                # atomic: a running workload may have the previous build mapped
                staged = os.path.join(os.path.dirname(out), ".tmp-%d-%s" % (os.getpid(), os.path.basename(out)))
                shutil.copyfile(tmp, staged)
                os.chmod(staged, 0o755)
                os.replace(staged, out)
                return True
            errors = p.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if werror:  # the first diagnostics: the warning that became an error, not gcc's summary
        raise BuildError("compiling %s failed (%s=1):\n%s" % (os.path.basename(out), WERROR_ENV,
                                                               "\n".join(errors.strip().splitlines()[:30])))
    log("compiling %s failed:\n%s" % (os.path.basename(out), "\n".join(errors.strip().splitlines()[-8:])))
    return False


def _werror():
    return ["-Werror"] if strict() else []


def find_nvtx_include(hs, environ=None):
    """(folder holding nvtx3/nvToolsExt.h, where it came from) or (None,
    None). NVTX v3 is header-only and its tool interface is the same for
    every CUDA major, so any copy serves: hs's own include folders first,
    then every toolkit's, then the nvidia-nvtx wheel's (nvidia/*/include,
    a build requirement in pyproject.toml). "Where" names the wheel that
    installed the header when a wheel did."""
    environ = os.environ if environ is None else environ
    cands = [(hs.cuda_include, hs.source), (hs.cupti_include, hs.source)]
    for root in discovery.toolkit_roots(environ, "", [discovery.nvcc_root(environ)]):
        cands += [(os.path.join(root, d), "the toolkit at %s" % root) for d in discovery.TOOLKIT_INCLUDE_DIRS]
    sites = discovery.site_dirs(environ)
    for sp in sites:
        wheel_dirs = sorted(glob.glob(os.path.join(sp, "nvidia", "*", "include")))
        cands += [(d, "nvidia wheels in %s" % sp) for d in wheel_dirs]
    for d, source in cands:
        header = os.path.join(d, "nvtx3", "nvToolsExt.h")
        if not os.path.exists(header):
            continue
        for sp in sites:
            if d.startswith(sp.rstrip(os.sep) + os.sep):
                source = discovery.wheel_owner(sp, header) or source
                break
        return d, source
    return None, None


def _compile(cxx, sources, hs, out, extra_link, log):
    nvtx_inc, _ = find_nvtx_include(hs)
    # after the CUDA headers: the folder may hold another major's cuda.h (the cu13 wheels share one folder)
    nvtx = ["-idirafter", nvtx_inc, "-ffile-prefix-map=%s=cuda/include" % nvtx_inc] if nvtx_inc else []
    base = cxx + CXXFLAGS + _werror() + _prefix_maps(hs) + [
        "-I", INCLUDE, "-I", SRC, "-I", hs.cupti_include, "-I", hs.cuda_include, "-idirafter", COMPAT] + nvtx
    srcs = [os.path.join(SRC, s) for s in sources]
    tail = RUNTIME + ["-ldl", "-pthread"]
    return _build_first([base + COMPAT_FLAGS + srcs + COMPAT_SOURCES + extra_link + _compat_link(cxx) + tail,
                         base + srcs + extra_link + tail], out, log, timeout=300)


def build_probe_lib(out_dir, log=print):
    """libgraphsignal_probes.so into out_dir; returns its path, or None
    (said through log)."""
    cc = c_compiler()
    if not cc:
        log("probe library for Python without cffi: skipped (no C compiler; set CC or install gcc)")
        return None
    out = os.path.join(out_dir, PROBE_LIB)
    rest = CFLAGS + _werror() + ["-I", INCLUDE, PROBE_SOURCE, "-pthread"]
    if _build_first([cc + ["-include", GLIBC_COMPAT] + rest, cc + rest], out, log, timeout=120):
        return out
    log("probe library for Python without cffi: build failed (see above)")
    return None


INTERPOSE_LIB = "libgraphsignal_interpose.so"
INTERPOSE_DIR = os.path.join(HERE, "interpose")


def build_interpose_lib(out_dir, log=print):
    """libgraphsignal_interpose.so into out_dir; returns its path, or None
    (said through log). GRAPHSIGNAL_DEFINES_DLSYM keeps glibc_compat.h from
    binding the library's own dlsym to a glibc version."""
    cc = c_compiler()
    if not cc:
        log("CUDA interposer (--cuda-trace light): skipped (no C compiler; set CC or install gcc)")
        return None
    if os.uname().machine not in ("x86_64", "amd64"):
        log("CUDA interposer (--cuda-trace light): skipped (its dlsym trampoline is x86-64 only)")
        return None
    out = os.path.join(out_dir, INTERPOSE_LIB)
    sources = sorted(glob.glob(os.path.join(INTERPOSE_DIR, "*.c")))
    flags = ["-std=gnu11", "-D_GNU_SOURCE", "-DGRAPHSIGNAL_DEFINES_DLSYM"] + [
        f for f in CFLAGS if f != "-std=gnu99"] + _werror()
    rest = flags + ["-I", INTERPOSE_DIR, "-I", INCLUDE] + sources + _compat_link(cc) + ["-pthread"]
    if _build_first([cc + ["-include", GLIBC_COMPAT] + rest, cc + rest], out, log, timeout=120):
        return out
    log("CUDA interposer (--cuda-trace light): build failed (see above)")
    return None


def _sources_mtime(sources):
    paths = [os.path.join(SRC, s) for s in sources] + glob.glob(os.path.join(SRC, "*.h"))
    paths += [os.path.join(INCLUDE, "graphsignal", "probe.h"), os.path.join(SRC, "exports.map"), __file__]
    paths += glob.glob(os.path.join(COMPAT_DIR, "*"))
    return max(os.path.getmtime(p) for p in paths if os.path.exists(p))


def _up_to_date(out, sources, stamp):
    info = out + ".build-info"
    if not (os.path.exists(out) and os.path.exists(info)):
        return False
    if os.path.getmtime(out) < _sources_mtime(sources):
        return False
    return discovery.read_text(info) == stamp


def build_info(hs):
    """What the .build-info beside a library says: portable facts only (no
    path of the build machine's environment but a toolkit's). "nvtx": where
    the NVTX headers came from, None when the library has no NVTX entry
    point (graphsignal-run then leaves NVTX_INJECTION64_PATH alone)."""
    return json.dumps({"major": hs.major, "minor": hs.minor, "headers": hs.source, "nvtx": find_nvtx_include(hs)[1]},
                      sort_keys=True)


def build_library(sources, hs, out, extra_link=(), log=print, cxx=None, force=False):
    """Compiles sources (in csrc/cupti/, or absolute paths) against the
    header set hs into out, unless out and its .build-info are current.
    Returns out, or None (said through log)."""
    cxx = cxx or compiler()
    stamp = build_info(hs)
    if not force and _up_to_date(out, sources, stamp):
        return out
    if not _compile(cxx, sources, hs, out, list(extra_link), log):
        return None
    with open(out + ".build-info", "w") as f:
        f.write(stamp)
    return out


def build_variant(hs, out_dir, log=print, cxx=None, force=False):
    """The injection library for hs.major into out_dir, linked against
    hs.libcupti by soname; returns its path, or None."""
    link = [hs.libcupti, "-Wl,--version-script=" + os.path.join(SRC, "exports.map"), "-Wl,-z,defs"]
    return build_library(LIB_SOURCES, hs, os.path.join(out_dir, library_name(hs.major)), link, log, cxx, force)


def build_hint(major):
    """What to do when a major's headers were not found at build time."""
    wheels = " ".join("'%s==%d.*'" % (w, major) for w in header_wheels(major))
    return ("pip and uv bring the header wheels themselves when they build in isolation, the default; a build "
            "with --no-build-isolation needs them installed first: pip install %s" % wheels)


def build_cupti_variants(out_dir, log=print, status=None):
    """Builds every variant it can; returns the paths built (or current).
    status: a dict that gets {major: one line on what became of it}."""
    status = {} if status is None else status
    os.makedirs(out_dir, exist_ok=True)
    cxx = compiler()
    if not cxx:
        log("CUPTI injection library: skipped (no C++ compiler; set CXX or install g++); "
            "graphsignal-run will run workloads without GPU activity profiles")
        status.update({m: "skipped: no C++ compiler (set CXX or install g++)" for m in SUPPORTED_MAJORS})
        return []
    sets = find_header_sets()
    built = []
    for major in SUPPORTED_MAJORS:
        hs = pick(sets, major)
        if hs is None:
            headers_only = pick(sets, major, need_lib=False)
            why = ("headers at %s but no libcupti.so.%d beside them" % (headers_only.cupti_include, major)
                   if headers_only else "no CUDA %d CUPTI headers" % major)
            log("CUPTI injection library for CUDA %d: skipped (%s; %s)" % (major, why, build_hint(major)))
            status[major] = "skipped: %s; %s" % (why, build_hint(major))
            continue
        path = build_variant(hs, out_dir, log, cxx)
        if path:
            log("CUPTI injection library for CUDA %d.%d (headers: %s): %s" % (hs.major, hs.minor, hs.source, path))
            if not find_nvtx_include(hs)[0]:
                log("  without NVTX ranges: no nvtx3/nvToolsExt.h in the toolkit or the nvidia-nvtx wheel")
            status[major] = "built with the headers of %s" % hs.source
            built.append(path)
        else:
            log("CUPTI injection library for CUDA %d: skipped (build failed, see above)" % major)
            status[major] = "skipped: compiling with the headers of %s failed (the install's log has the error)" \
                % hs.source
    return built


def build_all(out_dir, log=print):
    """Builds every library it can into out_dir, and out_dir/build-report.json.
    Returns the paths built."""
    os.makedirs(out_dir, exist_ok=True)
    probe_lib = build_probe_lib(out_dir, log)
    interpose_lib = build_interpose_lib(out_dir, log)
    status = {}
    built = [p for p in (probe_lib, interpose_lib) if p] + build_cupti_variants(out_dir, log, status)
    with open(os.path.join(out_dir, REPORT), "w") as f:
        json.dump({"probes": "built" if probe_lib else "skipped",
                   "interpose": "built" if interpose_lib else "skipped",
                   "cupti": {str(k): v for k, v in status.items()}},
                  f, indent=1, sort_keys=True)
    return built


if __name__ == "__main__":
    for p in build_all(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "graphsignal", "lib")):
        print(p)
