"""How graphsignal-run makes NVTX calls reach the injection library: the
--nvtx setting (off, on, gpu; GRAPHSIGNAL_NVTX also 0 and 1) resolved once,
and NVTX_INJECTION64_PATH set beside the CUDA injection, never over one
the user set (Nsight Systems), and only for a library built with NVTX."""
import json
import logging

import pytest

from graphsignal import config
from graphsignal.cli import run as cli_run
from graphsignal.launch import injection


def lib_with(tmp_path, nvtx):
    lib = tmp_path / "libgraphsignal_cupti_cu13.so"
    lib.write_bytes(b"")
    (tmp_path / "libgraphsignal_cupti_cu13.so.build-info").write_text(json.dumps(
        {"major": 13, "minor": 0, "headers": "x", "nvtx": "nvidia-nvtx 13.0.85" if nvtx else None}))
    return str(lib)


def test_the_setting_takes_words_and_numbers_and_the_flag_wins(caplog):
    assert config.from_environ({}).nvtx == "on"
    assert config.from_environ({"GRAPHSIGNAL_NVTX": "0"}).nvtx == "off"
    assert config.from_environ({"GRAPHSIGNAL_NVTX": " 1 "}).nvtx == "on"
    assert config.from_environ({"GRAPHSIGNAL_NVTX": "GPU"}).nvtx == "gpu"
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ({"GRAPHSIGNAL_NVTX": "lots"})
    assert s.nvtx == "on" and sum("GRAPHSIGNAL_NVTX" in r.getMessage() for r in caplog.records) == 1
    s = config.resolve(cli_run.parse_args(["--nvtx", "gpu", "x"]), {"GRAPHSIGNAL_NVTX": "0"})
    assert s.nvtx == "gpu" and s.origin("nvtx") == "flag --nvtx"
    assert config.from_environ({"GRAPHSIGNAL_NVTX": "off"}).origin("nvtx") == "environment GRAPHSIGNAL_NVTX"
    assert config.Settings.from_dict(json.loads(json.dumps(s.to_dict()))).nvtx == "gpu"


def test_the_flag_refuses_other_values():
    with pytest.raises(cli_run.UsageError, match=r"--nvtx must be one of off\|on\|gpu"):
        cli_run.parse_args(["--nvtx", "yes", "x"])


def test_nvtx_injection_is_set_for_a_library_with_nvtx(tmp_path):
    lib = lib_with(tmp_path, True)
    env = {}
    assert injection.prepare_nvtx(env, lib, "on")
    assert env == {"NVTX_INJECTION64_PATH": lib}
    env = {}
    assert injection.prepare_nvtx(env, lib, "gpu") and env["NVTX_INJECTION64_PATH"] == lib


def test_off_no_cuda_injection_or_no_nvtx_in_the_build_set_nothing(tmp_path):
    for env, lib, mode in (({}, lib_with(tmp_path, True), "off"), ({}, None, "on"),
                           ({}, lib_with(tmp_path, False), "on")):
        assert not injection.prepare_nvtx(env, lib, mode)
        assert env == {}


def test_another_tools_nvtx_injection_is_left_alone_with_one_line(tmp_path, caplog):
    lib = lib_with(tmp_path, True)
    env = {"NVTX_INJECTION64_PATH": "/opt/nsight-systems/target-linux-x64/libToolsInjection64.so"}
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        assert not injection.prepare_nvtx(env, lib, "on")
    assert env["NVTX_INJECTION64_PATH"].endswith("libToolsInjection64.so")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "Nsight Systems" in lines[0] and r"libToolsInjection64.so" in lines[0]
    # the same under Nsight Systems, whose CUDA injection leaves graphsignal without a library
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        assert not injection.prepare_nvtx(env, None, "on")
    assert len(caplog.records) == 1 and env["NVTX_INJECTION64_PATH"].endswith("libToolsInjection64.so")
    # our own library named by the user: collected, nothing said
    env = {"NVTX_INJECTION64_PATH": lib}
    caplog.clear()
    assert injection.prepare_nvtx(env, lib, "on") and not caplog.records


def test_cuda_trace_takes_words_and_numbers_and_the_flag_wins(caplog):
    assert config.from_environ({}).cuda_trace == "on"
    assert config.from_environ({"GRAPHSIGNAL_CUDA_TRACE": "0"}).cuda_trace == "off"
    assert config.from_environ({"GRAPHSIGNAL_CUDA_TRACE": " OFF "}).cuda_trace == "off"
    assert config.from_environ({"GRAPHSIGNAL_CUDA_TRACE": "1"}).cuda_trace == "on"
    # the yes/no words of the other switches: false must not leave the costly mode on
    assert [config.from_environ({"GRAPHSIGNAL_CUDA_TRACE": w}).cuda_trace for w in ("false", "No", "true", "yes")] \
        == ["off", "off", "on", "on"]
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ({"GRAPHSIGNAL_CUDA_TRACE": "never"})
    (line,) = [r.getMessage() for r in caplog.records if "GRAPHSIGNAL_CUDA_TRACE" in r.getMessage()]
    assert s.cuda_trace == "on" and "on|off|light|1|0" in line
    s = config.resolve(cli_run.parse_args(["--cuda-trace", "off", "x"]), {"GRAPHSIGNAL_CUDA_TRACE": "1"})
    assert s.cuda_trace == "off" and s.origin("cuda_trace") == "flag --cuda-trace"
    assert config.Settings.from_dict(json.loads(json.dumps(s.to_dict()))).cuda_trace == "off"
    with pytest.raises(ValueError, match="cuda_trace"):
        config.Settings.from_dict(dict(s.to_dict(), cuda_trace="sometimes"))
    with pytest.raises(cli_run.UsageError, match=r"--cuda-trace must be one of on\|off"):
        cli_run.parse_args(["--cuda-trace", "no", "x"])
    # what the payload's context says (and only when off: payloads of traced runs are unchanged)
    assert config.identity_context(s) == {"cuda.trace": "off"}
    assert "cuda.trace" not in config.identity_context(config.from_environ({}))
