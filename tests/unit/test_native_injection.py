"""graphsignal.launch.injection: which injection library and which libcupti a
workload gets, decided from fixture trees (a venv, wheels, toolkits) and
a given driver version, so no GPU is needed."""
import logging
import os
import stat

import pytest

from graphsignal.launch import cuda_discovery, injection


def touch(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def executable(path, text):
    touch(path, text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def tree(tmp_path):
    """A venv with torch (CUDA 13) and the cu13 wheels, a console script
    using it, and an install with cu12 and cu13 libraries."""
    venv = tmp_path / "venv"
    sp = venv / "lib" / "python3.12" / "site-packages"
    touch(str(sp / "torch" / "version.py"), "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    touch(str(sp / "nvidia" / "cu13" / "lib" / "libcupti.so.13"))
    touch(str(sp / "nvidia" / "cu13" / "lib" / "libcudart.so.13"))
    executable(str(venv / "bin" / "python3"), "")
    executable(str(venv / "bin" / "serve"), "#!%s\nimport sys\n" % (venv / "bin" / "python3"))
    libs = tmp_path / "lib"
    for m in (12, 13):
        touch(str(libs / ("libgraphsignal_cupti_cu%d.so" % m)))
    env = {"PATH": str(venv / "bin") + ":/usr/bin:/bin", "GRAPHSIGNAL_CUDA_GRAPH_TRACE": "node"}
    return {"venv": venv, "sp": sp, "libs": str(libs), "env": env, "tmp": tmp_path}


def test_console_script_python_torch_major_and_its_wheel_libcupti(tree, monkeypatch):
    monkeypatch.setattr(cuda_discovery, "SYSTEM_LIB_DIRS", ())
    env = dict(tree["env"])
    lib = injection.prepare_injection(env, ["serve", "--port", "8000"], lib_dir=tree["libs"], driver_major=13)
    assert lib == os.path.join(tree["libs"], "libgraphsignal_cupti_cu13.so")
    assert env["CUDA_INJECTION64_PATH"] == lib
    d = env["LD_LIBRARY_PATH"].split(":")[-1]
    assert os.listdir(d) == ["libcupti.so.13"]
    assert os.path.realpath(os.path.join(d, "libcupti.so.13")) == \
        os.path.realpath(str(tree["sp"] / "nvidia" / "cu13" / "lib" / "libcupti.so.13"))
    assert env["GRAPHSIGNAL_CUDA_GRAPH_TRACE"] == "node"  # passed through as the supervisor resolved it


def test_existing_ld_library_path_is_kept_first(tree):
    env = dict(tree["env"], LD_LIBRARY_PATH="/opt/mine")
    injection.prepare_injection(env, ["python3", "x.py"], lib_dir=tree["libs"], driver_major=13)
    assert env["LD_LIBRARY_PATH"].split(":")[0] == "/opt/mine"


def test_cuda12_torch_gets_the_cu12_library(tree, monkeypatch):
    monkeypatch.setattr(cuda_discovery, "SYSTEM_LIB_DIRS", ())
    touch(str(tree["sp"] / "torch" / "version.py"), "cuda = '12.8'\n")
    touch(str(tree["sp"] / "nvidia" / "cuda_cupti" / "lib" / "libcupti.so.12"))
    env = dict(tree["env"])
    lib = injection.prepare_injection(env, ["python3", "-m", "vllm"], lib_dir=tree["libs"], driver_major=13)
    assert lib.endswith("libgraphsignal_cupti_cu12.so")
    d = env["LD_LIBRARY_PATH"].split(":")[-1]
    assert os.listdir(d) == ["libcupti.so.12"]


def test_user_injection_path_is_left_alone(tree):
    env = dict(tree["env"], CUDA_INJECTION64_PATH="/opt/tool/inject.so")
    assert injection.prepare_injection(env, ["serve"], lib_dir=tree["libs"], driver_major=13) is None
    assert env["CUDA_INJECTION64_PATH"] == "/opt/tool/inject.so"
    assert "LD_LIBRARY_PATH" not in env


def test_no_driver_runs_unprofiled_and_says_so_once(tree, caplog):
    said = []
    env = dict(tree["env"])
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        assert injection.prepare_injection(env, ["serve"], said.append, lib_dir=tree["libs"], driver_major=None) is None
    assert len(said) == 1 and "no NVIDIA driver" in said[0]
    assert len([r for r in caplog.records if "no NVIDIA driver" in r.getMessage()]) == 1
    assert "CUDA_INJECTION64_PATH" not in env


def test_missing_library_for_the_major_says_which_and_why(tree):
    os.unlink(os.path.join(tree["libs"], "libgraphsignal_cupti_cu13.so"))
    touch(os.path.join(tree["libs"], "build-report.json"),
          '{"cupti": {"12": "built with ...", "13": "skipped: no CUDA 13 CUPTI headers"}}')
    said = []
    env = dict(tree["env"])
    assert injection.prepare_injection(env, ["serve"], said.append, lib_dir=tree["libs"], driver_major=13) is None
    assert len(said) == 1 and "CUDA 13" in said[0] and "skipped: no CUDA 13 CUPTI headers" in said[0]
    assert injection.rebuild_command(13) in said[0]
    assert "CUDA_INJECTION64_PATH" not in env


def test_missing_libcupti_runs_unprofiled(tree, monkeypatch):
    monkeypatch.setattr(cuda_discovery, "SYSTEM_LIB_DIRS", ())
    monkeypatch.setattr(cuda_discovery, "toolkit_roots", lambda environ, versions=None, extra=(): [])
    # only the fixture venv: the interpreter running the tests may have the wheels
    monkeypatch.setattr(injection, "workload_pythons", lambda command, env: [str(tree["venv"] / "bin" / "python3")])
    os.unlink(str(tree["sp"] / "nvidia" / "cu13" / "lib" / "libcupti.so.13"))
    said = []
    env = dict(tree["env"])
    assert injection.prepare_injection(env, ["serve"], said.append, lib_dir=tree["libs"], driver_major=13) is None
    assert len(said) == 1 and "libcupti.so.13" in said[0]


def test_no_built_library_says_how_to_get_one(tree):
    said = []
    empty = str(tree["tmp"] / "empty")
    os.makedirs(empty)
    assert injection.prepare_injection(dict(tree["env"]), ["serve"], said.append, lib_dir=empty,
                                    driver_major=13) is None
    # a rebuild, as this install was made; not "install graphsignal[cu12]", which is what was done
    assert len(said) == 1 and injection.rebuild_command(13) in said[0]


def test_without_python_hints_the_driver_picks_the_newest_supported(tree, monkeypatch):
    monkeypatch.setattr(injection, "workload_cuda_major", lambda sites, env: (None, None))
    monkeypatch.setattr(injection, "find_libcupti", lambda major, sites, env: "/x/libcupti.so.%d" % major)
    monkeypatch.setattr(injection, "loadable_dir", lambda p, m: "/tmp/gs-cupti")
    env = dict(tree["env"])
    assert injection.prepare_injection(env, ["./app"], lib_dir=tree["libs"], driver_major=12).endswith("_cu12.so")
    env = dict(tree["env"])
    assert injection.prepare_injection(env, ["./app"], lib_dir=tree["libs"], driver_major=13).endswith("_cu13.so")


def test_torch_version_forms():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for text, want in (("cuda = '12.4'\n", 12), ("cuda: Optional[str] = '13.0'\n", 13), ("cuda = None\n", None)):
            touch(os.path.join(d, "torch", "version.py"), text)
            assert cuda_discovery.torch_cuda_major(d) == want


def test_env_shebang_is_followed(tree):
    script = executable(str(tree["tmp"] / "bin2" / "tool"), "#!/usr/bin/env python3\nprint(1)\n")
    env = dict(tree["env"])
    env["PATH"] = os.path.dirname(script) + ":" + env["PATH"]
    assert injection.workload_pythons(["tool"], env)[0] == str(tree["venv"] / "bin" / "python3")


def test_cuda_trace_off_keeps_cupti_out_and_the_library_loadable_for_nvtx(tree, monkeypatch):
    # --cuda-trace off: everything but CUDA_INJECTION64_PATH, so CUPTI never attaches to the workload
    monkeypatch.setattr(cuda_discovery, "SYSTEM_LIB_DIRS", ())
    env = dict(tree["env"])
    lib = injection.prepare_injection(env, ["serve"], lib_dir=tree["libs"], driver_major=13, activity=False)
    assert lib == os.path.join(tree["libs"], "libgraphsignal_cupti_cu13.so")
    assert "CUDA_INJECTION64_PATH" not in env
    assert os.listdir(env["LD_LIBRARY_PATH"].split(":")[-1]) == ["libcupti.so.13"]  # the library links it
    on = dict(tree["env"])
    assert injection.prepare_injection(on, ["serve"], lib_dir=tree["libs"], driver_major=13) == lib
    assert on["CUDA_INJECTION64_PATH"] == lib


def test_cuda_trace_off_with_nothing_to_inject_says_what_is_lost(tree, caplog):
    said = []
    env = dict(tree["env"])
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        assert injection.prepare_injection(env, ["serve"], said.append, lib_dir=tree["libs"], driver_major=None,
                                           activity=False) is None
    # said once, as the traced run says its own loss, but of what off still collects: NVTX ranges
    assert len(said) == 1 and "no NVIDIA driver" in said[0] and "NVTX ranges are not collected" in said[0]
    assert "CUDA activity" not in said[0] and "CUDA_INJECTION64_PATH" not in env
