"""One Settings for both processes: every option resolved once (flag, then
environment, then default), sent to the sidecar through the channel and
rebuilt there, shown by --print-config; one port validator for every
command."""
import ast
import json
import os
import subprocess
import sys

import pytest

from graphsignal import channel, config
from graphsignal.cli import run as cli_run
from graphsignal.cli import server as cli_server
from graphsignal.cli import top as cli_top

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "graphsignal")

ENV = {
    "GRAPHSIGNAL_CUDA_GRAPH_TRACE": "node", "GRAPHSIGNAL_LINGER": "1.5", "GRAPHSIGNAL_API_KEY": " key ",
    "GRAPHSIGNAL_API_BASE": "http://127.0.0.1:9", "GRAPHSIGNAL_SIGNALS_TOKEN": "tok",
    "GRAPHSIGNAL_DISABLE_VERSION_CHECK": "yes", "GRAPHSIGNAL_ALL_GPUS": "1", "CUDA_VISIBLE_DEVICES": "1,0",
    "GRAPHSIGNAL_METRICS_TOP_FRAMES": "7", "GRAPHSIGNAL_METRICS_ENGINE": "true", "GRAPHSIGNAL_LOG_LEVEL": "debug",
}


def test_every_option_resolves_once_with_where_it_came_from():
    cfg = cli_run.parse_args(["--listen-port", "0", "--output", "out.json", "--cuda-graph-trace", "graph", "x"])
    s = config.resolve(cfg, ENV)
    assert (s.command, s.listen_host, s.listen_port, s.metrics_port) == (("x",), "127.0.0.1", 0, None)
    # a writable output is held by its absolute path (the sidecar has another working folder)
    assert (s.cuda_graph_trace, s.rocm_kernel_trace, s.signals_file, s.linger) == (
        "graph", "none", os.path.abspath("out.json"), 1.5)
    assert (s.api_key, s.api_base, s.signals_token, s.version_check) == ("key", "http://127.0.0.1:9", "tok", False)
    assert (s.all_gpus, s.visible_devices, s.metrics_top_frames, s.metrics_engine, s.log_level) == (
        True, (("CUDA_VISIBLE_DEVICES", "1,0"),), 7, True, "DEBUG")
    assert s.uploads and s.wants_final
    where = {name: origin for name, _, origin in s.describe()}
    assert where["listen_port"] == "flag --listen-port"
    assert where["cuda_graph_trace"] == "flag --cuda-graph-trace"  # the flag wins over the environment
    assert where["listen_host"] == "default"
    assert where["linger"] == "environment GRAPHSIGNAL_LINGER"
    assert where["visible_devices"] == "environment CUDA_VISIBLE_DEVICES"
    assert where["command"] == "command line"
    # nothing given: every default, from one place
    d = config.from_environ({})
    assert d == config.Settings(command=())
    assert (d.listen_port, d.metrics_top_frames, d.version_check, d.api_base) == (
        config.DEFAULT_LISTEN_PORT, config.DEFAULT_TOP_FRAMES, True, None)
    assert {origin for _, _, origin in d.describe()} <= {"default", "command line"}


def test_a_bad_environment_value_gets_one_line_and_its_default(caplog):
    with caplog.at_level("WARNING", logger="graphsignal"):
        s = config.from_environ({"GRAPHSIGNAL_METRICS_TOP_FRAMES": "lots", "GRAPHSIGNAL_CUDA_GRAPH_TRACE": "nodes",
                                 "GRAPHSIGNAL_LOG_LEVEL": "chatty"})
    assert (s.metrics_top_frames, s.cuda_graph_trace, s.log_level) == (50, "graph", "WARNING")
    lines = [r.getMessage() for r in caplog.records]
    assert sum("GRAPHSIGNAL_METRICS_TOP_FRAMES" in ln for ln in lines) == 1
    assert sum("GRAPHSIGNAL_CUDA_GRAPH_TRACE" in ln for ln in lines) == 1
    where = {name: origin for name, _, origin in s.describe()}
    assert where["metrics_top_frames"] == "default"


