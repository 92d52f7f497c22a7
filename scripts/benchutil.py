"""Shared bits of the benchmark scripts (each prints JSON lines)."""
import ctypes
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "include")


def work_dir(name):
    """$TMPDIR/graphsignal-<uid>/bench-<name>: the benchmarks' build folder,
    made and checked as graphsignal's own temp folders are
    (graphsignal.safefs.private_dir: ours, mode 0700, no symlink), since
    what is built there is run, and a file another local user planted in a
    predictable /tmp name would run as us."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from graphsignal import safefs

    return safefs.private_dir("bench-" + name)


def gpu_missing():
    """Why this host cannot run a GPU benchmark (one line), or None: the
    NVIDIA driver (libcuda.so.1) must load, cuInit must succeed and at least
    one device be visible (CUDA_VISIBLE_DEVICES="" hides them all, which is
    how the smoke test checks this path on a GPU host too)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 does not load)"
    rc = lib.cuInit(0)
    if rc != 0:
        return "cuInit failed (CUresult %d): no usable GPU" % rc
    n = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        return "no CUDA device visible (CUDA_VISIBLE_DEVICES=%r)" % os.environ.get("CUDA_VISIBLE_DEVICES")
    return None


def require_gpu(script):
    """Exits with status 2 and one line on stderr where gpu_missing() says
    why not: a GPU-only script's clean answer on a CPU host, not a
    traceback from nvcc or CUPTI halfway through."""
    why = gpu_missing()
    if why:
        sys.stderr.write("%s: needs an NVIDIA GPU: %s\n" % (os.path.basename(script), why))
        sys.exit(2)


def installed_library(major):
    """graphsignal/lib's CUPTI injection library for this CUDA major, as pip install built it."""
    sys.path.insert(0, os.path.join(ROOT, "csrc"))
    import cupti_build

    path = os.path.join(ROOT, "graphsignal", "lib", cupti_build.library_name(major))
    if not os.path.exists(path):
        raise SystemExit("no %s: pip install -e . builds it" % os.path.relpath(path, ROOT))
    return path


def emit(**kv):
    sys.stdout.write(json.dumps(kv, sort_keys=False) + "\n")
    sys.stdout.flush()


def free_port():
    """A port on 127.0.0.1 nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def compile_c(src, cxx=False, extra=()):
    out_dir = work_dir("c")
    path = os.path.join(ROOT, "scripts", "c", src)
    out = os.path.join(out_dir, os.path.splitext(src)[0])
    subprocess.run(["g++" if cxx else "gcc", "-O2", "-I", INCLUDE, path, "-o", out, "-pthread"] + list(extra),
                   check=True)
    return out


def percentile(values, q):
    v = sorted(values)
    if not v:
        return None
    i = min(len(v) - 1, max(0, int(round(q / 100.0 * (len(v) - 1)))))
    return v[i]


if __name__ == "__main__" and sys.argv[1:2] == ["--require-gpu"]:
    # for the shell scripts: python3 scripts/benchutil.py --require-gpu NAME
    require_gpu(sys.argv[2] if len(sys.argv) > 2 else "this script")


class TreeWorkers:
    """One worker process per checkout, for a benchmark that compares trees request by request (--trees): each
    runs `script --worker ARGS` with only that tree's package on its path (from an empty folder: nothing to shadow
    it), says `ready N` first, then answers each line it is sent with one line. `ready` holds each tree's N."""

    def __init__(self, trees, script, args=()):
        import tempfile

        here = os.path.dirname(os.path.abspath(__file__))
        self.procs = {}
        for t in trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(t) + os.pathsep + here)
            cwd = tempfile.mkdtemp(prefix="gs-bench-")
            self.procs[t] = (subprocess.Popen([sys.executable, os.path.abspath(script), "--worker"] + list(args),
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                              cwd=cwd), cwd)
        self.ready = {t: int(p.stdout.readline().split()[1]) for t, (p, _) in self.procs.items()}

    def ask(self, tree, line):
        """Sends line to the tree's worker; its answer's fields."""
        p = self.procs[tree][0]
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return p.stdout.readline().split()

    def close(self):
        for p, cwd in self.procs.values():
            p.stdin.close()
            p.wait(30)
            os.rmdir(cwd)
