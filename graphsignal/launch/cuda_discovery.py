"""Where CUDA is on this machine: toolkits, the nvidia-* header and runtime
wheels, libcupti, and the CUDA major of a workload or of the driver.

Standard library only, and free of graphsignal imports: the build
(csrc/cupti_build.py) loads this file by its path, where neither cffi nor
numpy need be installed, and graphsignal.launch.injection uses it when
graphsignal-run starts a workload.

The build asks for header sets (find_header_sets, pick: the CUPTI and CUDA
headers of one minor, and the libcupti beside them); the launch asks what
the workload will load (workload_cuda_major, find_libcupti) and what the
driver supports (driver_cuda_major).
"""
import ctypes
import glob
import os
import re
import shutil
import site
import sys
import sysconfig
from collections import namedtuple

SUPPORTED_MAJORS = (12, 13)  # csrc/cupti_build.py builds one injection library for each
TOOLKIT_ENV = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
TOOLKIT_INCLUDE_DIRS = ("include", "targets/x86_64-linux/include")
TOOLKIT_LIB_DIRS = ("lib64", "lib", "extras/CUPTI/lib64", "targets/x86_64-linux/lib")
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64")

HeaderSet = namedtuple("HeaderSet", "major minor cupti_include cuda_include libcupti origin source")
HeaderSet.__doc__ = """One CUDA minor's CUPTI and CUDA headers: their folders, the
libcupti.so.<major> beside them (None when absent), the toolkit root or
site-packages they came from, and one line naming them."""


def read_text(path):
    """A file's text, or "" when it cannot be read."""
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def unique_dirs(dirs):
    """The directories that exist, in order, each real path once."""
    seen, out = set(), []
    for d in dirs:
        if d and os.path.isdir(d) and os.path.realpath(d) not in seen:
            seen.add(os.path.realpath(d))
            out.append(d)
    return out


def header_wheels(major):
    """The PyPI wheels that carry a major's CUPTI (first) and CUDA headers."""
    if major >= 13:
        return ["nvidia-cuda-cupti", "nvidia-cuda-runtime"]
    return ["nvidia-cuda-cupti-cu%d" % major, "nvidia-cuda-runtime-cu%d" % major]


# -- versions, from headers ---------------------------------------------------------
def cuda_version(cuda_include):
    """(major, minor) from cuda.h's CUDA_VERSION, or None."""
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", read_text(os.path.join(cuda_include, "cuda.h")))
    if not m:
        return None
    v = int(m.group(1))
    return v // 1000, (v % 1000) // 10


def cupti_major(cupti_include):
    """The CUDA major of a CUPTI header set: 13.x writes CUPTI_API_VERSION as
    xxyyzz; 12.x used small integers (18..28)."""
    m = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", read_text(os.path.join(cupti_include, "cupti_version.h")))
    if not m:
        return None
    v = int(m.group(1))
    if v >= 10000:
        return v // 10000
    return 12 if v >= 18 else 11


# -- toolkits -----------------------------------------------------------------------
def toolkit_roots(environ, versions=None, extra=()):
    """Toolkit folders that exist, in search order: $CUDA_HOME, $CUDA_PATH,
    $CUDA_ROOT; /usr/local/cuda-<versions>* when versions is given ("12":
    those of CUDA 12, "": all); /usr/local/cuda, /opt/cuda; then extra."""
    roots = [environ.get(k) for k in TOOLKIT_ENV]
    if versions is not None:
        roots += sorted(glob.glob("/usr/local/cuda-%s*" % versions))
    roots += ["/usr/local/cuda", "/opt/cuda"] + list(extra)
    return unique_dirs(roots)


def nvcc_root(environ):
    """The toolkit holding the nvcc on environ's PATH, or None."""
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def toolkit_major(root):
    """The CUDA major of the toolkit at root (its cuda.h), or None."""
    for inc in TOOLKIT_INCLUDE_DIRS:
        ver = cuda_version(os.path.join(root, inc))
        if ver:
            return ver[0]
    return None


def toolkit_lib_dirs(root):
    """Where a toolkit (or /usr, the system's CUDA packages) keeps libcupti."""
    if root == "/usr":
        return list(SYSTEM_LIB_DIRS)
    return [os.path.join(root, sub) for sub in TOOLKIT_LIB_DIRS]


def _toolkit_header_set(root):
    incs = [os.path.join(root, d) for d in TOOLKIT_INCLUDE_DIRS]
    cuda_inc = next((d for d in incs if os.path.exists(os.path.join(d, "cuda.h"))), None)
    cupti_inc = next((d for d in incs + [os.path.join(root, "extras", "CUPTI", "include")]
                      if os.path.exists(os.path.join(d, "cupti.h"))), None)
    if not cuda_inc or not cupti_inc:
        return None
    ver = cuda_version(cuda_inc)
    if not ver or cupti_major(cupti_inc) != ver[0]:
        return None
    return HeaderSet(ver[0], ver[1], cupti_inc, cuda_inc, libcupti_in(toolkit_lib_dirs(root), ver[0]), root,
                     "CUDA %d.%d toolkit at %s" % (ver[0], ver[1], root))


# -- wheels -------------------------------------------------------------------------
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
    return unique_dirs(dirs)


def _wheel_header_sets(sp):
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
                owners = [wheel_owner(sp, os.path.join(d, h)) for d, h in ((cupti_inc, "cupti.h"),
                                                                         (cuda_inc, "cuda.h"))]
                source = ", ".join(o for o in owners if o) or "nvidia wheels in %s" % sp
                found.append(HeaderSet(major, ver[1], cupti_inc, cuda_inc,
                                       libcupti_in([os.path.join(pkg, "lib"), os.path.join(pkg, "lib64")], major),
                                       sp, source))
                break
    return found


