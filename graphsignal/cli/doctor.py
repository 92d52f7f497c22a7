"""graphsignal-run --check: what this install and this host give a workload,
what is missing, and the command that fixes each missing part.

It reads what the build left (lib/*.build-info, lib/build-report.json),
asks the driver for its CUDA version (cuDriverGetVersion, through
ctypes), and takes the decision graphsignal-run would take for a Python
workload started here (graphsignal.launch.injection.plan_injection with
`python3`), so what it prints is what a run would do. Nothing is imported
into this process but the standard library and graphsignal.launch.
"""
import json
import os
import subprocess
import sys

from graphsignal import __version__
from graphsignal.launch import injection

_PROBES_CHECK = "from graphsignal import probes; print(probes.BACKEND)"


def _build_info(lib_path):
    try:
        with open(lib_path + ".build-info") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _probe_backend(python, env):
    """('cffi' | 'ctypes', None) or (None, why): how `python` imports
    graphsignal.probes with the package exposed as graphsignal-run does."""
    try:
        p = subprocess.run([python, "-c", _PROBES_CHECK], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines()
        return None, lines[-1] if lines else "exit status %d" % p.returncode
    return p.stdout.strip(), None


def check(environ=None, lib_dir=injection.LIB_DIR, driver_major=injection._PROBE, out=sys.stdout):
    """Writes the report to out; returns the number of missing parts."""
    environ = dict(os.environ if environ is None else environ)
    missing = []

    def line(text=""):
        out.write(text + "\n")

    def lack(text, fix):
        missing.append(text)
        line("  MISSING: " + text)
        line("    fix: " + fix)

    line("graphsignal %s at %s (Python %s, %s)" % (__version__, injection.PACKAGE_DIR, sys.version.split()[0],
                                                   sys.executable))

    line("CUPTI injection libraries (GPU activity profiles):")
    libs = injection.built_libraries(lib_dir)
    report = injection.build_report(lib_dir)
    for major in injection.SUPPORTED_MAJORS:
        if major in libs:
            info = _build_info(libs[major])
            line("  cu%d: %s, built with the headers of %s" % (major, libs[major], info.get("headers", "(unknown)")))
        else:
            why = report.get(major, "no build report")
            lack("cu%d: no library (at install time: %s)" % (major, why),
                 "with a C++ compiler (g++), rebuild: %s" % injection.rebuild_command(major))

    drv = injection.driver_cuda_major() if driver_major is injection._PROBE else driver_major
    if drv is None:
        line("NVIDIA driver:")
        lack("no NVIDIA driver (libcuda.so.1 does not load): CUDA activity cannot be profiled on this host",
             "run on a host with an NVIDIA GPU and its driver; graphsignal itself needs nothing more for that")
    elif drv == 0:
        line("NVIDIA driver: present, but cuDriverGetVersion failed")
    else:
        line("NVIDIA driver: supports CUDA %d (cuDriverGetVersion)" % drv)

    command = ["python3"]
    pythons = injection.workload_pythons(command, environ)
    python = pythons[0] if pythons else sys.executable
    line("A Python workload here (%s):" % python)
    if drv is None:
        # nothing is injected without a driver; say what a driver would bring
        line("  no NVIDIA driver, so a run here profiles no GPU activity; with a driver it would get:")
    plan = injection.plan_injection(dict(environ), command, lib_dir, drv if drv else 0)
    if plan.major:
        line("  CUDA %d (from %s)" % (plan.major, plan.source))
    if plan.problem and plan.fix:
        lack(plan.problem, plan.fix)
    else:
        line("  %s %s" % ("would load" if drv is not None else "the injection library", plan.lib))
        line("  with %s" % os.path.realpath(plan.libcupti))
    env = dict(environ)
    injection.expose_package(env, command)
    backend, why = _probe_backend(python, env)
    if backend:
        line("  from graphsignal import probes: works (%s)" % backend)
    else:
        lack("from graphsignal import probes fails in %s: %s" % (python, why),
             "rebuild graphsignal with a C compiler: %s" % injection.rebuild_command())

    line()
    if missing:
        line("missing: %s" % "; ".join(missing))
    else:
        line("everything GPU profiling needs is here")
    return len(missing)
