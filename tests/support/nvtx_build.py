"""Builds what the NVTX tests run without a GPU, once per checkout (rebuilt
when a source is newer): the stand-in libcupti (tests/support/cupti/
fake_cupti.cpp), the injection library linked against it by the product's
own build (csrc/cupti_build.py), and the test programs compiled with NVTX
v3's header from the toolkit or the nvidia-nvtx wheel."""
import os
import subprocess
import sys

from support.cbuild import ROOT, cache_dir, cupti_build

FAKE_SOURCE = os.path.join(ROOT, "tests", "support", "cupti", "fake_cupti.cpp")
RANGES_SOURCE = os.path.join(ROOT, "tests", "support", "c", "nvtx_ranges.cpp")
GPU_DRIVER_SOURCE = os.path.join(ROOT, "tests", "support", "cupti", "nvtx_gpu_driver.cpp")


def _stale(out, *sources):
    return not os.path.exists(out) or os.path.getmtime(out) < max(os.path.getmtime(s) for s in sources)


def build():
    """{"lib", "fake", "lib_dir", "ranges", "gpu_driver", "major"}, or None
    (with the reason in "why") where no C++ compiler, CUPTI/CUDA headers or
    NVTX headers are found."""
    cb = cupti_build()
    cxx = cb.compiler()
    sets = cb.find_header_sets()
    hs = cb.pick(sets, 13, need_lib=False) or cb.pick(sets, 12, need_lib=False)
    if not cxx or hs is None:
        return {"why": "no C++ compiler or CUPTI/CUDA headers here"}
    nvtx_inc, _ = cb.find_nvtx_include(hs)
    if not nvtx_inc:
        return {"why": "no NVTX headers (nvtx3/nvToolsExt.h) here"}
    out = cache_dir("nvtx")
    os.makedirs(out, exist_ok=True)
    fake = os.path.join(out, "libcupti.so.%d" % hs.major)
    if _stale(fake, FAKE_SOURCE):
        subprocess.run(cxx + ["-std=c++17", "-O1", "-fPIC", "-shared", "-I", hs.cupti_include, "-I", hs.cuda_include,
                              "-I", cb.SRC, "-idirafter", cb.COMPAT, FAKE_SOURCE,
                              "-Wl,-soname,libcupti.so.%d" % hs.major, "-pthread", "-o", fake], check=True)
    lib = cb.build_variant(hs._replace(libcupti=fake), out, log=lambda m: sys.stderr.write(m + "\n"))
    assert lib, "the injection library did not build against the fake libcupti"
    ranges = os.path.join(out, "nvtx_ranges")
    if _stale(ranges, RANGES_SOURCE):
        subprocess.run(cxx + ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-idirafter", nvtx_inc,
                              RANGES_SOURCE, "-o", ranges, "-pthread", "-ldl"], check=True)
    driver = os.path.join(out, "nvtx_gpu_driver")
    if _stale(driver, GPU_DRIVER_SOURCE, fake):
        subprocess.run(cxx + ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-idirafter", nvtx_inc,
                              GPU_DRIVER_SOURCE, fake, "-o", driver, "-pthread", "-ldl"], check=True)
    return {"lib": lib, "fake": fake, "lib_dir": out, "ranges": ranges, "gpu_driver": driver, "major": hs.major}
