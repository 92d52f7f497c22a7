"""Which CUPTI injection library and libcupti a workload gets, and the
environment that makes CUDA load them (the CUDA facts themselves come from
graphsignal.launch.cuda_discovery, shared with the build).

graphsignal-run calls prepare_injection() on the child's environment
before it starts the workload. CUDA then loads the injection library
(CUDA_INJECTION64_PATH) in every process of the workload that initializes
CUDA, and that library needs the libcupti of the same CUDA major as the
workload's runtime: a second CUPTI of another major in one process would
fight the first.

The workload's CUDA major, first answer wins:
  1. the PyTorch the workload's Python would import (torch/version.py,
     read as text: nothing is imported here);
  2. the CUDA runtime wheels in that Python's site-packages
     (nvidia/*/lib/libcudart.so.<major>);
  3. a libcudart.so.<major> on the workload's LD_LIBRARY_PATH;
  4. the toolkit at $CUDA_HOME / $CUDA_PATH / /usr/local/cuda (cuda.h);
  5. the driver: cuDriverGetVersion, and the newest library built for a
     major it supports.
"The workload's Python" is the interpreter the command names (python3,
/venv/bin/python, or the shebang of a console script such as vllm or
torchrun), else python3 on the workload's PATH, else this interpreter.

libcupti.so.<major>, first found: that Python's nvidia wheels (the file
PyTorch itself loads), then graphsignal's own environment (its [cu12] /
[cu13] extra), the workload's LD_LIBRARY_PATH, the toolkits ($CUDA_HOME,
/usr/local/cuda-<major>*, /usr/local/cuda; lib64, lib, extras/CUPTI/lib64)
and the system library directories. It is made loadable through a private
directory holding one symlink, libcupti.so.<major>, appended to
LD_LIBRARY_PATH, so no other library of a toolkit directory changes what
the workload loads.

The workload also gets this graphsignal package on its PYTHONPATH, the same
way (a private directory holding only a link to it), so that
`from graphsignal import probes` works in a workload whose Python is not
the one graphsignal was installed for (uv tool install, another venv),
and writes the ring layout of the sidecar reading it.
"""
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from collections import namedtuple
from typing import Optional

from graphsignal.launch.cuda_discovery import (SUPPORTED_MAJORS, driver_cuda_major, find_libcupti, header_wheels,
                                               ld_library_path, unique_dirs, workload_cuda_major)
from graphsignal import safefs
from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB_DIR = os.path.join(PACKAGE_DIR, "lib")
ENV_INJECTION = "CUDA_INJECTION64_PATH"
ENV_NVTX_INJECTION = "NVTX_INJECTION64_PATH"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")


def built_libraries(lib_dir=LIB_DIR):
    """{major: path} of the injection libraries this install has."""
    out = {}
    for p in glob.glob(os.path.join(lib_dir, "libgraphsignal_cupti_cu*.so")):
        m = re.search(r"_cu(\d+)\.so$", p)
        if m:
            out[int(m.group(1))] = p
    return out


def rocm_tracing_library(lib_dir: str = LIB_DIR) -> Optional[str]:
    """The ROCm kernel-tracing library of this build in lib_dir, or None
    (this build has none: ROCm GPUs get AMD SMI telemetry and probe_rocm.h
    probes)."""
    try:
        names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libgraphsignal_rocm") and n.endswith(".so"))
    except OSError:
        return None
    return os.path.join(lib_dir, names[0]) if names else None


# -- the workload's Python --------------------------------------------------------
def _which(name, env):
    return shutil.which(name, path=env.get("PATH", os.defpath))


def _shebang_python(path, env):
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    interp = words[0]
    if os.path.basename(interp) == "env":
        args = [w for w in words[1:] if not w.startswith("-")]
        interp = _which(args[0], env) if args else None
    if interp and _PYTHON_RE.match(os.path.basename(interp)):
        return interp
    return None


def workload_pythons(command, env):
    """Interpreters the workload most likely runs, most likely first."""
    out = []
    exe = _which(command[0], env) if command else None
    if exe:
        if _PYTHON_RE.match(os.path.basename(exe)):
            out.append(exe)
        else:
            py = _shebang_python(exe, env)
            if py:
                out.append(py)
    for name in ("python3", "python"):
        py = _which(name, env)
        if py:
            out.append(py)
    out.append(sys.executable)
    seen, uniq = set(), []
    for p in out:
        if p and p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def _prefix_site_dirs(prefix):
    pats = ("lib/python3*/site-packages", "lib64/python3*/site-packages", "local/lib/python3*/dist-packages",
            "lib/python3/dist-packages", "lib/python3*/dist-packages")
    return [d for pat in pats for d in sorted(glob.glob(os.path.join(prefix, pat)))]


