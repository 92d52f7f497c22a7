"""Build: the cffi helper (graphsignal._gsnative, from include/graphsignal/
probe.h), a copy of the probe headers inside the package, the probe library
for Pythons without cffi, and the CUPTI injection library for every CUDA
major whose headers can be found (csrc/cupti_build.py; a missing toolchain
skips that part with a message; GRAPHSIGNAL_WERROR=1, the project's own
builds, makes every warning an error).

The result depends only on the sources and the headers found, never on what
an earlier build left: setuptools works in a fresh temporary build folder
(not ./build; --build-base still chooses one), and the native libraries are
built in a temporary folder and replace the package's lib/ as a whole.
pyproject.toml brings CUDA 12 and 13 headers as build requirements.
"""
import atexit
import importlib.util
import os
import re
import shutil
import sys
import sysconfig
import tempfile

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    from setuptools.command.build import build
except ImportError:  # setuptools < 62.4 (a --no-build-isolation build on an older machine)
    from distutils.command.build import build

HERE = os.path.dirname(os.path.abspath(__file__))
GLIBC_COMPAT = os.path.join(HERE, "csrc", "compat", "glibc_compat.h")
NATIVE_BUILD = os.path.join(HERE, "csrc", "cupti_build.py")
NATIVE_OUTPUTS = re.compile(r"^(libgraphsignal_.*\.so(\.build-info)?|build-report\.json|\.tmp-.*)$")


