"""Engine launchers: which commands are engines, how their arguments are
rewritten, and which URL is scraped (graphsignal/launch/engines.py)."""
import logging

import pytest

from graphsignal.launch import engines


def prep(cmd, metrics_port=None, environ=None):
    reports = []
    p = engines.prepare(cmd, metrics_port, reports.append, environ or {})
    return p, reports


# -- vLLM ---------------------------------------------------------------------------

def test_vllm_serve_defaults_to_port_8000_on_loopback():
    p, reports = prep(["vllm", "serve", "meta-llama/Llama-3.1-8B"])
    assert p.engine == "vllm"
    assert p.command == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]
    assert p.metrics_url == "http://127.0.0.1:8000/metrics"
    assert reports == []


def test_vllm_drops_disable_log_stats_and_nothing_else():
    cmd = ["vllm", "serve", "m", "--port", "8001", "--disable-log-stats", "--max-num-seqs", "64",
           "--disable_log_stats", "--disable-log-requests"]
    p, _ = prep(cmd)
    assert p.command == ["vllm", "serve", "m", "--port", "8001", "--max-num-seqs", "64", "--disable-log-requests"]
    assert p.metrics_url == "http://127.0.0.1:8001/metrics"
    assert any("--disable-log-stats" in n for n in p.notes)


def test_vllm_api_server_module_behind_python_m_with_host_and_port_equals():
    cmd = ["/usr/bin/python3.11", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
           "--host=10.1.2.3", "--port=9000", "--disable-log-stats"]
    p, _ = prep(cmd)
    assert p.engine == "vllm"
    assert p.command == cmd[:-1]
    assert p.metrics_url == "http://10.1.2.3:9000/metrics"


