"""Shared bits of the benchmark scripts (each prints JSON lines)."""
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
