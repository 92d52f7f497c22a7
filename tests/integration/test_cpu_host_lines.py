"""On a host without NVIDIA's driver (a laptop, a CPU runner) a run says
nothing about the missing driver at the default log level: it is no
fault there (`--check` says what a GPU host would get). What the user
asked for by name and cannot have is one line: `--nvtx on` without a
driver says that NVTX ranges are not collected, and why."""
import ctypes
import sys

import pytest

from support.gsrun import quiet_env, run_wrapped


def _driver_here():
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


pytestmark = pytest.mark.skipif(_driver_here(), reason="an NVIDIA driver is installed here")


def _stderr(options=()):
    env = quiet_env(GRAPHSIGNAL_DISABLE_VERSION_CHECK="1")
    env.pop("GRAPHSIGNAL_LOG_LEVEL", None)  # the default level: what a user sees
    proc, _ = run_wrapped([sys.executable, "-c", "print('done')"], options=options, env=env)
    assert proc.returncode == 0 and proc.stdout == b"done\n", proc.stderr
    return [ln for ln in proc.stderr.decode().splitlines() if ln.startswith("graphsignal")]


def test_a_run_on_a_cpu_host_says_nothing_of_the_driver():
    lines = _stderr()
    assert not [ln for ln in lines if "NVIDIA" in ln or "driver" in ln], lines


def test_nvtx_asked_for_without_a_driver_is_one_line_that_says_why():
    lines = _stderr(["--nvtx", "on"])
    said = [ln for ln in lines if "NVTX" in ln]
    assert len(said) == 1 and "not collected" in said[0] and "driver" in said[0], lines
    assert len([ln for ln in lines if "driver" in ln]) == 1, lines
