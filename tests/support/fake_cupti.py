"""The stand-in libcupti (tests/support/cupti/fake_cupti.cpp) and the
injection library linked against it by the product's own build
(csrc/cupti_build.py), built afresh once per test session and shared by
every test that runs them (the collector, ring, environment-bounds, diff
and NVTX tests): each of those modules used to build the same pair again,
some 25 s a time."""
import os
import sys

from support.cbuild import ROOT, build_to, cache_dir, cupti_build

FAKE_SOURCE = os.path.join(ROOT, "tests", "support", "cupti", "fake_cupti.cpp")
_built = {}


def build():
    """{"fake", "lib", "major", "header_set"}, or {"why": ...} where no C++
    compiler or CUPTI/CUDA headers are found."""
    if _built:
        return _built
    cb = cupti_build()
    cxx = cb.compiler()
    sets = cb.find_header_sets()
    hs = cb.pick(sets, 13, need_lib=False) or cb.pick(sets, 12, need_lib=False)
    if not cxx or hs is None:
        _built["why"] = "no C++ compiler or CUPTI/CUDA headers here"
        return _built
    out = cache_dir("fake-cupti")
    os.makedirs(out, exist_ok=True)
    fake = os.path.join(out, "libcupti.so.%d" % hs.major)
    build_to(fake, cxx + ["-std=c++17", "-O1", "-fPIC", "-shared", "-I", hs.cupti_include, "-I", hs.cuda_include,
                          "-I", cb.SRC, "-idirafter", cb.COMPAT, FAKE_SOURCE,
                          "-Wl,-soname,libcupti.so.%d" % hs.major, "-pthread"])
    lib = cb.build_variant(hs._replace(libcupti=fake), out, log=lambda m: sys.stderr.write(m + "\n"), force=True)
    assert lib, "the injection library did not build against the fake libcupti"
    _built.update(fake=fake, lib=lib, major=hs.major, header_set=hs)
    return _built
