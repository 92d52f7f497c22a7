"""Builds graphsignal's native libraries (called by setup.py, by tests, or
by hand: python csrc/cupti_build.py OUT_DIR):

- libgraphsignal_probes.so: probe.h's functions as plain C exports, for
  graphsignal.probes under a Python that cannot load the cffi helper
  (csrc/probe_lib.c; needs only a C compiler);
- libgraphsignal_cupti_cu<major>.so: the CUPTI injection library, once per
  CUDA major (12 and 13) whose headers can be found;
- build-report.json: what became of each, which graphsignal-run --check
  and its hints read.

Each variant is compiled against the oldest minor of its major that is
found, so it runs with every libcupti of that major (CUPTI only appends
fields to its records within a major; csrc/cupti/records.h pins the offsets
read). libcupti is linked dynamically by soname, without an rpath:
graphsignal-run makes the workload's own libcupti loadable
(graphsignal/native.py).

Where headers are looked for, in this order (the lowest minor wins per
major, the first found wins a tie):
  1. $CUDA_HOME, $CUDA_PATH, $CUDA_ROOT
  2. /usr/local/cuda-<major>.<minor>, /usr/local/cuda, /opt/cuda, the nvcc
     on PATH, /usr
  3. the PyPI wheels in any site-packages this interpreter knows about:
     nvidia-cuda-cupti[-cu12] (cupti.h, libcupti) and
     nvidia-cuda-runtime[-cu12] (cuda.h), under nvidia/*/include and lib.

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
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(HERE, "cupti")
INCLUDE = os.path.join(ROOT, "include")
COMPAT = os.path.join(SRC, "compat")  # crt/host_defines.h for wheel-only header sets
SUPPORTED_MAJORS = (12, 13)

COMPAT_DIR = os.path.join(HERE, "compat")  # glibc / libstdc++ floor (see the module docstring)
GLIBC_COMPAT = os.path.join(COMPAT_DIR, "glibc_compat.h")


def _lib_sources():
    """Every csrc/cupti/*.cpp but the test drivers (test_*.cpp): a new
    source file is part of the library without touching this script."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(SRC, "*.cpp"))
                  if not os.path.basename(p).startswith("test_"))


LIB_SOURCES = _lib_sources()
SHIM_SOURCES = ["log.cpp", "name_table.cpp", "translator.cpp", "device_uuids.cpp", "devices.cpp", "driver_api.cpp",
                "host_memory.cpp", "copy_estimator.cpp", "graph_registry.cpp", "call_tables.cpp",
                "test_shim.cpp"]

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


HeaderSet = namedtuple("HeaderSet", "major minor cupti_include cuda_include libcupti origin source")


PROBE_LIB = "libgraphsignal_probes.so"
PROBE_SOURCE = os.path.join(HERE, "probe_lib.c")
CFLAGS = ["-std=gnu99", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-ffile-prefix-map=%s=." % ROOT]
REPORT = "build-report.json"


def library_name(major):
    return "libgraphsignal_cupti_cu%d.so" % major


# -- discovery -----------------------------------------------------------------
def _read(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cuda_version(cuda_include):
    """(major, minor) from cuda.h's CUDA_VERSION, or None."""
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", _read(os.path.join(cuda_include, "cuda.h")))
    if not m:
        return None
    v = int(m.group(1))
    return v // 1000, (v % 1000) // 10


def cupti_major(cupti_include):
    """The CUDA major of a CUPTI header set: 13.x writes CUPTI_API_VERSION as
    xxyyzz; 12.x used small integers (18..28)."""
    m = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", _read(os.path.join(cupti_include, "cupti_version.h")))
    if not m:
        return None
    v = int(m.group(1))
    if v >= 10000:
        return v // 10000
    return 12 if v >= 18 else 11


def _libcupti(dirs, major):
    for d in dirs:
        exact = sorted(glob.glob(os.path.join(d, "libcupti.so.%d*" % major)))
        if exact:
            return exact[0]
        plain = os.path.join(d, "libcupti.so")
        if os.path.exists(plain):
            real = os.path.basename(os.path.realpath(plain))
            if real.startswith("libcupti.so.%d" % major):
                return plain
    return None


def _toolkit_roots(environ):
    roots = [environ.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    roots += sorted(glob.glob("/usr/local/cuda-*"))
    roots += ["/usr/local/cuda", "/opt/cuda"]
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots.append("/usr")
    return _existing_unique(roots)


def _existing_unique(dirs):
    """The directories that exist, in order, each real path once."""
    seen, out = set(), []
    for d in dirs:
        if d and os.path.isdir(d) and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            out.append(d)
    return out


def _from_toolkit(root):
    incs = [os.path.join(root, "include"), os.path.join(root, "targets", "x86_64-linux", "include")]
    cuda_inc = next((d for d in incs if os.path.exists(os.path.join(d, "cuda.h"))), None)
    cupti_inc = next((d for d in incs + [os.path.join(root, "extras", "CUPTI", "include")]
                      if os.path.exists(os.path.join(d, "cupti.h"))), None)
    if not cuda_inc or not cupti_inc:
        return None
    ver = cuda_version(cuda_inc)
    if not ver or cupti_major(cupti_inc) != ver[0]:
        return None
    libdirs = [os.path.join(root, p) for p in ("lib64", "lib", "extras/CUPTI/lib64", "targets/x86_64-linux/lib")]
    if root == "/usr":
        libdirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
    return HeaderSet(ver[0], ver[1], cupti_inc, cuda_inc, _libcupti(libdirs, ver[0]), root,
                     "CUDA %d.%d toolkit at %s" % (ver[0], ver[1], root))


def site_dirs(environ=None):
    """Every site-packages this interpreter can name, including the target
    environment's when pip builds in an isolated environment (its
    sys.prefix still points at the target)."""
    environ = os.environ if environ is None else environ
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    for key in ("purelib", "platlib"):
        try:
            dirs.append(sysconfig.get_paths()[key])
        except KeyError:
            pass
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if environ.get(var):
            dirs += glob.glob(os.path.join(environ[var], "lib", "python3*", "site-packages"))
    return _existing_unique(dirs)


def _from_wheels(sp):
    """Header sets from the nvidia-* wheels installed in one site-packages."""
    found = []
    cuda_incs = [os.path.dirname(p) for p in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "include", "cuda.h")))]
    for cupti_h in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "include", "cupti.h"))):
        cupti_inc = os.path.dirname(cupti_h)
        major = cupti_major(cupti_inc)
        for cuda_inc in cuda_incs:
            ver = cuda_version(cuda_inc)
            if ver and ver[0] == major:
                pkg = os.path.dirname(cupti_inc)
                owners = [_wheel_owner(sp, os.path.join(d, h)) for d, h in ((cupti_inc, "cupti.h"),
                                                                          (cuda_inc, "cuda.h"))]
                source = ", ".join(o for o in owners if o) or "nvidia wheels in %s" % sp
                found.append(HeaderSet(major, ver[1], cupti_inc, cuda_inc,
                                       _libcupti([os.path.join(pkg, "lib"), os.path.join(pkg, "lib64")], major), sp,
                                       source))
                break
    return found


def _wheel_owner(sp, path):
    """'name version' of the installed distribution in site-packages sp
    whose RECORD lists path, or None."""
    rel = os.path.relpath(path, sp).replace(os.sep, "/")
    for info in sorted(glob.glob(os.path.join(sp, "nvidia_*.dist-info"))):
        if not any(line.split(",", 1)[0] == rel for line in _read(os.path.join(info, "RECORD")).splitlines()):
            continue
        meta = _read(os.path.join(info, "METADATA"))
        name = re.search(r"^Name:\s*(\S+)", meta, re.M)
        version = re.search(r"^Version:\s*(\S+)", meta, re.M)
        if name and version:
            return "%s %s" % (name.group(1), version.group(1))
    return None


def find_header_sets(environ=None):
    """All usable header sets, in search order."""
    environ = os.environ if environ is None else environ
    sets = []
    for root in _toolkit_roots(environ):
        hs = _from_toolkit(root)
        if hs:
            sets.append(hs)
    for sp in site_dirs(environ):
        sets.extend(_from_wheels(sp))
    return sets


def pick(sets, major, need_lib=True):
    """The oldest minor of `major` (first found on a tie)."""
    cands = [s for s in sets if s.major == major and (s.libcupti or not need_lib)]
    if not cands:
        return None
    return min(cands, key=lambda s: s.minor)  # min() keeps the first of equal keys


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


def _link(attempts, out, log, timeout):
    """Runs each command of attempts (argv without -o) until one builds
    out; a later one is the fallback of a toolchain that refuses the
    earlier one's compat flags, none in a strict build. Returns whether
    out was built."""
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


def _compile(cxx, sources, hs, out, extra_link, log):
    base = cxx + CXXFLAGS + _werror() + _prefix_maps(hs) + [
        "-I", INCLUDE, "-I", SRC, "-I", hs.cupti_include, "-I", hs.cuda_include, "-idirafter", COMPAT]
    srcs = [os.path.join(SRC, s) for s in sources]
    tail = RUNTIME + ["-ldl", "-pthread"]
    return _link([base + COMPAT_FLAGS + srcs + COMPAT_SOURCES + extra_link + _compat_link(cxx) + tail,
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
    if _link([cc + ["-include", GLIBC_COMPAT] + rest, cc + rest], out, log, timeout=120):
        return out
    log("probe library for Python without cffi: build failed (see above)")
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
    return _read(info) == stamp


def build_info(hs):
    """What the .build-info beside a library says: portable facts only (no
    path of the build machine's environment but a toolkit's)."""
    return json.dumps({"major": hs.major, "minor": hs.minor, "headers": hs.source}, sort_keys=True)


def build_variant(hs, out_dir, log=print, cxx=None, force=False):
    cxx = cxx or compiler()
    out = os.path.join(out_dir, library_name(hs.major))
    stamp = build_info(hs)
    if not force and _up_to_date(out, LIB_SOURCES, stamp):
        return out
    link = [hs.libcupti, "-Wl,--version-script=" + os.path.join(SRC, "exports.map"), "-Wl,-z,defs"]
    if not _compile(cxx, LIB_SOURCES, hs, out, link, log):
        return None
    with open(out + ".build-info", "w") as f:
        f.write(stamp)
    return out


def header_wheels(major):
    """The PyPI wheels that carry a major's CUPTI and CUDA headers."""
    if major >= 13:
        return ["nvidia-cuda-cupti", "nvidia-cuda-runtime"]
    return ["nvidia-cuda-cupti-cu%d" % major, "nvidia-cuda-runtime-cu%d" % major]


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
            status[major] = "built with the headers of %s" % hs.source
            built.append(path)
        else:
            log("CUPTI injection library for CUDA %d: skipped (build failed, see above)" % major)
            status[major] = "skipped: compiling with the headers of %s failed (the install's log has the error)" \
                % hs.source
    return built


def build_test_shim(out_dir, log=print):
    """The translator test driver (tests only; needs headers, no libcupti).
    Returns its path, or None when no compiler or headers are here."""
    cxx = compiler()
    if not cxx:
        return None
    sets = find_header_sets()
    hs = pick(sets, 13, need_lib=False) or pick(sets, 12, need_lib=False)
    if hs is None:
        return None
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "libgraphsignal_cupti_test_cu%d.so" % hs.major)
    stamp = build_info(hs) + hs.cupti_include
    if _up_to_date(out, SHIM_SOURCES, stamp):
        return out
    if not _compile(cxx, SHIM_SOURCES, hs, out, [], log):
        return None
    with open(out + ".build-info", "w") as f:
        f.write(stamp)
    return out


def build_all(out_dir, log=print):
    """Builds every library it can into out_dir, and out_dir/build-report.json.
    Returns the paths built."""
    os.makedirs(out_dir, exist_ok=True)
    probe_lib = build_probe_lib(out_dir, log)
    status = {}
    built = ([probe_lib] if probe_lib else []) + build_cupti_variants(out_dir, log, status)
    with open(os.path.join(out_dir, REPORT), "w") as f:
        json.dump({"probes": "built" if probe_lib else "skipped", "cupti": {str(k): v for k, v in status.items()}},
                  f, indent=1, sort_keys=True)
    return built


if __name__ == "__main__":
    for p in build_all(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "graphsignal", "lib")):
        print(p)
