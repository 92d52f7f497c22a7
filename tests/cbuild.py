"""Compiles the tests' C/C++ programs with only -I include, once per session."""
import hashlib
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "include")


def cache_dir(name):
    """A build cache of this checkout: a binary built from another
    checkout's headers (same machine, same uid) must never pass for current."""
    return os.path.join(tempfile.gettempdir(), "graphsignal-test-%s-%d-%s" % (
        name, os.getuid(), hashlib.sha1(ROOT.encode()).hexdigest()[:10]))


_BUILD = cache_dir("bin")


def compile_c(src, out_name=None, cxx=False, extra=(), std=None):
    """Compiles tests/c/<src> (or an absolute path); returns the binary path."""
    path = src if os.path.isabs(src) else os.path.join(ROOT, "tests", "c", src)
    os.makedirs(_BUILD, exist_ok=True)
    out = os.path.join(_BUILD, out_name or os.path.splitext(os.path.basename(path))[0] + ("_cxx" if cxx else ""))
    if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(path), _newest_header()):
        return out
    cc = "g++" if cxx else "gcc"
    cmd = [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE]
    if std:
        cmd.append("-std=" + std)
    cmd += [path, "-o", out, "-pthread"] + list(extra)
    subprocess.run(cmd, check=True)
    return out


def _newest_header():
    d = os.path.join(INCLUDE, "graphsignal")
    return max(os.path.getmtime(os.path.join(d, f)) for f in os.listdir(d))
