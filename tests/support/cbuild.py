"""Compiles the tests' C/C++ programs with only -I include, once per session,
and the CUPTI test drivers with the product's own build (csrc/cupti_build.py)."""
import hashlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")
# The rooms of the library that make no CUPTI call, with their test drivers:
# the translator fed hand-built records (tests/support/cupti/test_shim.cpp),
# the NVTX path interning fed hand-made names (nvtx_paths_shim.cpp), and the
# API hooks' parameter decoding fed hand-made parameter blocks
# (api_params_shim.cpp). One library, built once per checkout into
# cache_dir("cupti") (every test that loads it names that folder).
SHIM_SOURCES = ["log.cpp", "name_table.cpp", "translator.cpp", "device_uuids.cpp", "devices.cpp", "driver_api.cpp",
                "host_memory.cpp", "copy_estimator.cpp", "graph_registry.cpp", "call_tables.cpp",
                "nvtx_limits.cpp", "nvtx_text.cpp", "nvtx_paths.cpp", "api_table.cpp", "api_params.cpp"] + [
    os.path.join(ROOT, "tests", "support", "cupti", name)
    for name in ("test_shim.cpp", "nvtx_paths_shim.cpp", "api_params_shim.cpp")]


def cache_dir(name):
    """A build cache of this checkout: a binary built from another
    checkout's headers (same machine, same uid) must never pass for current.
    Made and checked as graphsignal's own temp folders are
    (graphsignal.safefs.private_dir: $TMPDIR/graphsignal-<uid>/..., ours,
    mode 0700, no symlink): what is built there is run, and a binary
    another local user planted under a predictable /tmp name, newer than
    its source, would pass for built and run as us."""
    from graphsignal import safefs

    return safefs.private_dir("test-%s-%s" % (name, hashlib.sha1(ROOT.encode()).hexdigest()[:10]))


_BUILD = cache_dir("bin")


def compile_c(src, out_name=None, cxx=False, extra=(), std=None):
    """Compiles tests/c/<src> (or an absolute path); returns the binary path."""
    path = src if os.path.isabs(src) else os.path.join(ROOT, "tests", "support", "c", src)
    os.makedirs(_BUILD, exist_ok=True)
    out = os.path.join(_BUILD, out_name or os.path.splitext(os.path.basename(path))[0] + ("_cxx" if cxx else ""))
    if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(path), _newest_header()):
        return out
    cc = "g++" if cxx else "gcc"
    cmd = [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE]
    if std:
        cmd.append("-std=" + std)
    return build_to(out, cmd + [path, "-pthread"] + list(extra))


def build_to(out, argv):
    """Runs the compiler argv (without -o) into a file beside out, then renames it into place: a test running in
    parallel (another pytest worker) never runs or loads a half-written file, and one that has the previous build
    loaded keeps it. Returns out."""
    tmp = "%s.tmp-%d" % (out, os.getpid())
    try:
        subprocess.run(list(argv) + ["-o", tmp], check=True)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _newest_header():
    d = os.path.join(INCLUDE, "graphsignal")
    return max(os.path.getmtime(os.path.join(d, f)) for f in os.listdir(d))


def cupti_build():
    """csrc/cupti_build.py, the product's build of the CUPTI library."""
    sys.path.insert(0, os.path.join(ROOT, "csrc"))
    try:
        import cupti_build as module
    finally:
        sys.path.pop(0)
    return module


def build_cupti_shim(out_dir, log=print):
    """The translator test driver (no libcupti needed), compiled as the
    library is, against the newest major's headers found. Returns its
    path, or None when no compiler or headers are here."""
    cb = cupti_build()
    if not cb.compiler():
        return None
    sets = cb.find_header_sets()
    hs = cb.pick(sets, 13, need_lib=False) or cb.pick(sets, 12, need_lib=False)
    if hs is None:
        return None
    os.makedirs(out_dir, exist_ok=True)
    return cb.build_library(SHIM_SOURCES, hs, os.path.join(out_dir, "libgraphsignal_cupti_test_cu%d.so" % hs.major),
                            log=log)


def cupti_shim(sigs=None):
    """The translator test driver (build_cupti_shim), built once per checkout into cache_dir("cupti"); the test
    is skipped where it cannot be built. With sigs ({name: (argtypes, restype)}): the library loaded with those
    functions typed; without: its path."""
    import ctypes

    import pytest

    path = build_cupti_shim(cache_dir("cupti"), log=lambda m: sys.stderr.write(m + "\n"))
    if path is None:
        pytest.skip("no C++ compiler or CUPTI/CUDA headers here (the CUPTI test shim cannot be built)")
    if sigs is None:
        return path
    lib = ctypes.CDLL(path)
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes, f.restype = args, res
    return lib