def wheel_owner(sp, path):
    """'name version' of the installed distribution in site-packages sp
    whose RECORD lists path, or None."""
    rel = os.path.relpath(path, sp).replace(os.sep, "/")
    for info in sorted(glob.glob(os.path.join(sp, "nvidia_*.dist-info"))):
        if not any(line.split(",", 1)[0] == rel for line in read_text(os.path.join(info, "RECORD")).splitlines()):
            continue
        meta = read_text(os.path.join(info, "METADATA"))
        name = re.search(r"^Name:\s*(\S+)", meta, re.M)
        version = re.search(r"^Version:\s*(\S+)", meta, re.M)
        if name and version:
            return "%s %s" % (name.group(1), version.group(1))
    return None


# -- header sets (the build) --------------------------------------------------------
def find_header_sets(environ=None):
    """All usable header sets, in search order: the toolkits ($CUDA_HOME,
    $CUDA_PATH, $CUDA_ROOT, /usr/local/cuda-*, /usr/local/cuda, /opt/cuda,
    the nvcc on PATH, /usr), then the nvidia-* wheels of every
    site-packages this interpreter knows about (site_dirs)."""
    environ = os.environ if environ is None else environ
    sets = []
    for root in toolkit_roots(environ, "", [nvcc_root(environ), "/usr"]):
        hs = _toolkit_header_set(root)
        if hs:
            sets.append(hs)
    for sp in site_dirs(environ):
        sets.extend(_wheel_header_sets(sp))
    return sets


def pick(sets, major, need_lib=True):
    """The oldest minor of `major` (first found on a tie)."""
    cands = [s for s in sets if s.major == major and (s.libcupti or not need_lib)]
    if not cands:
        return None
    return min(cands, key=lambda s: s.minor)  # min() keeps the first of equal keys


# -- libraries ----------------------------------------------------------------------
def _versioned(name, major):
    """Whether a file name is libcupti.so.<major>, or that with more
    .<digits> (libcupti.so.12.0.146)."""
    return re.match(r"libcupti\.so\.%d(\.\d+)*$" % major, name) is not None


def libcupti_in(dirs, major):
    """The first libcupti.so.<major> in dirs (each may be a glob pattern:
    site/nvidia/*/lib); in each folder a versioned name first, then a
    plain libcupti.so that resolves to one. None when none is found."""
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, "libcupti.so.%d*" % major))):
            if _versioned(os.path.basename(p), major):
                return p
        for p in sorted(glob.glob(os.path.join(d, "libcupti.so"))):
            if _versioned(os.path.basename(os.path.realpath(p)), major):
                return p
    return None


def ld_library_path(env):
    return [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]


def find_libcupti(major, sites, env):
    """The libcupti.so.<major> a workload should load, first found: the
    nvidia wheels of its site-packages (sites; the file PyTorch itself
    loads), its LD_LIBRARY_PATH, the toolkits ($CUDA_HOME, $CUDA_PATH,
    $CUDA_ROOT, /usr/local/cuda-<major>*, /usr/local/cuda, /opt/cuda) and
    the system library folders. None when there is none."""
    dirs = [os.path.join(d, "nvidia", "*", "lib") for d in sites]
    dirs += ld_library_path(env)
    for root in toolkit_roots(env, "%d" % major):
        dirs += [os.path.join(root, sub) for sub in TOOLKIT_LIB_DIRS]
    dirs += list(SYSTEM_LIB_DIRS)
    return libcupti_in(dirs, major)


# -- the workload's CUDA major and the driver's -------------------------------------
def torch_cuda_major(site_dir):
    """The CUDA major the PyTorch in site_dir was built for (its
    torch/version.py, read as text: nothing is imported), or None."""
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+)\.", read_text(os.path.join(site_dir, "torch", "version.py")),
                  re.M)
    return int(m.group(1)) if m else None


def lib_major(dirs, stem):
    """(major, path) of the first <stem>.so.<major> in dirs (glob patterns
    allowed), or (None, None)."""
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, stem + ".so.*"))):
            m = re.search(r"\.so\.(\d+)$", p)
            if m:
                return int(m.group(1)), p
    return None, None


def workload_cuda_major(sites, env):
    """(major, how it was found) from what the workload would load, first
    answer wins: the PyTorch of its site-packages (sites), the CUDA runtime
    wheels there (nvidia/*/lib/libcudart.so.<major>), a libcudart on its
    LD_LIBRARY_PATH, the toolkit at $CUDA_HOME / $CUDA_PATH / $CUDA_ROOT /
    /usr/local/cuda / /opt/cuda. (None, None) when nothing says."""
    for d in sites:
        major = torch_cuda_major(d)
        if major:
            return major, "PyTorch in %s" % d
    major, p = lib_major([os.path.join(d, "nvidia", "*", "lib") for d in sites], "libcudart")
    if major:
        return major, p
    major, p = lib_major(ld_library_path(env), "libcudart")
    if major:
        return major, p
    for root in toolkit_roots(env):
        major = toolkit_major(root)
        if major:
            return major, "the toolkit at %s" % root
    return None, None


def driver_cuda_major():
    """The newest CUDA major the driver supports (cuDriverGetVersion); None
    without a driver, 0 when the driver does not answer."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    v = ctypes.c_int(0)
    try:
        if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return 0
    except AttributeError:
        return 0
    return v.value // 1000
