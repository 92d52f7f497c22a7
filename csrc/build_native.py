"""Builds graphsignal's native libraries (called by setup.py, or by hand:
python csrc/build_native.py OUT_DIR).

- libgraphsignal_probes.so: probe.h's functions as plain C exports, for
  graphsignal.probes under a Python that cannot load the cffi helper
  (csrc/probe_lib.c; needs only a C compiler).
- libgraphsignal_cupti_cu<major>.so: the CUPTI injection library, once per
  CUDA major whose CUPTI and runtime headers can be found
  (csrc/cupti_build.py).

A missing compiler or header set skips that library with one clear line
and never fails the install. Both get the same glibc floor and the same
path hygiene (csrc/compat/glibc_compat.h, -ffile-prefix-map).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROBE_LIB = "libgraphsignal_probes.so"
PROBE_SOURCE = os.path.join(HERE, "probe_lib.c")
GLIBC_COMPAT = os.path.join(HERE, "compat", "glibc_compat.h")
CFLAGS = ["-std=gnu99", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-ffile-prefix-map=%s=." % ROOT]


def c_compiler(environ=None):
    environ = os.environ if environ is None else environ
    for c in (environ.get("CC"), "gcc", "cc", "clang"):
        if c and shutil.which(c.split()[0]):
            return c.split()
    return None


def build_probe_lib(out_dir, log=print):
    """Returns the library's path, or None (said through log)."""
    cc = c_compiler()
    if not cc:
        log("probe library for Python without cffi: skipped (no C compiler; set CC or install gcc)")
        return None
    out = os.path.join(out_dir, PROBE_LIB)
    work = tempfile.mkdtemp(prefix="graphsignal-probes-build-")
    tmp = os.path.join(work, PROBE_LIB)
    base = cc + CFLAGS + ["-I", os.path.join(ROOT, "include"), PROBE_SOURCE, "-pthread", "-o", tmp]
    err = ""
    try:
        for extra in (["-include", GLIBC_COMPAT], []):  # a toolchain that refuses the compat header: plain
            try:
                p = subprocess.run(base[:len(cc)] + extra + base[len(cc):], capture_output=True, text=True,
                                   timeout=120, cwd=work)
            except (OSError, subprocess.TimeoutExpired) as e:
                err = str(e)
                break
            if p.returncode == 0:
                staged = os.path.join(out_dir, ".tmp-%d-%s" % (os.getpid(), PROBE_LIB))
                shutil.copyfile(tmp, staged)
                os.chmod(staged, 0o755)
                os.replace(staged, out)  # atomic: a running workload may have the previous one mapped
                return out
            err = p.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log("probe library for Python without cffi: build failed:\n%s" % "\n".join(err.strip().splitlines()[-8:]))
    return None


REPORT = "build-report.json"


def build_all(out_dir, log=print):
    """Builds every library it can into out_dir, and out_dir/build-report.json:
    what became of each, which graphsignal-run --check and its hints read."""
    os.makedirs(out_dir, exist_ok=True)
    built = []
    probe_lib = build_probe_lib(out_dir, log)
    if probe_lib:
        built.append(probe_lib)
    status = {}
    # setup.py imports this module with csrc/ on sys.path only for the import
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    try:
        from cupti_build import build_cupti_variants
    except ImportError as e:
        log("CUPTI injection library: no build script (%s); skipped" % e)
    else:
        built += build_cupti_variants(out_dir, log, status)
    with open(os.path.join(out_dir, REPORT), "w") as f:
        json.dump({"probes": "built" if probe_lib else "skipped", "cupti": {str(k): v for k, v in status.items()}},
                  f, indent=1, sort_keys=True)
    return built


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    done = build_all(sys.argv[1] if len(sys.argv) > 1 else os.path.join("graphsignal", "lib"))
    print("\n".join(done))
