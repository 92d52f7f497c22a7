"""The NVTX path-interning room (csrc/cupti/nvtx_paths.h) from hand-made
names, without a ring, NVTX or a GPU: the library's own PathTable, compiled
into the test driver beside the translator's (tests/support/cupti/
nvtx_paths_shim.cpp), called in-process through ctypes. The workload's
names are untrusted: what a frame shows, how deep and long a path gets,
and how many there are, are all bounded here.

Skips where no C++ compiler or CUPTI/CUDA headers are found (the driver is
built with the library's own build)."""
import ctypes

import pytest

from support.cbuild import cupti_shim

NAMED, OTHER, DEEPER = 0, 1, 2


@pytest.fixture(scope="module")
def lib():
    u16, u32, u64, vp = ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
    sigs = {
        "gs_paths_new": ([], vp),
        "gs_paths_free": ([vp], None),
        "gs_paths_lookup": ([vp, u16, u32, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int], u32),
        "gs_paths_size": ([vp], u32),
        "gs_paths_text": ([vp, u32, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_long),
        "gs_paths_info": ([vp, u32, ctypes.POINTER(u32)], ctypes.c_int),
        "gs_paths_add_gpu": ([vp, u32, u64], None),
        "gs_paths_add_host": ([vp, u32, u64], None),
        "gs_paths_sums": ([vp, u32, ctypes.POINTER(u64)], ctypes.c_int),
        "gs_paths_problem": ([vp, ctypes.c_int], u64),
        "gs_paths_limits": ([ctypes.POINTER(u64)], None),
    }
    return cupti_shim(sigs)


class Paths:
    """One PathTable with one thread's cache."""

    def __init__(self, lib):
        self.lib = lib
        self.h = lib.gs_paths_new()
        assert self.h
        limits = (ctypes.c_uint64 * 7)()
        lib.gs_paths_limits(limits)
        (self.max_paths, self.max_depth, self.max_bytes, self.max_name, self.max_domains, self.slots,
         self.names_over_cap) = list(limits)

    def close(self):
        self.lib.gs_paths_free(self.h)

    def lookup(self, name, parent=0, domain=0, cache=True):
        b = name.encode() if isinstance(name, str) else name
        return self.lib.gs_paths_lookup(self.h, domain, parent, b, len(b), 1 if cache else 0)

    def nest(self, *names, domain=0):
        p = 0
        for n in names:
            p = self.lookup(n, p, domain)
        return p

    def text(self, path):
        buf = ctypes.create_string_buffer(1024)
        n = self.lib.gs_paths_text(self.h, path, buf, 1024)
        assert n >= 0, "path %d was not handed out" % path
        return buf.raw[:n].decode()

    def info(self, path):
        out = (ctypes.c_uint32 * 4)()
        assert self.lib.gs_paths_info(self.h, path, out)
        return dict(zip(("parent", "domain", "kind", "depth"), list(out)))

    def sums(self, path):
        out = (ctypes.c_uint64 * 4)()
        assert self.lib.gs_paths_sums(self.h, path, out)
        return list(out)

    def size(self):
        return self.lib.gs_paths_size(self.h)

    def over_cap(self):
        return self.lib.gs_paths_problem(self.h, self.names_over_cap)


@pytest.fixture
def paths(lib):
    p = Paths(lib)
    yield p
    p.close()


def test_a_path_is_its_domain_parent_and_name_and_the_cache_agrees(paths):
    step = paths.lookup("step")
    fwd = paths.lookup("forward", step)
    assert step and fwd and step != fwd
    assert paths.text(step) == "step" and paths.text(fwd) == "step/forward"
    assert paths.info(fwd) == {"parent": step, "domain": 0, "kind": NAMED, "depth": 2}
    # the same question, the same answer: cached, uncached, again
    for cache in (True, False, True):
        assert paths.lookup("step", cache=cache) == step
        assert paths.lookup("forward", step, cache=cache) == fwd
    assert paths.lookup("forward") not in (step, fwd)  # another parent
    other_domain = paths.lookup("step", domain=3)
    assert other_domain != step and paths.text(other_domain) == "step"
    assert paths.info(other_domain)["domain"] == 3
    assert paths.size() == 5  # 0 is no path; four made


def test_names_are_told_apart_by_their_bytes(paths):
    seen = {}
    for i in range(3000):  # enough to fill the per-thread cache's slots many times over
        name = "n%d" % i
        p = paths.lookup(name)
        assert p not in seen, (name, seen.get(p))
        seen[p] = name
    for p, name in list(seen.items())[::7]:
        assert paths.lookup(name) == p and paths.lookup(name, cache=False) == p
        assert paths.text(p) == name
    assert paths.lookup("n1\x00") != paths.lookup("n1")  # a length, not a C string


def test_a_frame_shows_no_control_bytes_and_no_separator_inside_a_name(paths):
    p = paths.lookup("a/b\tc\x7f")
    assert paths.text(p) == "a|b?c?"
    assert paths.info(p)["depth"] == 1  # one level, whatever its text
    assert paths.text(paths.lookup("")) == "(no message)"
    assert paths.text(paths.lookup("", paths.lookup("x"))) == "x/(no message)"


def test_deep_nesting_folds_into_one_frame_below_the_depth_cap(paths):
    p, made = 0, []
    for level in range(paths.max_depth + 10):
        p = paths.lookup("d%d" % level, p)
        made.append(p)
    capped = made[paths.max_depth - 1]
    assert paths.text(capped) == "/".join("d%d" % i for i in range(paths.max_depth))
    deeper = made[paths.max_depth]
    assert paths.text(deeper) == paths.text(capped) + "/..."
    assert paths.info(deeper)["kind"] == DEEPER
    assert set(made[paths.max_depth:]) == {deeper}  # every level below is the one frame
    assert paths.lookup("other name", capped) == deeper
    assert paths.over_cap() == 0


def test_a_long_path_is_cut_at_a_whole_utf8_character(paths):
    name = "\u4e2d" * 40  # 120 bytes, 3 per character
    p = paths.nest(name, name, name)
    text = paths.text(p).encode()
    assert len(text) <= paths.max_bytes
    text.decode("utf-8")  # no broken character
    assert paths.text(p).startswith(name + "/" + name + "/")


def test_a_name_over_the_name_cap_is_cut_before_it_is_interned(paths):
    long_a = "\u00fc" * 100  # 200 bytes, 2 per character
    long_b = long_a[:64] + "tail"  # the same first 128 bytes
    p = paths.lookup(long_a)
    assert paths.lookup(long_b) == p
    assert paths.text(p).encode() == ("\u00fc" * 64).encode()
    assert len(paths.text(p).encode()) == paths.max_name


def test_distinct_paths_stop_at_the_cap_and_the_rest_count_in_other(paths):
    first = [paths.lookup("p%d" % i) for i in range(paths.max_paths)]
    assert len(set(first)) == paths.max_paths and paths.over_cap() == 0
    extra = [paths.lookup("q%d" % i) for i in range(25)]
    other = extra[0]
    assert set(extra) == {other} and paths.text(other) == "(other)"
    assert paths.info(other)["kind"] == OTHER
    assert paths.over_cap() == 25
    # each domain has its own "(other)"; a known path is still found
    other5 = paths.lookup("q0", domain=5)
    assert other5 not in (other, 0) and paths.text(other5) == "(other)" and paths.info(other5)["domain"] == 5
    assert paths.lookup("p7") == first[7]
    child = paths.lookup("child", first[0])
    assert child == other  # nested or not, a new name past the cap is "(other)"
    assert paths.over_cap() == 27
    assert paths.size() <= paths.slots


def test_gpu_time_goes_only_to_paths_that_were_handed_out(paths):
    p = paths.lookup("kernel range")
    paths.lib.gs_paths_add_gpu(paths.h, p, 1000)
    paths.lib.gs_paths_add_gpu(paths.h, p, 500)
    paths.lib.gs_paths_add_host(paths.h, p, 70)
    for bad in (0, paths.size(), paths.size() + 1, 2**32 - 1):
        paths.lib.gs_paths_add_gpu(paths.h, bad, 123)  # never handed out: ignored, not a write out of bounds
    assert paths.sums(p) == [70, 1, 1500, 2]