def python_site_dirs(python):
    """site-packages of an interpreter, found from its path alone (a venv's
    bin/python is a symlink to the base interpreter, so the venv prefix
    comes from the path as given)."""
    dirs = []
    prefix = os.path.dirname(os.path.dirname(python))
    dirs += _prefix_site_dirs(prefix)
    cfg = os.path.join(prefix, "pyvenv.cfg")
    if os.path.exists(cfg):
        text = open(cfg, errors="replace").read()
        if re.search(r"include-system-site-packages\s*=\s*true", text, re.I):
            m = re.search(r"^home\s*=\s*(.+)$", text, re.M)
            if m:
                dirs += _prefix_site_dirs(os.path.dirname(m.group(1).strip()))
    else:
        dirs += _prefix_site_dirs(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    dirs += sorted(glob.glob(os.path.expanduser("~/.local/lib/python3*/site-packages")))
    return dirs


def workload_site_dirs(command, env):
    dirs = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for py in workload_pythons(command, env):
        if py == sys.executable:
            dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        dirs += python_site_dirs(py)
    return unique_dirs(dirs)


def _private_dir(kind, target, tmp_root=None):
    """A directory only we can write, named for target (raises
    safefs.UnsafePath)."""
    return safefs.private_dir("%s-%s" % (kind, hashlib.sha1(target.encode()).hexdigest()[:12]), tmp_root)


def _link_in(d, name, target):
    """d/name -> target, made or fixed atomically in the private directory
    d; raises OSError."""
    link = os.path.join(d, name)
    if os.path.realpath(link) != target:
        tmp = link + ".%d.tmp" % os.getpid()
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)


def _writable_by_others(d):
    try:
        st = os.stat(d)
    except OSError:
        return True
    return st.st_uid not in (0, os.geteuid()) or bool(st.st_mode & 0o022)


def loadable_dir(libcupti, major, tmp_root=None):
    """A directory holding only libcupti.so.<major> (a symlink to the file
    found), to append to LD_LIBRARY_PATH; else libcupti's own directory
    when no other user can write it; else raises safefs.UnsafePath."""
    real = os.path.realpath(libcupti)
    try:
        d = _private_dir("cupti", real, tmp_root)
        _link_in(d, "libcupti.so.%d" % major, real)
        return d
    except OSError as e:
        own = os.path.dirname(libcupti)
        if _writable_by_others(own):
            raise safefs.UnsafePath("%s; and %s, where libcupti is, is writable by other users" % (e, own)) from e
        logger.debug("graphsignal: no private directory for libcupti (%s); using %s", e, own)
        return own


def own_graphsignal(command, env):
    """The graphsignal package the workload's Python has itself (its
    site-packages or PYTHONPATH), or None."""
    pythons = workload_pythons(command, env) if command else []
    if not pythons or pythons[0] == sys.executable:
        return None  # graphsignal's own interpreter: nothing to tell apart
    dirs = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + python_site_dirs(pythons[0])
    for d in dirs:
        init = os.path.join(d, "graphsignal", "__init__.py")
        if os.path.exists(init):
            return os.path.dirname(init)
    return None


def expose_package(env, command=None, package_dir=PACKAGE_DIR, tmp_root=None, report=None):
    """Appends to env's PYTHONPATH a private directory holding only a link
    named graphsignal to this package, so the workload can import
    graphsignal.probes and nothing else it imports changes. A workload
    whose Python has a graphsignal of its own keeps it (own_graphsignal).
    Returns the directory, or None when not needed or when it cannot be
    made safely (said once, through report and the log)."""
    own = own_graphsignal(command, env)
    if own:
        logger.debug("graphsignal: the workload's Python has its own %s; PYTHONPATH left alone", own)
        return None
    real = os.path.realpath(package_dir)
    try:
        d = _private_dir("py", real, tmp_root)
        _link_in(d, "graphsignal", real)
    except OSError as e:
        _say(report, "%s: the workload's Python may not import graphsignal.probes" % e)
        return None
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if d not in paths:
        env["PYTHONPATH"] = os.pathsep.join(paths + [d])
    return d


