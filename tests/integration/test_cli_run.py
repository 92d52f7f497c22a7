"""graphsignal-run as a wrapper: exit codes, signal deaths, console bytes,
forwarded signals, options."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from support.cbuild import compile_c
from graphsignal import __version__
from graphsignal.cli.run import RunConfig, UsageError, parse_args
from support.gsrun import GS_RUN, free_port, get_json, quiet_env, run_wrapped, wait_for
from support.schema import assert_valid

PY = sys.executable


@pytest.mark.parametrize("code", [0, 1, 3, 42])
def test_exit_code_passes_through(code):
    proc, signals = run_wrapped([PY, "-c", "import sys; sys.exit(%d)" % code])
    assert proc.returncode == code
    assert signals is not None
    exits = [e for e in signals["errors"] if "exited with code" in e["message"]]
    assert (len(exits) == 1) == (code != 0)


@pytest.mark.parametrize("code,status", [("sys.exit(3)", 3), ("os.kill(os.getpid(), 9)", -9), ("pass", 0)])
def test_the_final_payload_covers_the_workload_from_its_launch_to_its_end(code, status):
    # before: start_ns was the sidecar's start, after the workload's; nothing said the run had ended
    t0 = time.time_ns()
    proc, signals = run_wrapped([PY, "-c", "import os, sys, time; time.sleep(0.5); " + code])
    t1 = time.time_ns()
    assert proc.returncode == status
    assert t0 <= signals["start_ns"] <= signals["ended_ns"] <= signals["payload_ns"] <= t1
    assert signals["ended_ns"] - signals["start_ns"] >= 0.5e9  # the workload's whole life
    assert signals["exit_status"] == status
    assert_valid(signals)  # the final payload follows the shipped JSON Schema


def test_an_argument_that_is_not_utf8_costs_nothing(tmp_path):
    # the workload gets its bytes; the payload says them as U+FFFD, for the
    # root process and for a child alike
    script = tmp_path / "a.py"
    script.write_text("import subprocess, sys\n"
                      "print(sys.argv[1].encode('utf-8', 'surrogateescape').hex())\n"
                      "subprocess.run([sys.executable, '-c', 'import time; time.sleep(1.5)', b'\\xff'])\n")
    proc, signals = run_wrapped([PY, str(script), os.fsdecode(b"\xfe\xff")])
    assert proc.returncode == 0 and proc.stdout == b"feff\n", proc.stderr
    assert signals is not None, proc.stderr
    lines = [r["attributes"].get("process.command_line", "") for r in signals["resources"] if r["kind"] == "process"]
    assert any(ln.endswith("a.py \ufffd\ufffd") for ln in lines), lines


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT])
def test_death_by_signal_is_reraised(sig):
    proc, signals = run_wrapped([PY, "-c", "import os; os.kill(os.getpid(), %d)" % sig])
    assert proc.returncode == -sig
    assert any("killed by %s" % signal.Signals(sig).name in e["message"] for e in signals["errors"])


CHATTY = textwrap.dedent(r"""
    import os, sys
    out, err = sys.stdout.buffer, sys.stderr.buffer
    out.write(bytes(range(256)) * 3)
    err.write(b"\xff\xfe binary \x00 on stderr\n")
    out.write(b"x" * (5 * 1024 * 1024) + b"\n")
    err.write(b"y" * (3 * 1024 * 1024))
    out.write("ünïcödé\r\n no newline at end".encode())
    out.flush(); err.flush()
""")


def test_console_bytes_are_identical_to_a_bare_run():
    bare = subprocess.run([PY, "-c", CHATTY], capture_output=True)
    proc, _ = run_wrapped([PY, "-c", CHATTY])
    assert proc.returncode == bare.returncode == 0
    assert proc.stdout == bare.stdout
    assert proc.stderr == bare.stderr
    assert len(proc.stdout) > 5 * 1024 * 1024


def test_stdin_reaches_the_workload():
    proc, _ = run_wrapped([PY, "-c", "import sys; sys.stdout.write(sys.stdin.read()[::-1])"], input=b"abc\n")
    assert proc.stdout == b"\ncba"


TRAP = textwrap.dedent(r"""
    import os, signal, sys, time
    got = []
    def h(s, f):
        got.append(s)
        sys.stdout.write("got %d\n" % s); sys.stdout.flush()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, h)
    sys.stdout.write("ready\n"); sys.stdout.flush()
    deadline = time.time() + 30
    while len(got) < 6 and time.time() < deadline:
        time.sleep(0.01)
    sys.exit(0 if len(got) == 6 else 5)
