"""graphsignal-run -V / --check and graphsignal-top -V, and the commands
the hints name (a rebuild as the install was made)."""
import io
import json
import os
import subprocess
import sys

import pytest

from graphsignal import __version__
from graphsignal.cli import doctor
from graphsignal.launch import cuda_discovery, injection
from graphsignal.cli.run import parse_args


def write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.fixture
def lib_dir(tmp_path):
    d = tmp_path / "lib"
    so = write(str(d / "libgraphsignal_cupti_cu13.so"))
    write(so + ".build-info", json.dumps({"major": 13, "minor": 0,
                                          "headers": "nvidia-cuda-cupti 13.0.85, nvidia-cuda-runtime 13.0.96"}))
    write(str(d / "build-report.json"), json.dumps({"probes": "built", "cupti": {
        "12": "skipped: no CUDA 12 CUPTI headers; pip and uv bring ...",
        "13": "built with the headers of nvidia-cuda-cupti 13.0.85, nvidia-cuda-runtime 13.0.96"}}))
    return str(d)


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags(flag):
    for mod, want in (("graphsignal.cli.run", "graphsignal-run %s\n" % __version__),
                      ("graphsignal.cli.top", "graphsignal-top %s\n" % __version__)):
        p = subprocess.run([sys.executable, "-m", mod, flag], capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stdout) == (0, want), p.stderr


def test_check_parses_alone_and_v_is_not_taken_from_the_command():
    assert parse_args(["--check"]).check
    cfg = parse_args(["python3", "-V"])
    assert cfg.command == ("python3", "-V") and not cfg.show_version


def test_check_names_each_variant_its_headers_and_what_is_missing(lib_dir, monkeypatch):
    monkeypatch.setattr(cuda_discovery, "SYSTEM_LIB_DIRS", ())
    out = io.StringIO()
    n = doctor.check(environ={"PATH": os.environ["PATH"]}, lib_dir=lib_dir, driver_major=13, out=out)
    text = out.getvalue()
    assert "cu13: %s, built with the headers of nvidia-cuda-cupti 13.0.85, nvidia-cuda-runtime 13.0.96" % (
        os.path.join(lib_dir, "libgraphsignal_cupti_cu13.so")) in text
    assert "MISSING: cu12: no library (at install time: skipped: no CUDA 12 CUPTI headers" in text
    assert "fix: with a C++ compiler (g++), rebuild: %s" % injection.rebuild_command(12) in text
    assert "NVIDIA driver: supports CUDA 13" in text
    assert "from graphsignal import probes: works" in text
    assert n >= 1 and text.rstrip().splitlines()[-1].startswith("missing: cu12")


def test_check_without_driver_says_so_and_what_a_workload_would_get(lib_dir):
    out = io.StringIO()
    assert doctor.check(environ=dict(os.environ), lib_dir=lib_dir, driver_major=None, out=out) >= 1
    text = out.getvalue()
    assert "MISSING: no NVIDIA driver (libcuda.so.1 does not load)" in text
    assert "A Python workload here (" in text


def test_check_without_driver_or_toolkit_words_it_plainly(lib_dir, monkeypatch):
    # before: "CUDA 13 (from the driver (CUDA 0))", a driver that is not there
    monkeypatch.setattr(cuda_discovery, "toolkit_roots", lambda *a, **k: [])
    out = io.StringIO()
    doctor.check(environ={"PATH": "/usr/bin:/bin"}, lib_dir=lib_dir, driver_major=None, out=out)
    text = out.getvalue()
    assert "CUDA 0" not in text and "from the driver" not in text, text
    assert "no NVIDIA driver, so a run here profiles no GPU activity; with a driver it would get:" in text
    assert "CUDA 13 (from the newest CUPTI library built, since the driver's CUDA version is unknown)" in text


@pytest.mark.skipif(injection.driver_cuda_major() is not None, reason="this host has an NVIDIA driver")
def test_check_on_this_host_without_a_driver_says_nothing_is_profiled_and_no_cuda_0():
    p = subprocess.run([sys.executable, "-m", "graphsignal.cli.run", "--check"], capture_output=True, text=True,
                       timeout=120)
    print(p.stdout)
    assert p.returncode == 1 and "CUDA 0" not in p.stdout and "would load" not in p.stdout, p.stdout
    assert "MISSING: no NVIDIA driver" in p.stdout
    assert "no NVIDIA driver, so a run here profiles no GPU activity" in p.stdout


def test_check_cli_exit_status_follows_what_is_missing():
    p = subprocess.run([sys.executable, "-m", "graphsignal.cli.run", "--check"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == (1 if "MISSING:" in p.stdout else 0), p.stdout + p.stderr
    for major in injection.SUPPORTED_MAJORS:
        assert ("  cu%d: " % major) in p.stdout or ("MISSING: cu%d: " % major) in p.stdout


def test_rebuild_command_follows_the_install(tmp_path, monkeypatch):
    monkeypatch.setattr(injection, "_installed_from", lambda: (None, False))
    assert injection.rebuild_command(12, prefix=str(tmp_path), executable="/v/bin/python") == \
        "/v/bin/python -m pip install --force-reinstall --no-deps --no-cache-dir 'graphsignal[cu12]'"
    monkeypatch.setattr(injection, "_installed_from", lambda: ("file:///src/graphsignal", True))
    assert injection.rebuild_command(13, prefix=str(tmp_path), executable="/v/bin/python") == \
        "/v/bin/python -m pip install --force-reinstall --no-deps --no-cache-dir -e '/src/graphsignal'"
    write(str(tmp_path / "uv-receipt.toml"))
    monkeypatch.setattr(injection, "_installed_from", lambda: (None, False))
    assert injection.rebuild_command(12, prefix=str(tmp_path)) == \
        "uv tool install --reinstall --no-cache 'graphsignal[cu12]'"


def test_missing_libcupti_hint_names_the_workloads_python():
    hint = injection.missing_libcupti_hint(12, "/venv/bin/python3")
    assert hint.startswith("/venv/bin/python3 -m pip install 'nvidia-cuda-cupti-cu12==12.*'")
    assert "'nvidia-cuda-cupti==13.*'" in injection.missing_libcupti_hint(13)