def _version():
    ns = {}
    with open(os.path.join(HERE, "graphsignal", "__init__.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


def _native_build():
    """csrc/cupti_build.py, loaded by its path (csrc/ is no package)."""
    spec = importlib.util.spec_from_file_location("graphsignal_cupti_build", NATIVE_BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _abi3():
    """Whether cffi compiles the helper for the stable ABI here (its own
    rule: not on debug or free-threaded builds)."""
    if hasattr(sys, "gettotalrefcount") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    try:
        from cffi import recompiler
    except ImportError:
        return False
    return bool(getattr(recompiler, "USE_LIMITED_API", False))


def _replace_native(built_dir, lib_dir):
    """lib_dir's native libraries become exactly those in built_dir: each
    replaced atomically (a running workload may have the old one mapped),
    leftovers of earlier builds removed."""
    os.makedirs(lib_dir, exist_ok=True)
    new = set(os.listdir(built_dir))
    for name in os.listdir(lib_dir):
        if NATIVE_OUTPUTS.match(name) and name not in new:
            os.unlink(os.path.join(lib_dir, name))
    for name in sorted(new):
        staged = os.path.join(lib_dir, ".tmp-%d-%s" % (os.getpid(), name))
        shutil.copy2(os.path.join(built_dir, name), staged)
        os.replace(staged, os.path.join(lib_dir, name))


def _build_native(package_dir):
    """Copies the headers into the package and builds the native libraries
    into package_dir/lib; never fails the install for a missing CUDA."""
    inc_src = os.path.join(HERE, "include", "graphsignal")
    inc_dst = os.path.join(package_dir, "_include", "graphsignal")
    os.makedirs(inc_dst, exist_ok=True)
    for name in os.listdir(inc_src):
        if name.endswith(".h"):
            shutil.copy2(os.path.join(inc_src, name), os.path.join(inc_dst, name))
    work = tempfile.mkdtemp(prefix="graphsignal-native-")
    try:
        _native_build().build_all(work, log=lambda m: print("graphsignal: " + m))
        _replace_native(work, os.path.join(package_dir, "lib"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Build(build):
    def finalize_options(self):
        if self.build_base == "build":  # the default: a fresh folder instead of ./build's leftovers
            self.build_base = tempfile.mkdtemp(prefix="graphsignal-build-")
            atexit.register(shutil.rmtree, self.build_base, True)
        build.finalize_options(self)


class BuildExt(build_ext):
    """The cffi helper without the build machine's paths: no rpath to this
    Python's lib folder (LDSHARED of a shared-libpython build carries one),
    no absolute source paths, and the same glibc floor as the native
    libraries."""

    def build_extensions(self):
        self.compiler.linker_so = [a for a in self.compiler.linker_so if not a.startswith(("-Wl,-rpath", "-Wl,-R"))]
        for ext in self.extensions:
            ext.runtime_library_dirs = []
            # Python's CFLAGS may carry -g: debug info names the build folder and this Python's headers
            flags = ["-g0", "-Wall", "-Wextra", "-ffile-prefix-map=%s=." % HERE,
                     "-ffile-prefix-map=%s=." % os.path.abspath(self.build_temp)]
            if _native_build().strict():
                flags.append("-Werror")
            if os.path.exists(GLIBC_COMPAT):
                flags = ["-include", GLIBC_COMPAT] + flags
            ext.extra_compile_args = list(ext.extra_compile_args or []) + flags
        build_ext.build_extensions(self)


class BuildPy(build_py):
    def run(self):
        build_py.run(self)
        _build_native(os.path.join(self.build_lib, "graphsignal"))
        if getattr(self, "editable_mode", False):
            _build_native(os.path.join(HERE, "graphsignal"))


setup(
    name="graphsignal",
    version=_version(),
    description="GPU profiler for AI agents: CUPTI activity, probes, NVML telemetry and engine metrics "
                "served as JSON",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["graphsignal", "graphsignal.*"]),
    package_data={"graphsignal": ["_include/graphsignal/*.h", "schema/signals.schema.json", "reference/*.md",
                                  "fleet/static/*.html", "fleet/static/*.js", "fleet/static/*.css",
                                  "fleet/static/vendor/*"]},
    include_package_data=False,
    cffi_modules=["graphsignal/_native_build.py:ffibuilder"],
    setup_requires=["cffi>=1.15"],
    install_requires=[
        "numpy>=1.21",
        "cffi>=1.15",
        "psutil>=5.8",
        "requests>=2.25",
        "orjson>=3.6",
        "werkzeug>=2.0",
        "nvidia-ml-py>=11.450",
        "prometheus_client>=0.12",
    ],
    # Runtime libcupti for workloads whose own environment has none (a
    # PyTorch or vLLM install brings its own); the build needs neither.
    extras_require={
        "cu12": ["nvidia-cuda-cupti-cu12; sys_platform == 'linux'",
                 "nvidia-cuda-runtime-cu12; sys_platform == 'linux'"],
        "cu13": ["nvidia-cuda-cupti; sys_platform == 'linux'", "nvidia-cuda-runtime; sys_platform == 'linux'"],
        # OTLP/HTTP metric export (GRAPHSIGNAL_OTLP=1): OpenTelemetry's own message types
        "otlp": ["opentelemetry-proto>=1.20"],
        # graphsignal-server's app under a production WSGI server (README)
        "server": ["waitress>=2.1"],
        # graphsignal-server on PostgreSQL (--database postgresql://...): psycopg 3's binary wheel brings libpq
        "server-pg": ["psycopg[binary]>=3.1"],
        "test": ["pytest>=7", "hypothesis>=6", "build>=1", "jsonschema>=4", "opentelemetry-proto>=1.20",
                 "waitress>=2.1", "psycopg[binary]>=3.1", "pytest-xdist>=3"],
    },
    entry_points={
        "console_scripts": [
            "graphsignal-run=graphsignal.cli.run:main",
            "graphsignal-top=graphsignal.cli.top:main",
            "graphsignal-diff=graphsignal.cli.diff:main",
            "graphsignal-server=graphsignal.cli.server:main",
            "graphsignal-export=graphsignal.cli.export:main",
        ]
    },
    cmdclass={"build": Build, "build_ext": BuildExt, "build_py": BuildPy},
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if _abi3() else {},
    zip_safe=False,
)