def test_vllm_wildcard_hosts_are_scraped_on_loopback():
    for host, expected in (("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("::1", "[::1]"),
                           ("gpu-box", "gpu-box")):
        p, _ = prep(["vllm", "serve", "m", "--host", host, "--port", "8123"])
        assert p.metrics_url == "http://%s:8123/metrics" % expected


def test_vllm_last_port_wins_like_argparse():
    p, _ = prep(["vllm", "serve", "m", "--port", "8001", "--port", "8002"])
    assert p.metrics_url == "http://127.0.0.1:8002/metrics"


def test_vllm_port_from_its_yaml_config(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model: m\nport: 8765\nhost: 0.0.0.0\n")
    p, reports = prep(["vllm", "serve", "--config", str(cfg)])
    assert p.metrics_url == "http://127.0.0.1:8765/metrics"
    assert reports == []


def test_vllm_config_that_disables_stats_is_reported_in_one_line(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("disable-log-stats: true\n")
    p, reports = prep(["vllm", "serve", "m", "--config", str(cfg)])
    assert len(reports) == 1 and "disable-log-stats" in reports[0]
    assert p.command == ["vllm", "serve", "m", "--config", str(cfg)]


def test_vllm_behind_wrappers_uv_run_env_nohup_and_full_paths():
    for head in (["uv", "run", "--with", "vllm"], ["env", "CUDA_VISIBLE_DEVICES=0", "nohup"],
                 ["numactl", "--cpunodebind=0"], ["uv", "run", "python", "-m", "vllm.entrypoints.cli.main"]):
        exe = [] if head[-1].endswith("main") else ["/opt/venv/bin/vllm"]
        cmd = head + exe + ["serve", "m", "--port", "8100", "--disable-log-stats"]
        p, _ = prep(cmd)
        assert p.engine == "vllm", cmd
        assert p.command == cmd[:-1], cmd
        assert p.metrics_url == "http://127.0.0.1:8100/metrics"


def test_vllm_without_serve_subcommand_is_not_an_engine():
    p, _ = prep(["vllm", "bench", "serve", "--port", "8000"])
    assert p.engine is None and p.metrics_url is None
    assert p.command == ["vllm", "bench", "serve", "--port", "8000"]


# -- SGLang -------------------------------------------------------------------------

def test_sglang_launch_server_gets_enable_metrics_and_default_port_30000():
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--tp", "2"]
    p, _ = prep(cmd)
    assert p.engine == "sglang"
    assert p.command == cmd + ["--enable-metrics"]
    assert p.metrics_url == "http://127.0.0.1:30000/metrics"


def test_sglang_serve_keeps_an_existing_enable_metrics_and_uses_its_port():
    cmd = ["sglang", "serve", "--model-path", "m", "--enable-metrics", "--host", "0.0.0.0", "--port", "31000"]
    p, _ = prep(cmd)
    assert p.command == cmd
    assert p.metrics_url == "http://127.0.0.1:31000/metrics"


def test_sglang_enable_metrics_is_added_to_the_engine_not_the_wrapper():
    cmd = ["uv", "run", "--frozen", "python3", "-m", "sglang.launch_server", "--model-path", "m"]
    p, _ = prep(cmd)
    assert p.command == cmd + ["--enable-metrics"]


# -- TensorRT-LLM -------------------------------------------------------------------

def test_trtllm_scrapes_prometheus_path_never_metrics(tmp_path):
    cfg = tmp_path / "extra.yaml"
    cfg.write_text("return_perf_metrics: true\nenable_iter_perf_stats: true\n")
    cmd = ["trtllm-serve", "serve", "/models/Qwen3-8B", "--port", "8010", "--extra_llm_api_options", str(cfg)]
    p, reports = prep(cmd)
    assert p.engine == "trtllm"
    assert p.command == cmd
    assert p.metrics_url == "http://localhost:8010/prometheus/metrics"
    assert not p.metrics_url.endswith(":8010/metrics")
    assert reports == []


def test_trtllm_without_return_perf_metrics_says_so_in_one_line(tmp_path, caplog):
    cfg = tmp_path / "config.yml"
    cfg.write_text("kv_cache_config:\n  free_gpu_memory_fraction: 0.9\n")
    cmd = ["trtllm-serve", "/models/m", "--host", "0.0.0.0", "--config", str(cfg)]
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        p, reports = prep(cmd)
    assert p.command == cmd
    assert p.metrics_url == "http://127.0.0.1:8000/prometheus/metrics"
    assert len(reports) == 1 and "return_perf_metrics: true" in reports[0] and str(cfg) in reports[0]
    lines = [r for r in caplog.records if "return_perf_metrics" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage()


def test_trtllm_without_any_config_also_says_so():
    p, reports = prep(["trtllm-serve", "m"])
    assert p.metrics_url == "http://localhost:8000/prometheus/metrics"
    assert len(reports) == 1


def test_trtllm_metrics_port_overrides_but_keeps_prometheus_path():
    p, _ = prep(["trtllm-serve", "m", "--port", "8000"], metrics_port=9400)
    assert p.metrics_url == "http://localhost:9400/prometheus/metrics"


# -- llama.cpp ----------------------------------------------------------------------

def test_llama_server_gets_metrics_and_default_port_8080():
    cmd = ["./build/bin/llama-server", "-m", "model.gguf", "-c", "4096"]
    p, _ = prep(cmd)
    assert p.engine == "llamacpp"
    assert p.command == cmd + ["--metrics"]
    assert p.metrics_url == "http://127.0.0.1:8080/metrics"


def test_llama_server_keeps_metrics_flag_and_reads_port_host_and_api_prefix():
    cmd = ["llama-server", "-m", "m.gguf", "--metrics", "--host", "0.0.0.0", "--port", "18080",
           "--api-prefix", "/v2"]
    p, _ = prep(cmd)
    assert p.command == cmd
    assert p.metrics_url == "http://127.0.0.1:18080/v2/metrics"


def test_llama_server_port_and_metrics_switch_from_its_environment():
    env = {"LLAMA_ARG_PORT": "9090", "LLAMA_ARG_ENDPOINT_METRICS": "1"}
    p, _ = prep(["llama-server", "-m", "m.gguf"], environ=env)
    assert p.command == ["llama-server", "-m", "m.gguf"]
    assert p.metrics_url == "http://127.0.0.1:9090/metrics"


# -- generic commands and --metrics-port --------------------------------------------

def test_generic_command_is_not_scraped_without_metrics_port():
    cmd = ["python", "my_app.py", "--port", "8000"]
    p, reports = prep(cmd)
    assert p.engine is None and p.metrics_url is None
    assert p.command == cmd and reports == []


def test_generic_command_is_scraped_on_metrics_port():
    cmd = ["python", "my_app.py"]
    p, _ = prep(cmd, metrics_port=9100)
    assert p.command == cmd
    assert p.metrics_url == "http://127.0.0.1:9100/metrics"


def test_metrics_port_overrides_the_derived_port_for_each_engine():
    for cmd in (["vllm", "serve", "m", "--port", "8001"], ["sglang", "serve", "--port", "8001"],
                ["llama-server", "--port", "8001"]):
        p, _ = prep(cmd, metrics_port=9200)
        assert p.metrics_url == "http://127.0.0.1:9200/metrics", cmd


def test_engine_names_as_arguments_of_a_script_are_not_engines():
    for cmd in (["python", "bench.py", "vllm", "serve"], ["bash", "run.sh", "llama-server"],
                ["python", "-c", "import vllm"]):
        p, _ = prep(cmd)
        assert p.engine is None and p.command == cmd, cmd


def test_prepare_never_changes_the_callers_list():
    cmd = ["vllm", "serve", "m", "--disable-log-stats"]
    before = list(cmd)
    prep(cmd)
    assert cmd == before


@pytest.mark.parametrize("cmd", [[], ["vllm"], ["python", "-m"], ["llama-server", "--port"],
                                 ["trtllm-serve", "--config", "/nonexistent.yaml"]])
def test_odd_command_lines_do_not_raise(cmd):
    p, _ = prep(cmd)
    assert p.command[:len(cmd)] == cmd
