"""Builds what the NVTX tests run without a GPU: the test programs compiled
with NVTX v3's header from the toolkit or the nvidia-nvtx wheel, once per
checkout (rebuilt when a source is newer), beside the session's stand-in
libcupti and the injection library linked against it
(support.fake_cupti)."""
import os

from support import fake_cupti
from support.cbuild import ROOT, build_to, cache_dir, cupti_build

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
    shared = fake_cupti.build()  # the session's stand-in libcupti and injection library
    fake, lib = shared["fake"], shared["lib"]
    ranges = os.path.join(out, "nvtx_ranges")
    if _stale(ranges, RANGES_SOURCE):
        build_to(ranges, cxx + ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-idirafter", nvtx_inc,
                                RANGES_SOURCE, "-pthread", "-ldl"])
    driver = os.path.join(out, "nvtx_gpu_driver")
    if _stale(driver, GPU_DRIVER_SOURCE, fake):
        build_to(driver, cxx + ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-idirafter", nvtx_inc,
                                GPU_DRIVER_SOURCE, fake, "-pthread", "-ldl"])
    return {"lib": lib, "fake": fake, "lib_dir": os.path.dirname(fake), "ranges": ranges, "gpu_driver": driver,
            "major": hs.major}
