"""include/graphsignal/probe.h is vendored into other people's builds, many
of which turn warnings into errors: it must build warning-free with every C
and C++ compiler on the machine at every optimization level (gcc 12 warned
-Wformat-truncation at -O1 and -Os, issue 40), used the way its users use
it (programs that register, record and profile, not an empty main: unused
inline functions are never analyzed)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = [os.path.join(ROOT, "tests", "support", "c", f) for f in ("spec_example.c", "probe_exact.c")]
LEVELS = ["-O0", "-O1", "-O2", "-O3", "-Os", "-Og"]
# (compiler, language flags): the C compilers as C, the C++ ones reading the same programs as C++
COMPILERS = [("gcc", ["-std=gnu99"]), ("g++", ["-x", "c++"]), ("clang", ["-std=gnu99"]), ("clang++", ["-x", "c++"])]
FOUND = [(c, flags) for c, flags in COMPILERS if shutil.which(c)]


def test_some_compiler_is_here():
    assert FOUND, "no C compiler on PATH"


@pytest.mark.parametrize("compiler,flags", FOUND, ids=[c for c, _ in FOUND])
@pytest.mark.parametrize("level", LEVELS)
def test_the_header_builds_with_every_warning_an_error(compiler, flags, level, tmp_path):
    for src in PROGRAMS:
        p = subprocess.run([compiler] + flags + [level, "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "include"),
                            "-c", src, "-o", str(tmp_path / "out.o")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, "%s %s %s:\n%s" % (compiler, level, os.path.basename(src), p.stderr[-2000:])