def test_settings_cross_the_channel_whole_and_typed():
    s = config.resolve(cli_run.parse_args(["--metrics-port", "8001", "vllm", "serve", "m"]), ENV)
    fd = channel.write_config({"settings": s.to_dict()})
    back = config.Settings.from_dict(channel.read_config(fd)["settings"])
    assert back == s and back.origins == s.origins
    assert isinstance(back.command, tuple) and isinstance(back.visible_devices, tuple)
    # what the sidecar rebuilds is checked: a missing or ill-typed value is refused, not guessed
    d = s.to_dict()
    for key, bad in (("listen_port", "18259"), ("version_check", 1), ("metrics_top_frames", True),
                     ("command", ["a", 1]), ("visible_devices", [["CUDA_VISIBLE_DEVICES"]])):
        broken = dict(d, **{key: bad})
        with pytest.raises(ValueError, match=key):
            config.Settings.from_dict(json.loads(json.dumps(broken)))
    broken = dict(d)
    del broken["linger"]
    with pytest.raises(ValueError, match="linger is missing"):
        config.Settings.from_dict(broken)


def test_print_config_shows_every_setting_and_hides_secrets():
    env = dict(os.environ, **ENV)
    env["GRAPHSIGNAL_CUPTI_FLUSH_MS"] = "50"
    out = subprocess.run([sys.executable, "-m", "graphsignal.cli.run", "--print-config", "--listen-port", "9999"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {ln.split()[0]: ln for ln in out.stdout.splitlines()}
    for f in config.Settings.__dataclass_fields__:
        if f not in ("origins", "amended"):
            assert f in rows, f
    assert rows["listen_port"].split()[1:] == ["9999", "flag", "--listen-port"]
    assert rows["linger"].split()[1:] == ["1.5", "environment", "GRAPHSIGNAL_LINGER"]
    assert rows["listen_host"].split()[1:] == ["127.0.0.1", "default"]
    assert "GRAPHSIGNAL_CUPTI_FLUSH_MS" in rows and rows["GRAPHSIGNAL_CUPTI_FLUSH_MS"].endswith(
        "environment GRAPHSIGNAL_CUPTI_FLUSH_MS")
    # secrets: whether they are set, never what they are
    assert "tok" not in out.stdout.replace("token", "") and "key " not in rows["api_key"].replace("api_key", "")
    assert "(set, not shown)" in rows["api_key"] and "(set, not shown)" in rows["signals_token"]


@pytest.mark.parametrize("port,ok", [("0", True), ("65535", True), ("65536", False), ("-1", False),
                                     ("http", False), ("１２", False)])
def test_one_port_validator_with_its_two_ranges(port, ok):
    if ok:
        assert config.BIND_PORT.parse(port) == int(port)
    else:
        with pytest.raises(ValueError):
            config.BIND_PORT.parse(port)
    # a port to connect to is never 0
    with pytest.raises(ValueError, match="a port to connect to, between 1 and 65535"):
        config.CONNECT_PORT.parse("0")


def test_every_command_checks_ports_with_the_same_ranges(capsys):
    # bind: graphsignal-run --listen-port, graphsignal-server --port
    assert cli_run.parse_args(["--listen-port", "0", "x"]).listen_port == 0
    assert cli_server.parse_args(["--port", "0"], {}).port == 0
    for parse in (lambda p: cli_run.parse_args(["--listen-port", p, "x"]),
                  lambda p: cli_server.parse_args(["--port", p], {})):
        with pytest.raises(Exception, match="between 0 and 65535"):
            parse("65536")
    # connect: graphsignal-run --metrics-port, graphsignal-top --port
    with pytest.raises(cli_run.UsageError, match="a port to connect to, between 1 and 65535"):
        cli_run.parse_args(["--metrics-port", "0", "x"])
    with pytest.raises(cli_run.UsageError, match="a port to connect to, between 1 and 65535"):
        cli_top.parse(["--port", "0"])
    assert cli_top.main(["--port", "0"]) == 2
    assert "a port to connect to, between 1 and 65535" in capsys.readouterr().err
    # the defaults are config's
    assert cli_top.parse([]).port == config.DEFAULT_LISTEN_PORT
    assert cli_server.parse_args([], {}).port == config.DEFAULT_SERVER_PORT


def _environ_reads(path):
    """Lines of a module that read the process environment."""
    tree = ast.parse(open(path).read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            out.append(node.lineno)
    return out


def test_the_sidecar_and_the_sources_read_options_from_settings_never_the_environment():
    # Allowed: the sidecar's log level before the settings arrive, and the
    # poller's fallback for a writer whose /proc environ cannot be read
    # (the writers' ring capacity, not an option of ours).
    allowed = {os.path.join("sidecar", "process.py"): 1, os.path.join("sidecar", "poller.py"): 1}
    found = {}
    for sub in ("sidecar", "sources"):
        for dirpath, _, files in os.walk(os.path.join(PKG, sub)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), PKG)
                    n = len(_environ_reads(os.path.join(dirpath, f)))
                    if n:
                        found[rel] = n
    assert found == allowed


def test_print_config_says_a_refused_value_once_as_a_run_would():
    env = dict(os.environ, GRAPHSIGNAL_LINGER="soon", GRAPHSIGNAL_CUPTI_FLUSH_MS="fast")
    out = subprocess.run([sys.executable, "-m", "graphsignal.cli.run", "--print-config"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stderr.count("GRAPHSIGNAL_LINGER='soon'") == 1 and out.stderr.count("GRAPHSIGNAL_CUPTI_FLUSH_MS") == 1
    rows = {ln.split()[0]: ln for ln in out.stdout.splitlines()}
    assert rows["linger"].split()[1:] == ["0.0", "default"]
    assert rows["GRAPHSIGNAL_CUPTI_FLUSH_MS"].endswith("default")


@pytest.mark.parametrize("cli", ["run", "top", "diff", "server"])
def test_every_command_says_its_version_with_dash_v(cli):
    for flag in ("-V", "--version"):
        out = subprocess.run([sys.executable, "-m", "graphsignal.cli." + cli, flag], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.startswith("graphsignal") and out.stderr == "", (cli, flag, out)


def test_print_config_shows_what_a_run_will_use_and_never_a_secret_or_a_control_byte():
    env = dict(os.environ, GRAPHSIGNAL_API_BASE="http://user:SECRETPW@127.0.0.1:1/x?token=SECRETQ",
               GRAPHSIGNAL_API_KEY="k", GRAPHSIGNAL_SIGNALS_FILE="/dev/null", GRAPHSIGNAL_SIGNALS_TOKEN="tökén",
               PYTHONIOENCODING="utf-8")  # strict, as on an en_US.UTF-8 host
    argv = [sys.executable, "-m", "graphsignal.cli.run", "--print-config", "python", "app.py", "--api-key",
            "SECRET1", "--token=SECRET2", os.fsdecode(b"\xff\x1b[2J")]
    out = subprocess.run(argv, env=env, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("utf-8")
    assert "SECRET" not in text and "tökén" not in text and "\x1b" not in text
    rows = {ln.split()[0]: ln for ln in text.splitlines()}
    assert "--api-key *** --token=*** \\xff\\x1b[2J" in rows["command"]
    assert "http://***@127.0.0.1:1/x?***" in rows["api_base"]
    # what runs: no output (said why), never the device
    assert rows["signals_file"].split()[1] == "(none)" and "/dev/null is a device" in rows["signals_file"]
    assert "the final payload will not be written" in rows["signals_file"]
    assert "refused: GRAPHSIGNAL_SIGNALS_TOKEN must be printable ASCII" in rows["signals_token"]


def test_resolve_amends_what_a_run_cannot_do_so_print_config_prints_what_runs(tmp_path, monkeypatch):
    # NVTX GPU time without CUPTI, and an output onto a device: the settings are what runs, each change said
    cfg = cli_run.parse_args(["--nvtx", "gpu", "--cuda-trace", "light", "--output", "/dev/null", "x"])
    s = config.resolve(cfg, {})
    assert (s.nvtx, s.signals_file, s.cuda_trace) == ("on", None, "light")
    assert s.amendment("nvtx").startswith("NVTX GPU time (--nvtx gpu, GRAPHSIGNAL_NVTX=gpu) needs CUDA tracing")
    assert "which is light" in s.amendment("nvtx")
    assert s.amendment("signals_file").endswith("the final payload will not be written")
    assert s.origin("nvtx") == "flag --nvtx" and s.origin("signals_file") == "flag --output"
    # they cross the channel with the rest
    back = config.Settings.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and back.amended == s.amended
    rows = {ln.split()[0]: ln for ln in config.print_config(s, {}).splitlines()}
    assert rows["nvtx"].split()[1:3] == ["on", "(amended:"] and rows["nvtx"].endswith("flag --nvtx")
    assert rows["signals_file"].split()[1:3] == ["(none)", "(amended:"]
    assert "amended" not in rows and "origins" not in rows
    # the same from the environment (GRAPHSIGNAL_NVTX=gpu, GRAPHSIGNAL_CUDA_TRACE=0): the origin stays
    s = config.from_environ({"GRAPHSIGNAL_NVTX": "gpu", "GRAPHSIGNAL_CUDA_TRACE": "0"})
    assert s.nvtx == "on" and s.origin("nvtx") == "environment GRAPHSIGNAL_NVTX" and "which is off" in s.amendment("nvtx")
    # nothing to amend: gpu with CUPTI stays; a relative output becomes absolute, unsaid
    monkeypatch.chdir(tmp_path)
    s = config.resolve(cli_run.parse_args(["--nvtx", "gpu", "--output", "o.json", "x"]), {})
    assert (s.nvtx, s.signals_file, s.amended) == ("gpu", str(tmp_path / "o.json"), ())
    # a missing folder is no amendment: the output stays as given and the run refuses to start
    s = config.resolve(cli_run.parse_args(["--output", "no/such/o.json", "x"]), {})
    assert (s.signals_file, s.amended) == ("no/such/o.json", ())
    _, refused = cli_run._as_a_run_sees_it(s)
    assert "does not exist" in refused["signals_file"]


def test_numbers_in_other_scripts_or_with_underscores_are_refused_as_ports_are():
    from graphsignal import envcheck

    for raw in ("٣", "1_0", "３"):
        assert envcheck.parse("GRAPHSIGNAL_LINGER", raw)[0] is None
    assert envcheck.parse("GRAPHSIGNAL_LINGER", "2.5")[0] == 2.5
    with pytest.raises(ValueError, match="between 0 and 65535, got 999999999999..."):
        config.BIND_PORT.parse("9" * 5000)


def test_a_token_no_header_can_carry_is_refused_by_the_endpoint_and_its_clients():
    from graphsignal import httpfetch

    assert config.token_problem("abc-DEF_123.~+/=") is None
    for bad in ("tökén", "a b", "\udcff", "x" * 1025, "a\x1b"):
        assert config.token_problem(bad)
        with pytest.raises(httpfetch.FetchError, match="printable ASCII"):
            httpfetch.get("http://127.0.0.1:9/signals", 1, 1, token=bad)


def test_a_url_is_shown_without_its_credentials():
    assert config.shown_url("http://u:pw@h:1/api/v1/ingest") == "http://***@h:1/api/v1/ingest"
    assert config.shown_url("https://h/x?key=1#f") == "https://h/x?***"
    assert config.shown_url("https://api.graphsignal.com") == "https://api.graphsignal.com"


def test_variables_no_longer_read_get_one_line_and_are_not_passed_on(caplog):
    from graphsignal import envcheck

    env = {"GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS": "20", "GRAPHSIGNAL_CUPTI_GRAPH_PROBE": "0",
           "GRAPHSIGNAL_CUPTI_SAMPLE_MS": "20", "PATH": "/bin"}
    with caplog.at_level("WARNING", logger="graphsignal"):
        lines = envcheck.sanitize(env)
    assert env == {"GRAPHSIGNAL_CUPTI_SAMPLE_MS": "20", "PATH": "/bin"}  # what is still read stays
    assert len(lines) == 2 and all("is no longer read" in x and "every CUDA graph replay is traced" in x
                                   for x in lines)
    assert len([r for r in caplog.records if "no longer read" in r.getMessage()]) == 2
