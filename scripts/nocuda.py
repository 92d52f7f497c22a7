"""Runs a command as on a machine without a CUDA toolkit: the mainstream
user's machine, where CUDA comes from pip wheels.

    python3 scripts/nocuda.py pip install .

Every toolkit folder a build could find (/usr/local/cuda*, /opt/cuda,
$CUDA_HOME, $CUDA_PATH, $CUDA_ROOT, the one holding the nvcc on PATH) gets
an empty tmpfs mounted over it in a private mount namespace (unshare -m;
unshare -r -m when not root), PATH loses every folder with an nvcc, and
the CUDA_* variables are unset. Nothing changes outside the command.

Exit status 97 with one line on stderr when this machine cannot do it.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

CANNOT = 97
_ENV = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")


def toolkit_dirs(environ=None):
    """Real paths of the toolkit folders to hide, each once."""
    environ = os.environ if environ is None else environ
    cands = glob.glob("/usr/local/cuda*") + ["/opt/cuda"] + [environ.get(k) for k in _ENV]
    for d in environ.get("PATH", "").split(os.pathsep):
        nvcc = os.path.join(d, "nvcc") if d else ""
        if nvcc and os.path.exists(nvcc):
            cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
            # a wrapper script (e.g. /usr/local/bin/nvcc exec'ing the toolkit's) names its target
            try:
                with open(nvcc, "rb") as f:
                    head = f.read(4096).decode("utf-8", "replace")
            except OSError:
                head = ""
            for word in head.split():
                if word.startswith("/") and word.endswith("/bin/nvcc"):
                    cands.append(os.path.dirname(os.path.dirname(os.path.realpath(word))))
    out = []
    for d in cands:
        if d and os.path.isdir(d):
            r = os.path.realpath(d)
            if r not in out and r not in ("/", "/usr", "/usr/local"):
                out.append(r)
    return out


def hidden_env(environ=None):
    environ = dict(os.environ if environ is None else environ)
    for k in _ENV:
        environ.pop(k, None)
    path = [d for d in environ.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "nvcc"))]
    environ["PATH"] = os.pathsep.join(path)
    return environ


def _unshare():
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    return [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]


def wrap(cmd, environ=None):
    """(argv, env) that run cmd with the toolkit hidden, or (None, reason)."""
    if not sys.platform.startswith("linux"):
        return None, "not Linux"
    unshare = _unshare()
    if not unshare:
        return None, "no unshare command"
    dirs = toolkit_dirs(environ)
    mounts = "".join("mount -t tmpfs -o size=1m,mode=0755 graphsignal-nocuda %s && " % shlex.quote(d) for d in dirs)
    script = "mount --make-rprivate / 2>/dev/null; %sexec \"$@\"" % mounts
    return unshare + ["sh", "-c", script, "sh"] + list(cmd), hidden_env(environ)


def available():
    """None when commands can run with the toolkit hidden, else why not."""
    argv, env = wrap(["true"])
    if argv is None:
        return env
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unshare failed: %s" % e
    if p.returncode != 0:
        said = p.stderr.strip().splitlines() or ["exit status %d" % p.returncode]
        return "unshare -m or mount refused here (%s)" % said[-1]
    return None


def main(argv):
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    why = available()
    if why:
        sys.stderr.write("nocuda: cannot hide the CUDA toolkit here: %s\n" % why)
        return CANNOT
    cmd, env = wrap(argv)
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
