"""The mainstream install, built for real: an sdist of this checkout, and a
wheel built from that sdist by pip with the CUDA toolkit hidden
(scripts/nocuda.py), as on a machine whose CUDA comes from pip wheels, and
with an earlier build's leftovers planted in the tree.

The wheel must hold the CUPTI library for CUDA 12 and 13 from the header
wheels of pyproject.toml, and every shipped binary must be clean: no rpath,
no path of the build machine, glibc and libstdc++ symbols at the
manylinux2014 floor, and an abi3 tag for the abi3 helper."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import nocuda  # noqa: E402

pytestmark = pytest.mark.slow

# manylinux2014 (glibc 2.17, gcc 4.8's libstdc++)
FLOOR = {"GLIBC": (2, 17), "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7)}
SDIST_NEEDS = ["README.md", "SKILL.md", "LICENSE", "pyproject.toml", "setup.py", "MANIFEST.in",
               "include/graphsignal/probe.h", "include/graphsignal/probe_cuda.h", "csrc/cupti_build.py",
               "csrc/probe_lib.c", "csrc/compat/glibc_compat.h", "csrc/cupti/injection.cpp",
               "csrc/cupti/exports.map", "graphsignal/_native_build.py", "graphsignal/launch/cuda_discovery.py",
               "tests/conftest.py", "tests/support/cupti/test_shim.cpp", "scripts/nocuda.py",
               "graphsignal/schema/signals.schema.json", "graphsignal/fleet/static/index.html",
               "graphsignal/reference/findings.md", "graphsignal/reference/metrics.md",
               "graphsignal/fleet/static/vendor/uPlot.iife.min.js", "graphsignal/fleet/static/vendor/uPlot.LICENSE.txt",
               "scripts/vendor_uplot.py"]


def _run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), p.stdout[-3000:], p.stderr[-3000:])
    return p


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    if subprocess.run([sys.executable, "-c", "import build"], capture_output=True).returncode != 0:
        pytest.skip("the 'build' package is not installed (pip install -e '.[test]' brings it)")
    out = str(tmp_path_factory.mktemp("sdist"))
    # --no-isolation: the sdist needs no compiler and no headers, only setuptools and cffi, which are here
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check", "--outdir", out,
          ROOT], timeout=300)
    (path,) = glob.glob(os.path.join(out, "graphsignal-*.tar.gz"))
    return path


# What earlier builds may leave in a source tree: setuptools' build/ (a stale
# module, a library of a major no longer built) and an editable install's
# graphsignal/lib (a cu13 library built elsewhere, pointing at another venv).
LEFTOVERS = {
    "build/lib.linux-x86_64-cpython-311/graphsignal/stale_module.py": "raise ImportError\n",
    "build/lib.linux-x86_64-cpython-311/graphsignal/lib/libgraphsignal_cupti_cu11.so": "stale",
    "graphsignal/lib/libgraphsignal_cupti_cu13.so": "stale",
    "graphsignal/lib/libgraphsignal_cupti_cu13.so.build-info": '{"libcupti": "/other/venv/libcupti.so.13"}',
    "graphsignal/lib/libgraphsignal_cupti_cu11.so": "stale",
}


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    """Built by pip from the unpacked sdist, with LEFTOVERS planted in it."""
    why = nocuda.available()
    if why:
        pytest.skip("cannot hide the CUDA toolkit here (%s)" % why)
    out = str(tmp_path_factory.mktemp("wheel"))
    with tarfile.open(sdist) as t:
        t.extractall(out, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (src,) = glob.glob(os.path.join(out, "graphsignal-*"))
    for rel, text in LEFTOVERS.items():
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        with open(os.path.join(src, rel), "w") as f:
            f.write(text)
    cmd, env = nocuda.wrap([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", out, src])
    # the project's own build: every native part compiles without a warning (-Wall -Wextra -Werror) or fails it
    p = _run(cmd, env=dict(env, GRAPHSIGNAL_WERROR="1"), timeout=900)
    (path,) = glob.glob(os.path.join(out, "graphsignal-*.whl"))
    unpacked = os.path.join(out, "unpacked")
    with zipfile.ZipFile(path) as z:
        z.extractall(unpacked)
    return {"path": path, "dir": unpacked, "log": p.stdout + p.stderr}


def _shipped_binaries(w):
    return sorted(glob.glob(os.path.join(w["dir"], "graphsignal", "**", "*.so"), recursive=True))


def test_sdist_holds_everything_to_build_and_test(sdist):
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    missing = [n for n in SDIST_NEEDS if n not in names]
    assert not missing
    assert [n for n in names if n.startswith("tests/data/")], "the tests' data files"
    # no build output of the checkout (an editable install builds into graphsignal/lib)
    assert not [n for n in names if n.endswith((".so", ".o", ".pyc")) or n.startswith("graphsignal/lib/")]


def test_wheel_without_toolkit_has_both_cuda_majors_from_the_header_wheels(wheel):
    lib = os.path.join(wheel["dir"], "graphsignal", "lib")
    infos = {}
    for major in (12, 13):
        so = os.path.join(lib, "libgraphsignal_cupti_cu%d.so" % major)
        assert os.path.exists(so), wheel["log"][-3000:]
        with open(so + ".build-info") as f:
            infos[major] = json.load(f)
    # the oldest minor of each major, from pyproject.toml's build requirements, not a toolkit
    # NVTX's headers (one tool interface for every major) from the nvidia-nvtx wheel
    assert infos[12] == {"major": 12, "minor": 0, "nvtx": "nvidia-nvtx 13.0.85",
                         "headers": "nvidia-cuda-cupti-cu12 12.0.146, nvidia-cuda-runtime-cu12 12.0.146"}
    assert infos[13] == {"major": 13, "minor": 0, "headers": "nvidia-cuda-cupti 13.0.85, nvidia-cuda-runtime 13.0.96",
                         "nvtx": "nvidia-nvtx 13.0.85"}
    with open(os.path.join(lib, "build-report.json")) as f:
        report = json.load(f)
    assert report["probes"] == "built" and sorted(report["cupti"]) == ["12", "13"]
    assert os.path.exists(os.path.join(lib, "libgraphsignal_probes.so"))
    # nothing of the build environment's site-packages travels (no libcupti, no headers but probe*.h)
    assert not glob.glob(os.path.join(wheel["dir"], "nvidia"))
    assert sorted(os.listdir(os.path.join(wheel["dir"], "graphsignal", "_include", "graphsignal"))) == [
        "probe.h", "probe_cuda.h", "probe_rocm.h"]


def test_wheel_ships_the_signals_schema(wheel):
    with open(os.path.join(wheel["dir"], "graphsignal", "schema", "signals.schema.json")) as f:
        shipped = json.load(f)
    with open(os.path.join(ROOT, "graphsignal", "schema", "signals.schema.json")) as f:
        assert shipped == json.load(f)


def test_wheel_ships_the_reference_texts_explain_prints(wheel):
    shipped = os.path.join(wheel["dir"], "graphsignal", "reference")
    ours = os.path.join(ROOT, "graphsignal", "reference")
    assert sorted(os.listdir(shipped)) == sorted(os.listdir(ours)) and "findings.md" in os.listdir(ours)


def test_wheel_ships_the_fleet_page_and_graphsignal_export(wheel):
    static = os.path.join(wheel["dir"], "graphsignal", "fleet", "static")
    for name in ("index.html", "app.js", "style.css", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css",
                 "vendor/uPlot.LICENSE.txt"):
        with open(os.path.join(static, name), "rb") as f, \
                open(os.path.join(ROOT, "graphsignal", "fleet", "static", name), "rb") as g:
            assert f.read() == g.read(), name
    with zipfile.ZipFile(wheel["path"]) as z:
        entry = next(n for n in z.namelist() if n.endswith("entry_points.txt"))
        assert "graphsignal-export = graphsignal.cli.export:main" in z.read(entry).decode()


def test_wheel_holds_nothing_an_earlier_build_left(wheel):
    with zipfile.ZipFile(wheel["path"]) as z:
        names = set(z.namelist())
    assert not [n for n in names if "stale_module" in n or "_cu11" in n]
    for major in (12, 13):
        with open(os.path.join(wheel["dir"], "graphsignal", "lib", "libgraphsignal_cupti_cu%d.so" % major), "rb") as f:
            assert f.read(4) == b"\x7fELF"


def test_wheel_is_tagged_abi3(wheel):
    name = os.path.basename(wheel["path"])
    assert re.match(r"graphsignal-[^-]+-cp39-abi3-linux_x86_64\.whl$", name), name
    helpers = glob.glob(os.path.join(wheel["dir"], "graphsignal", "_gsnative*.so"))
    assert [os.path.basename(h) for h in helpers] == ["_gsnative.abi3.so"]


def test_shipped_binaries_have_no_rpath_and_link_cupti_by_soname(wheel):
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("no readelf here")
    bins = _shipped_binaries(wheel)
    assert len(bins) == 5, bins  # the cffi helper, the probe library, the interposer, CUPTI for 12 and 13
    for b in bins:
        dyn = _run([readelf, "-d", b]).stdout
        assert "RPATH" not in dyn and "RUNPATH" not in dyn, (b, dyn)
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn))
        m = re.search(r"_cu(\d+)\.so$", b)
        if m:
            assert {"libcupti.so.%s" % m.group(1), "libstdc++.so.6", "libc.so.6"} <= needed, (b, needed)
        else:
            assert not [n for n in needed if "stdc++" in n or "cupti" in n or "python" in n], (b, needed)


def _strings(path):
    with open(path, "rb") as f:
        return set(re.findall(rb"[\x20-\x7e]{6,}", f.read()))


def test_shipped_binaries_name_no_path_of_the_build_machine(wheel):
    builders = [ROOT, tempfile.gettempdir() + "/", sys.prefix, sys.base_prefix, os.path.expanduser("~"),
                "site-packages", "pip-build-env", "/usr/local/cuda"]
    for b in _shipped_binaries(wheel):
        leaks = [s for s in _strings(b) if any(x.encode() in s for x in builders)]
        assert not leaks, (b, leaks[:5])


def _versions(path):
    """{'GLIBC': {(2, 17), ...}, 'GLIBCXX': ..., 'CXXABI': ...} of the symbols path imports."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    found = {}
    for lib, ver in re.findall(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\b", out):
        found.setdefault(lib, set()).add(tuple(int(x) for x in ver.split(".")))
    return found


def test_shipped_binaries_need_no_newer_glibc_or_libstdcxx_than_manylinux2014(wheel):
    if not shutil.which("objdump"):
        pytest.skip("no objdump here")
    for b in _shipped_binaries(wheel):
        for lib, versions in _versions(b).items():
            too_new = sorted(v for v in versions if v > FLOOR[lib])
            assert not too_new, "%s needs %s %s" % (b, lib, too_new)


def test_abi3_helper_and_probes_import_on_every_python_here(wheel, tmp_path):
    """The wheel's files, used by each interpreter found: the cffi helper
    where that Python has cffi, else the ctypes library; both record."""
    site = str(tmp_path / "site")
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, wheel["path"]],
         timeout=300)
    pythons = [sys.executable] + sorted(set(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")) +
                                            [p for p in (shutil.which("python3.%d" % v) for v in range(9, 15)) if p]))
    code = ("import sys; from graphsignal import probes; h = probes.histogram('x_ns'); h.record(1); "
            "print('%d.%d' % sys.version_info[:2], probes.BACKEND)")
    seen = {}
    for py in pythons:
        ver = subprocess.run([py, "-c", "import sys; print(sys.version_info >= (3, 9))"], capture_output=True,
                             text=True)
        if ver.stdout.strip() != "True":
            continue
        p = _run([py, "-c", code], env=dict(os.environ, PYTHONPATH=site), cwd=str(tmp_path))
        v, backend = p.stdout.split()
        has_cffi = subprocess.run([py, "-c", "import cffi"], capture_output=True, cwd=str(tmp_path)).returncode == 0
        # abi3: the helper built by this Python loads in every Python with cffi
        assert backend == ("cffi" if has_cffi else "ctypes"), (py, v, backend)
        seen[v] = backend
    here = "%d.%d" % sys.version_info[:2]
    assert seen[here] == "cffi"  # this interpreter has cffi (an install requirement)