# -- what is missing, and the command that fixes it -----------------------------------
def build_report(lib_dir=LIB_DIR):
    """{major: what the build said about it} from lib/build-report.json
    (written by csrc/cupti_build.py), or {}."""
    try:
        with open(os.path.join(lib_dir, "build-report.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for k, v in (data.get("cupti") or {}).items() if isinstance(data, dict) else ():
        if str(k).isdigit() and isinstance(v, str):
            out[int(k)] = v
    return out


def _installed_from():
    """(url, editable) of graphsignal's direct_url.json, or (None, False):
    set when it was installed from a checkout, a file or a VCS URL."""
    info = {}
    try:
        from importlib import metadata
        # a checkout's graphsignal.egg-info may come first on sys.path: the installed dist-info has the URL
        for dist in metadata.distributions(name="graphsignal"):
            text = dist.read_text("direct_url.json")
            if text:
                info = json.loads(text)
                break
    except (ImportError, OSError, ValueError):  # broken metadata only makes the hint less precise
        return None, False
    url = info.get("url") if isinstance(info, dict) else None
    if not isinstance(url, str):
        return None, False
    return url, bool((info.get("dir_info") or {}).get("editable"))


def rebuild_command(major=None, prefix=sys.prefix, executable=sys.executable):
    """The command that rebuilds this install's native libraries, as this
    install was made (uv tool, pip from a checkout, pip from PyPI). It
    skips caches, which would hand back the same build."""
    extra = "[cu%d]" % major if major else ""
    url, editable = _installed_from()
    if url and url.startswith("file://"):
        target = url[len("file://"):]
    else:
        target = url or "graphsignal"
    if os.path.exists(os.path.join(prefix, "uv-receipt.toml")):
        return "uv tool install --reinstall --no-cache '%s%s'" % (target, extra)
    return "%s -m pip install --force-reinstall --no-deps --no-cache-dir %s'%s%s'" % (
        executable, "-e " if editable else "", target, "" if url else extra)


def missing_library_hint(major, lib_dir=LIB_DIR):
    """Why this install has no CUPTI library for major, and what to run."""
    if major not in SUPPORTED_MAJORS:
        return "graphsignal builds CUPTI libraries for CUDA %s only" % " and ".join(map(str, SUPPORTED_MAJORS))
    why = build_report(lib_dir).get(major)
    return "%swith a C++ compiler (g++), rebuild: %s" % ("at install time it was %s; " % why if why else "",
                                                        rebuild_command(major))


def missing_libcupti_hint(major, python=None):
    """The command that brings libcupti.so.<major> where the workload finds it."""
    wheel = header_wheels(major)[0]
    into = "%s -m pip install '%s==%d.*'" % (python, wheel, major) if python else "pip install '%s==%d.*'" % (
        wheel, major)
    return "%s (the workload's environment), or install graphsignal with its [cu%d] extra" % (into, major)


# -- the decision ----------------------------------------------------------------------
_PROBE = object()

Plan = namedtuple("Plan", "lib libcupti major source problem fix level")
Plan.__doc__ = """What a workload gets: lib (injection library) and libcupti
paths, its CUDA major and where that came from; or, with lib None, the
problem and the fix (one line each, fix may be None) at a logging level."""


def _no(problem, fix=None, level=logging.WARNING, major=None, source=None):
    return Plan(None, None, major, source, problem, fix, level)


def plan_injection(env, command, lib_dir=LIB_DIR, driver_major=_PROBE):
    """Decides which injection library and libcupti the workload gets,
    changing nothing. driver_major: the driver's CUDA major, None for no
    driver; probed through libcuda when not given (tests pass it)."""
    libs = built_libraries(lib_dir)
    drv = driver_cuda_major() if driver_major is _PROBE else driver_major
    if drv is None:
        # a host without NVIDIA's driver is no fault: said at info, not on every CPU run's console
        return _no("no NVIDIA driver (libcuda.so.1) on this host", level=logging.INFO)
    if not libs:
        return _no("graphsignal has no CUPTI injection library", missing_library_hint(max(SUPPORTED_MAJORS), lib_dir))
    sites = workload_site_dirs(command, env)
    major, source = workload_cuda_major(sites, env)
    if major is None:
        usable = [m for m in libs if not drv or m <= drv]
        if not usable:
            return _no("the NVIDIA driver supports CUDA %d, older than every CUPTI library built (%s)"
                       % (drv, ", ".join("cu%d" % m for m in sorted(libs))), "update the NVIDIA driver")
        major = max(usable)
        source = ("the driver (CUDA %d)" % drv if drv else
                  "the newest CUPTI library built, since the driver's CUDA version is unknown")
    lib = libs.get(major)
    if lib is None:
        return _no("the workload uses CUDA %d (from %s) but graphsignal has no CUPTI library for it (built: %s)"
                   % (major, source, ", ".join("cu%d" % m for m in sorted(libs))),
                   missing_library_hint(major, lib_dir), major=major, source=source)
    libcupti = find_libcupti(major, sites, env)
    if libcupti is None:
        pythons = workload_pythons(command, env)
        return _no("no libcupti.so.%d found for the workload's CUDA %d (from %s)" % (major, major, source),
                   missing_libcupti_hint(major, pythons[0] if pythons else None), major=major, source=source)
    return Plan(lib, libcupti, major, source, None, None, logging.INFO)


# -- the entry point -------------------------------------------------------------------
def _say(report, msg, level=logging.WARNING):
    """One line for the user and, through report(msg), one entry."""
    Reporter(on_error=report).say(msg, entry=report is not None, log_level=level)


def prepare_injection(env, command, report=None, lib_dir=LIB_DIR, driver_major=_PROBE, activity=True):
    """Sets up the workload's environment env: this graphsignal package
    importable (expose_package), and CUDA loading the injection library in
    the workload's CUDA processes. Returns the library path, or None when
    the workload runs without GPU activity profiles (said once, through
    report and the log). driver_major: see plan_injection. activity False
    (--cuda-trace off): all of it but CUDA_INJECTION64_PATH, so CUPTI never
    attaches to the workload; the library, with its libcupti loadable, is
    still returned for NVTX's own injection (prepare_nvtx): NVTX ranges
    need no CUPTI, though the library's first NVTX call loads libcupti
    (linked, never initialized: nothing subscribes to it)."""
    expose_package(env, command, report=report)
    user = env.get(ENV_INJECTION)
    if user:
        logger.info("graphsignal: %s=%s is set; leaving CUDA injection to it", ENV_INJECTION, user)
        return None
    plan = plan_injection(env, command, lib_dir, driver_major)
    if plan.problem:
        lost = "CUDA activity and NVTX ranges are not profiled" if activity else "NVTX ranges are not collected"
        _say(report, "%s: %s%s" % (plan.problem, lost, "; " + plan.fix if plan.fix else ""), plan.level)
        return None
    try:
        d = loadable_dir(plan.libcupti, plan.major)
    except safefs.UnsafePath as e:
        _say(report, "%s: CUDA activity is not profiled" % e)
        return None
    paths = ld_library_path(env)
    if d not in paths:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(paths + [d])
    if not activity:
        logger.info("graphsignal: CUDA tracing is off: CUPTI stays out of the workload (%s is left unset)",
                    ENV_INJECTION)
        return plan.lib
    env[ENV_INJECTION] = plan.lib
    logger.info("graphsignal: CUDA %d workload (from %s): injecting %s with %s", plan.major, plan.source, plan.lib,
                plan.libcupti)
    return plan.lib


# -- NVTX -------------------------------------------------------------------------------
def has_nvtx(lib):
    """Whether the injection library lib was built with its NVTX entry point
    (its .build-info names where the NVTX headers came from)."""
    try:
        with open(lib + ".build-info") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and bool(info.get("nvtx"))


def prepare_nvtx(env, lib, mode):
    """Makes the workload's NVTX calls reach the injection library lib (the
    one CUDA loads, prepare_injection's result) through NVTX's own injection
    variable, unless mode is "off" or the user set one (e.g. Nsight Systems:
    said once, left alone). The library reads GRAPHSIGNAL_NVTX for the mode.
    Returns whether NVTX ranges will be collected."""
    if mode == "off":
        return False
    user = env.get(ENV_NVTX_INJECTION)
    if user:
        if os.path.basename(os.path.realpath(user)).startswith("libgraphsignal_cupti"):
            return True  # a graphsignal CUPTI library, named by hand: it collects
        # one line, no error entry: profiling under another tool is a choice, not a fault
        _say(None, "%s=%s is set (another NVTX tool, e.g. Nsight Systems): NVTX ranges go to it, not to "
             "graphsignal" % (ENV_NVTX_INJECTION, user))
        return False
    if not lib:
        return False
    if not has_nvtx(lib):
        logger.info("graphsignal: %s was built without NVTX headers: NVTX ranges are not collected", lib)
        return False
    env[ENV_NVTX_INJECTION] = lib
    return True