""")


def test_signals_are_forwarded_to_the_workload():
    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2]
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(free_port()), PY, "-c", TRAP], env=quiet_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert p.stdout.readline() == b"ready\n"
    lines = []
    for s in sigs:
        os.kill(p.pid, s)
        lines.append(p.stdout.readline().decode().strip())
    assert p.wait(30) == 0
    assert lines == ["got %d" % s for s in sigs]


def test_sigterm_to_the_wrapper_ends_a_default_workload_like_a_bare_one():
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(free_port()), PY, "-c",
                                   "import sys,time; print('up', flush=True); time.sleep(60)"],
                         env=quiet_env(), stdout=subprocess.PIPE, start_new_session=True)
    assert p.stdout.readline() == b"up\n"
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(30) == -signal.SIGTERM


def test_c_program_segfault_status_passes_through():
    exe = compile_c("segv.c")
    proc, signals = run_wrapped([exe])
    assert proc.returncode == -signal.SIGSEGV
    assert proc.stdout == b"before\n"


def test_endpoint_serves_while_the_workload_runs_and_closes_after():
    port = free_port()
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(port), PY, "-c",
                                   "import sys,time; print('up', flush=True); sys.stdin.read()"],
                         env=quiet_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"up\n"
    url = "http://127.0.0.1:%d" % port
    status, body = wait_for(lambda: _try(url + "/signals"))
    assert status == 200 and body["profiler"]["version"] == __version__
    assert wait_for(lambda: any(m["name"] == "process_cpu_usage_percent" for m in _try(url + "/signals")[1]["metrics"]))
    # live payloads, plain and with a window, follow the shipped JSON Schema
    assert_valid(_try(url + "/signals")[1])
    assert_valid(_try(url + "/signals?window=5")[1])
    assert _try(url + "/health")[1]["status"] == "ok"
    p.stdin.close()
    assert p.wait(30) == 0
    assert _try(url + "/health") is None


def _try(url):
    try:
        return get_json(url)
    except OSError:
        return None


def test_busy_port_is_retried_and_reported_while_the_workload_runs():
    import socket
    port = free_port()
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port))
    blocker.listen(1)
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(port), PY, "-c",
                                   "import sys; print('up', flush=True); sys.stdin.read(); print('done')"],
                         env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"up\n"  # the workload runs regardless
        # the sidecar starts after the workload: wait until it has met the busy port
        assert any(b"is in use" in line for line in iter(p.stderr.readline, b""))
        blocker.close()
        url = "http://127.0.0.1:%d/signals" % port
        status, body = wait_for(lambda: _try(url), timeout=10)
        assert status == 200
        assert any("in use" in e["message"] for e in body["errors"])
    finally:
        blocker.close()
        p.stdin.close()
    assert p.wait(30) == 0
    assert p.stdout.read() == b"done\n"


def test_version_and_help():
    # the command's own name, as graphsignal-top, -diff, -export and -server say theirs (issue 40)
    for flag in ("--version", "-V"):
        out = subprocess.run(GS_RUN + [flag], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "graphsignal-run %s" % __version__
    out = subprocess.run(GS_RUN + ["--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in ("--version", "--metrics-port", "--listen-host", "--listen-port", "--cuda-graph-trace",
                 "--rocm-kernel-trace"):
        assert flag in out.stdout


@pytest.mark.parametrize("argv,needle", [
    (["--bogus", "true"], "unknown option --bogus"),
    (["--listen-port"], "--listen-port needs a value"),
    (["--listen-port", "http", "true"], "expects a port number"),
    (["--metrics-port", "70000", "true"], "between 1 and 65535"),
    (["--metrics-port", "0", "true"], "a port to connect to"),
    (["--listen-port", "65536", "true"], "a port to bind (0 picks a free one), between 0 and 65535"),
    (["--cuda-graph-trace", "kernel", "true"], "must be one of graph|node"),
    (["--rocm-kernel-trace=some", "true"], "must be one of none|all"),
    ([], "no command given"),
])
def test_bad_options_get_one_line_and_exit_2(argv, needle):
    out = subprocess.run(GS_RUN + argv, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and needle in out.stderr
    assert out.stderr.startswith("graphsignal-run: error:")


def test_options_stop_at_the_command():
    cfg = parse_args(["--listen-port=1234", "--cuda-graph-trace", "node", "vllm", "serve", "--port", "8001",
                      "--version"])
    assert cfg == RunConfig(command=("vllm", "serve", "--port", "8001", "--version"), listen_port=1234,
                            cuda_graph_trace="node")
    assert parse_args(["--", "--weird-binary"]).command == ("--weird-binary",)
    with pytest.raises(UsageError):
        parse_args(["--listen-host", ""])


def test_command_not_found_is_127():
    out = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), "/nonexistent/cmd"], capture_output=True,
                         text=True, env=quiet_env())
    assert out.returncode == 127 and "command not found" in out.stderr


def test_a_script_without_a_shebang_runs_with_sh_as_execvp_does(tmp_path):
    # before: rc 126 "cannot run" (ENOEXEC), where a shell, env(1) or execvp runs it with /bin/sh
    script = tmp_path / "noshebang"
    script.write_text('echo "ran as sh with $# args: $1"\nexit 3\n')
    os.chmod(str(script), 0o755)
    env = quiet_env()
    env["PATH"] = str(tmp_path) + os.pathsep + env.get("PATH", os.defpath)
    bare = subprocess.run(["env", "noshebang", "a b", "c"], capture_output=True, env=env)
    for cmd in (["noshebang", "a b", "c"], [str(script), "a b", "c"]):
        out = subprocess.run(GS_RUN + ["--listen-port", str(free_port())] + cmd, capture_output=True, env=env)
        assert (out.returncode, out.stdout) == (bare.returncode, bare.stdout) == (3, b"ran as sh with 2 args: a b\n")


def test_a_file_that_is_not_executable_is_still_126(tmp_path):
    script = tmp_path / "data.txt"
    script.write_text("echo no\n")
    out = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), str(script)], capture_output=True, text=True,
                         env=quiet_env())
    assert out.returncode == 126 and "permission denied" in out.stderr


def test_graph_trace_env_and_flag_reach_the_child():
    show = [PY, "-c", "import os; print(os.environ['GRAPHSIGNAL_CUDA_GRAPH_TRACE'], "
                      "len(os.environ['GRAPHSIGNAL_RUN_ID']))"]
    assert run_wrapped(show)[0].stdout == b"graph 12\n"
    assert run_wrapped(show, env=quiet_env(GRAPHSIGNAL_CUDA_GRAPH_TRACE="node"))[0].stdout == b"node 12\n"
    assert run_wrapped(show, options=["--cuda-graph-trace", "graph"],
                       env=quiet_env(GRAPHSIGNAL_CUDA_GRAPH_TRACE="node"))[0].stdout == b"graph 12\n"
    proc, _ = run_wrapped(show, env=quiet_env(GRAPHSIGNAL_CUDA_GRAPH_TRACE="nodes", GRAPHSIGNAL_LOG_LEVEL="warning"))
    assert proc.stdout == b"graph 12\n"
    assert b"GRAPHSIGNAL_CUDA_GRAPH_TRACE='nodes'" in proc.stderr


def test_cuda_trace_off_reaches_the_payload_and_turns_nvtx_gpu_into_host_time():
    show = [PY, "-c", "import os; print(os.environ.get('CUDA_INJECTION64_PATH'), os.environ['GRAPHSIGNAL_NVTX'])"]
    proc, signals = run_wrapped(show, options=["--cuda-trace", "off", "--nvtx", "gpu"],
                                env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"))
    assert proc.returncode == 0 and proc.stdout == b"None on\n"
    assert proc.stderr.count(b"NVTX GPU time (--nvtx gpu, GRAPHSIGNAL_NVTX=gpu) needs CUDA tracing") == 1
    assert signals["context"]["cuda.trace"] == "off"
    assert_valid(signals)
    # an injection set in the environment stays (as always) and is said; node mode has nothing to do
    proc, signals = run_wrapped(show, options=["--cuda-trace", "off", "--cuda-graph-trace", "node"],
                                env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning", CUDA_INJECTION64_PATH="/opt/x.so"))
    assert proc.stdout == b"/opt/x.so on\n"
    assert proc.stderr.count(b"CUDA_INJECTION64_PATH=/opt/x.so is set in the environment and stays") == 1
    assert proc.stderr.count(b"--cuda-graph-trace node does nothing with --cuda-trace off") == 1
    # the environment variable says the same; a traced run's context does not mention it
    proc, signals = run_wrapped(show, env=quiet_env(GRAPHSIGNAL_CUDA_TRACE="0"))
    assert proc.stdout == b"None on\n" and signals["context"]["cuda.trace"] == "off"
    proc, signals = run_wrapped(show, options=["--nvtx", "gpu"])
    assert proc.stdout.endswith(b" gpu\n") and "cuda.trace" not in signals["context"]