def test_a_toolkit_build_is_byte_identical_to_the_header_wheels_build(wheel, tmp_path):
    """With the 13.0 toolkit here, building from it gives the wheel's very
    library: the result does not depend on which headers were found."""
    cupti_build = _cupti_build()
    toolkit = [hs for hs in cupti_build.find_header_sets() if hs.source.startswith("CUDA 13.0 toolkit")]
    if not toolkit or not toolkit[0].libcupti or not cupti_build.compiler():
        pytest.skip("no CUDA 13.0 toolkit with libcupti and no C++ compiler here")
    built = cupti_build.build_variant(toolkit[0], str(tmp_path), log=lambda m: None, force=True)
    with open(built, "rb") as a, open(os.path.join(wheel["dir"], "graphsignal", "lib", os.path.basename(built)),
                                      "rb") as b:
        assert a.read() == b.read()


def _cupti_build():
    sys.path.insert(0, os.path.join(ROOT, "csrc"))
    try:
        import cupti_build
    finally:
        sys.path.pop(0)
    return cupti_build


def test_a_warning_fails_only_the_projects_own_builds(tmp_path, monkeypatch):
    """GRAPHSIGNAL_WERROR=1 (.ci/run, the wheel above) makes a warning an
    error that fails the build; a user's build reports it and goes on."""
    cupti_build = _cupti_build()
    if not cupti_build.c_compiler():
        pytest.skip("no C compiler here")
    src = tmp_path / "warns.c"
    src.write_text('#include "%s"\nstatic int unused_here;\n' % cupti_build.PROBE_SOURCE)
    monkeypatch.setattr(cupti_build, "PROBE_SOURCE", str(src))
    monkeypatch.setenv("GRAPHSIGNAL_WERROR", "1")
    with pytest.raises(cupti_build.BuildError) as e:
        cupti_build.build_probe_lib(str(tmp_path))
    assert "unused_here" in str(e.value) and "-Werror" in str(e.value)
    assert not (tmp_path / cupti_build.PROBE_LIB).exists()
    monkeypatch.setenv("GRAPHSIGNAL_WERROR", "0")
    said = []
    assert cupti_build.build_probe_lib(str(tmp_path), said.append) == str(tmp_path / cupti_build.PROBE_LIB)
    assert said == []
