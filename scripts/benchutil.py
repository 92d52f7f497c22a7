"""Shared bits of the benchmark scripts (each prints JSON lines)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "include")


def emit(**kv):
    sys.stdout.write(json.dumps(kv, sort_keys=False) + "\n")
    sys.stdout.flush()


def compile_c(src, cxx=False, extra=()):
    out_dir = os.path.join(tempfile.gettempdir(), "graphsignal-bench-%d" % os.getuid())
    os.makedirs(out_dir, exist_ok=True)
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
