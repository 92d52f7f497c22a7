"""Build: the cffi helper (graphsignal._gsnative, from include/graphsignal/
probe.h), a copy of the probe headers inside the package, and the CUPTI
injection library for every CUDA major whose headers can be found
(csrc/build_native.py; a missing toolchain skips that part with a message)."""
import os
import shutil
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
    ns = {}
    with open(os.path.join(HERE, "graphsignal", "__init__.py")) as f:
        exec(f.read(), ns)
    return ns["__version__"]


def _build_native(package_dir):
    """Copies the headers into the package and builds the native libraries
    into package_dir/lib; never fails the install for a missing CUDA."""
    inc_src = os.path.join(HERE, "include", "graphsignal")
    inc_dst = os.path.join(package_dir, "_include", "graphsignal")
    os.makedirs(inc_dst, exist_ok=True)
    for name in os.listdir(inc_src):
        if name.endswith(".h"):
            shutil.copy2(os.path.join(inc_src, name), os.path.join(inc_dst, name))
    sys.path.insert(0, os.path.join(HERE, "csrc"))
    try:
        import build_native
    finally:
        sys.path.pop(0)
    build_native.build_all(os.path.join(package_dir, "lib"), log=lambda m: print("graphsignal: " + m))


class BuildPy(build_py):
    def run(self):
        build_py.run(self)
        _build_native(os.path.join(self.build_lib, "graphsignal"))
        if self.editable_mode:
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
    package_data={"graphsignal": ["_include/graphsignal/*.h", "lib/*.so"]},
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
    extras_require={
        "cu12": ["nvidia-cuda-cupti-cu12", "nvidia-cuda-runtime-cu12"],
        "cu13": ["nvidia-cuda-cupti", "nvidia-cuda-runtime"],
        "test": ["pytest>=7", "hypothesis>=6"],
    },
    entry_points={
        "console_scripts": [
            "graphsignal-run=graphsignal.cli.run:main",
            "graphsignal-top=graphsignal.cli.top:main",
            "graphsignal-server=graphsignal.cli.server:main",
        ]
    },
    cmdclass={"build_py": BuildPy},
    zip_safe=False,
)
