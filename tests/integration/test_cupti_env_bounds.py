"""graphsignal-run checks the CUPTI library's numeric variables before the
workload starts (graphsignal.envcheck.NUMERIC) and the library checks them
again as it starts (csrc/cupti/collector.cpp). The two ranges are held
equal here against the built library itself, run with a stand-in libcupti:
the ends envcheck accepts, the library accepts without a word; one past
them, it refuses with a line that names its own range and default.

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import re

import pytest

from graphsignal import envcheck
from test_cupti_collector import libs, run_child  # noqa: F401  # libs: the fixture, built once per module

CUPTI = sorted(n for n in envcheck.NUMERIC if n.startswith("GRAPHSIGNAL_CUPTI_"))
REFUSED = re.compile(r"(GRAPHSIGNAL_CUPTI_\w+)=(\S+) is not a number in \[(\d+), (\d+)\]; using (\d+)")


def bounds(name):
    return envcheck.NUMERIC[name][1], envcheck.NUMERIC[name][2]


def refusals(libs, values):  # noqa: F811
    """{name: (value, lo, hi, default)} the library said it refused."""
    _, _, err = run_child(libs, [], GRAPHSIGNAL_LOG_LEVEL="warning", **values)
    return {m.group(1): (m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            for m in REFUSED.finditer(err)}


def test_the_variables_checked_are_the_librarys():
    assert CUPTI == ["GRAPHSIGNAL_CUPTI_CALLBACKS", "GRAPHSIGNAL_CUPTI_FLUSH_MS", "GRAPHSIGNAL_CUPTI_HANDOFF",
                     "GRAPHSIGNAL_CUPTI_MAX_BUFFERS", "GRAPHSIGNAL_CUPTI_PINNED", "GRAPHSIGNAL_CUPTI_SAMPLE_MS",
                     "GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS"]


@pytest.mark.parametrize("end", [0, 1])
def test_the_library_accepts_the_ends_envcheck_accepts(libs, end):  # noqa: F811
    values = {n: str(bounds(n)[end]) for n in CUPTI}
    assert all(envcheck.parse(n, v)[1] is None for n, v in values.items())
    assert refusals(libs, values) == {}


def test_the_library_refuses_one_past_the_ends_with_envchecks_range(libs):  # noqa: F811
    above = {n: str(bounds(n)[1] + 1) for n in CUPTI}
    below = {n: str(bounds(n)[0] - 1) for n in CUPTI if bounds(n)[0] > 0}
    for values in (above, below):
        assert all(envcheck.parse(n, v)[0] is None for n, v in values.items())
        got = refusals(libs, values)
        assert sorted(got) == sorted(values)
        for name, (value, lo, hi, default) in got.items():
            assert value == values[name] and (lo, hi) == bounds(name), name
            said = envcheck.NUMERIC[name][4]  # the default as graphsignal-run's line says it
            assert said == "the library's" or int(said) == default, name


def test_graphsignal_run_says_a_retired_variable_once_and_hides_it_from_the_workload(tmp_path):
    import os
    import subprocess
    import sys

    code = "import os; print(os.environ.get('GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS'))"
    env = dict(os.environ, GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS="20")
    p = subprocess.run([sys.executable, "-m", "graphsignal.cli.run", "--listen-port", "0", "--", sys.executable, "-c",
                        code], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "None"
    assert p.stderr.count("GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS is no longer read") == 1, p.stderr[-2000:]
