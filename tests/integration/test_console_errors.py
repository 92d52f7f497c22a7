"""Error capture from the console (graphsignal/sidecar/console.py): what
becomes an entry, what never does, and the bounds; then real crashing
children under graphsignal-run, whose output and exit status must be those
of a bare run."""
import random
import resource
import subprocess
import sys
import time

import pytest

from support.cbuild import compile_c
from graphsignal.sidecar import console
from graphsignal.sidecar.console import ConsoleCapture
from graphsignal.sidecar.store import MetricStore
from support.gsrun import quiet_env, run_wrapped, wait_for

ROOT_PID = 4242


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def capture(clock=None, **kw):
    store = MetricStore()
    return store, ConsoleCapture(store, lambda: ROOT_PID, clock=clock or time.monotonic, **kw)


def feed(cap, data, stream="stderr", chunk=None, close=True):
    chunk = chunk or len(data) or 1
    for i in range(0, len(data), chunk):
        cap.feed(stream, data[i:i + chunk])
    if close:
        cap.close_stream(stream)


def entries(store, kind=None):
    return [e for e in store.errors if kind is None or e["tags"].get("error.kind") == kind]


PY_TRACEBACK = b"""Traceback (most recent call last):
  File "/app/serve.py", line 12, in <module>
    main()
  File "/app/serve.py", line 9, in main
    load_weights(path)
ValueError: checkpoint shard 3 is missing
"""


# -- Python tracebacks -----------------------------------------------------------------

@pytest.mark.parametrize("chunk", [None, 1, 7, 64])
def test_python_traceback_is_one_entry_whatever_the_chunking(chunk):
    store, cap = capture()
    feed(cap, b"loading model\n" + PY_TRACEBACK + b"shutting down\n", chunk=chunk)
    (e,) = entries(store)
    assert e["level"] == "error"
    assert e["message"] == "ValueError: checkpoint shard 3 is missing"
    assert e["exception"] == PY_TRACEBACK.decode().rstrip("\n")
    assert e["tags"] == {"process.pid": str(ROOT_PID), "stream": "stderr", "error.kind": "exception"}
    assert e["timestamp_ns"] > 0


def test_chained_traceback_is_one_entry_with_the_last_exception_as_message():
    text = PY_TRACEBACK + b"""
During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/serve.py", line 14, in <module>
    torch.cuda.synchronize()
RuntimeError: CUDA error: an illegal memory access was encountered
next
"""
    store, cap = capture()
    feed(cap, text)
    (e,) = entries(store)
    assert e["message"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "During handling of the above exception" in e["exception"]
    assert e["exception"].startswith("Traceback") and e["exception"].count("Traceback") == 2
    assert e["tags"]["error.kind"] == "cuda"


def test_vllm_worker_traceback_with_log_headers_gets_the_workers_pid():
    lines = [
        "Traceback (most recent call last):",
        '  File "/vllm/v1/engine/core.py", line 691, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free.",
    ]
    text = "".join("(EngineCore_DP0 pid=5151) ERROR 10-09 12:00:00 [core.py:700] %s\n" % line for line in lines)
    text += "(APIServer pid=5000) INFO 10-09 12:00:01 [api_server.py:1] Shutting down\n"
    store, cap = capture()
    feed(cap, text.encode())
    (e,) = entries(store)
    assert e["tags"] == {"process.pid": "5151", "stream": "stderr", "error.kind": "oom"}
    assert e["message"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert e["exception"].splitlines()[1] == lines[1]  # headers stripped, indentation kept


def test_sglang_traceback_that_starts_mid_line():
    text = (b"[2025-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            b'  File "/sglang/srt/managers/scheduler.py", line 1800, in run_scheduler_process\n'
            b"    scheduler.event_loop_overlap()\n"
            b"AssertionError: req_to_token_pool is full\n"
            b"[2025-03-01 10:00:01] Received sigquit from a child process. It usually means the child failed.\n")
    store, cap = capture()
    feed(cap, text)
    (e,) = entries(store)
    assert e["message"] == "AssertionError: req_to_token_pool is full"
    assert e["exception"].startswith("Scheduler hit an exception: Traceback")


def test_interleaved_tracebacks_of_two_workers_stay_apart():
    a = "(VllmWorker rank=0 pid=11) "
    b = "(VllmWorker rank=1 pid=12) "
    text = "".join([
        a + "Traceback (most recent call last):\n", b + "Traceback (most recent call last):\n",
        a + '  File "w.py", line 1, in f\n', b + '  File "w.py", line 2, in g\n',
        a + "RuntimeError: NCCL error: unhandled system error\n", b + "KeyError: 'x'\n",
        "done\n",
    ])
    store, cap = capture()
    feed(cap, text.encode())
    got = {e["tags"]["process.pid"]: e for e in entries(store)}
    assert got["11"]["message"] == "RuntimeError: NCCL error: unhandled system error"
    assert got["11"]["tags"]["error.kind"] == "nccl"
    assert got["12"]["message"] == "KeyError: 'x'"
    assert "w.py\", line 2" in got["12"]["exception"] and "line 1" not in got["12"]["exception"]


def test_a_traceback_that_goes_quiet_is_recorded_without_waiting_for_more_output():
    store, cap = capture()
    feed(cap, PY_TRACEBACK, close=False)  # a server logs it and idles: no next line, no EOF
    assert wait_for(lambda: entries(store), timeout=10)
    assert entries(store)[0]["message"] == "ValueError: checkpoint shard 3 is missing"


def test_huge_traceback_keeps_its_head_and_its_end():
    frames = b"".join(b'  File "r.py", line %d, in f\n    f()\n' % i for i in range(3000))
    store, cap = capture()
    feed(cap, b"Traceback (most recent call last):\n" + frames + b"RecursionError: maximum recursion depth\n")
    (e,) = entries(store)
    assert e["message"] == "RecursionError: maximum recursion depth"
    lines = e["exception"].splitlines()
    assert len(lines) <= console.MAX_BLOCK_HEAD + console.MAX_BLOCK_TAIL + 1
    assert lines[0].startswith("Traceback") and "lines cut" in e["exception"]


def test_faulthandler_dump_is_a_critical_entry():
    text = (b"Fatal Python error: Segmentation fault\n\n"
            b"Current thread 0x00007f00c0ffee00 (most recent call first):\n"
            b'  File "/app/kernel.py", line 3 in launch\n'
            b'  File "/app/serve.py", line 9 in <module>\n\n'
            b"Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)\n")
    store, cap = capture()
    feed(cap, text)
    (e,) = entries(store)
    assert (e["level"], e["message"], e["tags"]["error.kind"]) == ("critical", "Fatal Python error: Segmentation fault",
                                                                  "crash")
    assert "kernel.py" in e["exception"] and "Extension modules" in e["exception"]


# -- log lines and native errors -------------------------------------------------------------

@pytest.mark.parametrize("line, level, message", [
    ("ERROR 10-09 12:00:00 [engine.py:123] EngineCore encountered a fatal error.", "error",
     "EngineCore encountered a fatal error."),
    ("CRITICAL 10-09 12:00:00 [launcher.py:9] Engine failed to start", "critical", "Engine failed to start"),
    ("ERROR:    Exception in ASGI application", "error", "Exception in ASGI application"),
    ("ERROR:root:could not bind socket", "error", "could not bind socket"),
    ("2025-01-01 10:00:00,123 - tensorrt_llm - ERROR - Executor worker died", "error", "Executor worker died"),
    ("[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function", "error",
     "Encountered an error in forwardAsync function"),
    ("[01/01/2025-10:00:00] [TRT-LLM] [E] Failed to parse the engine config", "error",
     "Failed to parse the engine config"),
    ("E0101 10:00:00.123456  1234 plugin.cc:12] cannot open shared object", "error", "cannot open shared object"),
    ("main: error: unable to load model", "error", "main: error: unable to load model"),
    ("RuntimeError: CUDA error: device-side assert triggered", "error",
     "RuntimeError: CUDA error: device-side assert triggered"),
    ("CUDA error: an illegal memory access was encountered", "error",
     "CUDA error: an illegal memory access was encountered"),
    ("[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout", "error",
     "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout"),
    ("gpu-box:3131:3232 [0] NCCL WARN Call to connect returned Connection refused", "warning",
     "gpu-box:3131:3232 [0] NCCL WARN Call to connect returned Connection refused"),
    ("thread 'main' panicked at src/router.rs:42:5:", "error", "thread 'main' panicked at src/router.rs:42:5:"),
    ("bash: line 1:  4242 Segmentation fault      (core dumped) ./engine", "critical",
     "bash: line 1:  4242 Segmentation fault      (core dumped) ./engine"),
    ("\x1b[31mERROR\x1b[0m 10-09 12:00:00 [engine.py:1] colored", "error", "colored"),
])
def test_error_lines_become_entries(line, level, message):
    store, cap = capture()
    feed(cap, b"INFO 10-09 11:59:59 [x.py:1] fine\n" + line.encode() + b"\nINFO after\n")
    (e,) = entries(store)
    assert (e["level"], e["message"], e["exception"]) == (level, message, None)


def test_nccl_lines_carry_the_nccl_pid():
    store, cap = capture()
    feed(cap, b"gpu-box:3131:3232 [0] NCCL WARN Cuda failure 'out of memory'\n")
    (e,) = entries(store)
    assert e["tags"]["process.pid"] == "3131" and e["tags"]["error.kind"] == "nccl"


def test_terminate_called_joins_its_what_line():
    store, cap = capture()
    feed(cap, b"terminate called after throwing an instance of 'c10::Error'\n"
              b"  what():  CUDA error: misaligned address\n", chunk=5)
    (e,) = entries(store)
    assert e["level"] == "critical" and e["tags"]["error.kind"] == "terminate"
    assert e["message"] == "terminate called after throwing an instance of 'c10::Error': CUDA error: misaligned address"


@pytest.mark.parametrize("line", [
    "INFO 10-09 12:00:00 [gpu_model_runner.py:1] To avoid out of memory errors, lower gpu_memory_utilization",
    "gpu-box:3131:3232 [0] NCCL INFO Channel 00/02 : 0 1",
    "WARNING 10-09 12:00:00 [config.py:1] Possibly too large max_num_seqs",
    "The model answered: ERROR handling in Rust uses Result",  # content, not a log level
    "0 errors, 0 failures",
    "Error rate: 0.0%",
])
def test_ordinary_lines_are_not_entries(line):
    store, cap = capture()
    feed(cap, line.encode() + b"\n")
    assert entries(store) == []


def test_prompts_and_completions_are_never_recorded():
    secret = "my secret prompt about the launch codes"
    out = "".join('{"prompt": "%s", "completion": "ok %d"}\n' % (secret, i) for i in range(200))
    out += "ERROR 10-09 12:00:00 [serving.py:1] request failed\n"
    store, cap = capture()
    feed(cap, out.encode(), stream="stdout", chunk=333)
    (e,) = entries(store)
    assert e["message"] == "request failed"
    assert all(secret not in str(v) for e in store.errors for v in e.values())


# -- bounds ----------------------------------------------------------------------------

def test_ten_megabyte_line_is_cut_and_never_buffered():
    store, cap = capture()
    big = b"ERROR 10-09 12:00:00 [x.py:1] " + b"y" * (10 << 20) + b"\nERROR 10-09 12:00:00 [x.py:1] next\n"
    for i in range(0, len(big), 65536):
        cap._scan_chunk("stdout", big[i:i + 65536], False)  # the scanner, as its thread calls it
        assert len(cap._streams["stdout"].pending) <= console.MAX_LINE
    cap.close_stream("stdout")
    first, second = entries(store)
    assert first["message"].endswith("[cut]") and len(first["message"]) <= console.MAX_LINE + 10
    assert second["message"] == "next"


def test_binary_garbage_is_harmless():
    rng = random.Random(1234)
    junk = bytes(rng.getrandbits(8) for _ in range(1 << 20))
    store, cap = capture()
    feed(cap, junk + b"\n\xff\xfe\x00ERROR\x00\n" + PY_TRACEBACK, chunk=4096)
    tb = entries(store, "exception")
    assert len(tb) == 1 and tb[0]["message"] == "ValueError: checkpoint shard 3 is missing"
    for e in store.errors:  # everything is valid text
        assert isinstance(e["message"], str)
        e["message"].encode("utf-8")


def test_flood_of_one_error_is_one_counted_entry():
    store, cap = capture(Clock())
    feed(cap, b"ERROR 10-09 12:00:00 [x.py:1] KV cache is full\n" * 10000, stream="stdout", chunk=65536)
    (e,) = entries(store)
    assert e["count"] == 10000 and cap.dropped == 0


def test_flood_of_distinct_errors_keeps_the_latest_and_counts_the_rest():
    clock = Clock()  # time stands still: only the burst is allowed
    store, cap = capture(clock)
    feed(cap, b"".join(b"ERROR 10-09 12:00:00 [x.py:1] request %d failed\n" % i for i in range(5000)),
         stream="stdout", chunk=65536)
    assert len(store.errors) <= 100
    assert cap.dropped == 5000 - console.BURST
    dropped = store.lookup(console.DROPPED_METRIC, "counter", {"stream": "stdout"})[0]
    assert dropped.total == cap.dropped
    clock.t += 10  # the bucket refills with time
    feed(cap, b"ERROR 10-09 12:00:00 [x.py:1] later\n", stream="stdout")
    assert store.errors[-1]["message"] == "later"


def _traceback(i):
    return (b'Traceback (most recent call last):\n  File "/app/w.py", line %d, in step\n    run(%d)\n'
            b"KeyError: 'request %d'\n" % (i, i, i))


def test_back_to_back_tracebacks_are_each_an_entry():
    # three traceback.print_exc() in a row: before, only the last of the three was recorded
    store, cap = capture(Clock())
    feed(cap, _traceback(1) + _traceback(2) + _traceback(3))
    assert [e["message"] for e in entries(store)] == ["KeyError: 'request 1'", "KeyError: 'request 2'",
                                                      "KeyError: 'request 3'"]
    assert all(e["exception"].count("Traceback") == 1 for e in entries(store))


def test_distinct_tracebacks_are_distinct_entries_and_bounded():
    # before: 100,000 distinct tracebacks back to back were one entry with count 1
    clock = Clock()
    store = MetricStore()
    cap = ConsoleCapture(store, lambda: ROOT_PID, clock=clock, max_queued=1 << 30)  # scan every byte
    data = b"".join(_traceback(i) for i in range(100_000))
    for i in range(0, len(data), 65536):
        cap.feed("stderr", data[i:i + 65536])
        clock.t += 0.001
    cap.close_stream("stderr", timeout=300)
    kept = entries(store)
    assert len(kept) == len({e["message"] for e in kept}) == 100  # the latest distinct ones (MAX_ERRORS)
    # every traceback is accounted for: an entry (while the rate allowed) or the dropped counter
    assert store.errors_total + cap.dropped == 100_000


def test_a_flood_the_scanner_cannot_keep_up_with_is_passed_over_and_counted():
    store = MetricStore()
    cap = ConsoleCapture(store, lambda: ROOT_PID, max_queued=256 << 10)
    data = b"".join(_traceback(i) for i in range(100_000))  # 13 MB, fed as fast as a pipe can deliver
    for i in range(0, len(data), 65536):
        cap.feed("stderr", data[i:i + 65536])  # never waits for the scanner
        assert cap._queued <= cap.max_queued
    cap.feed("stderr", b"ERROR: the last line\n")
    cap.close_stream("stderr", timeout=60)
    assert cap.unscanned > 0
    assert store.lookup(console.UNSCANNED_METRIC)[0].total == cap.unscanned
    assert all(e["exception"] is None or e["exception"].count("Traceback") == 1 for e in entries(store))


def test_repeats_of_recent_entries_are_counted_not_rate_limited():
    # time stands still: only the burst is allowed for new entries; every byte scanned (a loaded machine's scanner
    # falls behind the feed, and what is past max_queued is passed over, counted as unscanned: not this test's subject)
    store, cap = capture(Clock(), max_queued=1 << 30)
    feed(cap, (_traceback(1) + _traceback(2)) * 5000, chunk=65536)
    assert cap.unscanned == 0
    assert sorted(e["count"] for e in entries(store)) == [5000, 5000] and cap.dropped == 0


def test_control_bytes_in_console_lines_are_escaped_in_entries():
    store, cap = capture()
    feed(cap, b"ERROR: \x1b]0;pwned\x07 rm \x00 -rf \x1b[2J done\n")
    (e,) = entries(store)
    assert not any(c in e["message"] for c in "\x00\x07\x1b"), e["message"]
    assert "\\x07" in e["message"] and "done" in e["message"]


def test_three_print_exc_under_graphsignal_run():
    code = ("import traceback\nfor i in range(3):\n    try:\n        {}['k%d' % i]\n"
            "    except KeyError:\n        traceback.print_exc()\n")
    bare, signals = bare_and_wrapped([sys.executable, "-c", code])
    assert [e["message"] for e in console_entries(signals)] == ["KeyError: 'k0'", "KeyError: 'k1'", "KeyError: 'k2'"]


def test_progress_bars_redrawn_with_carriage_returns_do_not_hide_errors():
    bars = b"".join(b"\rLoading safetensors: %3d%%|####" % p for p in range(100)) * 50
    store, cap = capture()
    feed(cap, bars + b"\rCUDA error: out of memory\n", chunk=1000)
    (e,) = entries(store)
    assert e["message"] == "CUDA error: out of memory" and e["tags"]["error.kind"] == "oom"


def test_feed_never_raises_on_odd_input():
    store, cap = capture()
    for data in (b"", b"\n", b"\r", b"\r\n" * 100, b"\x00" * 10, "é".encode() * 3000, b"Traceback (most recent"):
        cap.feed("stdout", data)
    cap.close_stream("stdout")
    cap.close_stream("never-fed")


# -- real crashing children under graphsignal-run ---------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def no_core_dumps():
    """The crashing children must not leave core files behind."""
    old = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, old[1]))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, old)


def bare_and_wrapped(cmd):
    bare = subprocess.run(cmd, capture_output=True, timeout=60)
    wrapped, signals = run_wrapped(cmd, env=quiet_env(), timeout=60)
    assert wrapped.returncode == bare.returncode
    assert wrapped.stdout == bare.stdout
    assert wrapped.stderr == bare.stderr
    assert signals is not None
    return bare, signals


def console_entries(signals, kind=None):
    return [e for e in signals["errors"] if "stream" in e["tags"]
            and (kind is None or e["tags"].get("error.kind") == kind)]


def exit_entries(signals):
    return [e for e in signals["errors"] if "exit.code" in e["tags"] or "exit.signal" in e["tags"]]


def test_python_program_that_raises():
    code = ("import sys\nprint('starting', flush=True)\nsys.stdout.write('no newline at the end')\n"
            "def load():\n    raise ValueError('boom 42')\nload()\n")
    bare, signals = bare_and_wrapped([sys.executable, "-c", code])
    assert bare.returncode == 1
    (e,) = console_entries(signals)
    pid = e["tags"]["process.pid"]
    assert e["message"] == "ValueError: boom 42" and e["level"] == "error"
    assert e["tags"]["stream"] == "stderr" and e["tags"]["error.kind"] == "exception"
    assert e["exception"].startswith("Traceback (most recent call last):")
    assert 'in load' in e["exception"] and e["exception"].endswith("ValueError: boom 42")
    (x,) = exit_entries(signals)
    assert x["tags"] == {"process.pid": pid, "exit.code": "1"}


def test_python_program_that_runs_out_of_memory():
    code = """
import resource
def vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (256 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
print("limit set", flush=True)
keep = []
while True:
    keep.append(bytearray(8 << 20))
"""
    bare, signals = bare_and_wrapped([sys.executable, "-c", code])
    assert bare.returncode == 1 and bare.stderr.rstrip().endswith(b"MemoryError")
    (e,) = console_entries(signals)
    assert e["message"] == "MemoryError" and e["tags"]["error.kind"] == "oom"
    assert 'File "<string>", line 12' in e["exception"]
    assert [x["tags"]["exit.code"] for x in exit_entries(signals)] == ["1"]


def test_c_program_that_segfaults():
    exe = compile_c("console_segfault.c")
    bare, signals = bare_and_wrapped([exe])
    assert bare.returncode == -11 and bare.stdout == b"step 1 done\n"
    assert console_entries(signals) == []  # it printed nothing wrong; the signal tells
    (x,) = exit_entries(signals)
    assert x["tags"]["exit.signal"] == "11" and "SIGSEGV" in x["message"] and x["level"] == "error"


def test_cxx_program_that_aborts_on_an_uncaught_exception():
    exe = compile_c("console_terminate.cpp", cxx=True)
    bare, signals = bare_and_wrapped([exe])
    assert bare.returncode == -6
    (e,) = console_entries(signals)
    assert e["level"] == "critical" and e["tags"]["error.kind"] == "terminate"
    assert e["message"] == ("terminate called after throwing an instance of 'std::runtime_error': "
                            "failed to load engine: bad plan file")
    (x,) = exit_entries(signals)
    assert x["tags"]["exit.signal"] == "6" and "SIGABRT" in x["message"]


def test_c_program_that_fails_an_assert():
    exe = compile_c("console_assert.c")
    bare, signals = bare_and_wrapped([exe])
    assert bare.returncode == -6
    (e,) = console_entries(signals)
    assert e["tags"]["error.kind"] == "assert" and "block table is consistent" in e["message"]
    assert e["message"].endswith("failed.")
    assert [x["tags"]["exit.signal"] for x in exit_entries(signals)] == ["6"]


def test_program_printing_a_ten_megabyte_line_and_binary_bytes():
    code = r"""
import random, sys
out, err = sys.stdout.buffer, sys.stderr.buffer
out.write(b"A" * (10 << 20) + b"\n")
out.write(bytes(range(256)) * 256 + b"\n\x00\xff\xfe half a line\r\n")
err.write(random.Random(7).randbytes(1 << 20))
err.write(b"\nERROR 01-02 03:04:05 [app.py:9] after the noise\n")
out.write(b"ERROR 01-02 03:04:05 [app.py:10] " + b"z" * (10 << 20) + b"\n")
out.write(b"tail without newline")
"""
    bare, signals = bare_and_wrapped([sys.executable, "-c", code])
    assert bare.returncode == 0 and len(bare.stdout) > 20 << 20
    got = sorted((e["tags"]["stream"], e["message"][:40]) for e in console_entries(signals))
    assert got == [("stderr", "after the noise"), ("stdout", "z" * 40)]
    cut = [e for e in console_entries(signals) if e["tags"]["stream"] == "stdout"][0]
    assert cut["message"].endswith("[cut]") and len(cut["message"]) <= console.MAX_LINE + 10
    assert exit_entries(signals) == []


# -- engine notices the findings read -----------------------------------------------------

def test_engine_context_and_offload_lines_become_entries_the_findings_read():
    from graphsignal import findings

    store, cap = capture()
    feed(cap, b"load_tensors: offloaded 9/9 layers to GPU\n"  # all on the GPU: nothing to say
              b"load_tensors: offloaded 4/9 layers to GPU\n"
              b"0.01.234.567 I load_tensors: offloaded 2/9 layers to GPU\n"  # said at info level: still read
              b"srv    send_error: task id = 12, error: request (161 tokens) exceeds the available context size "
              b"(128 tokens), try increasing it\n"
              b"slot context_shift: id  0 | task 7 | slot context shift, n_keep = 0, n_left = 126, n_discard = 63\n")
    got = [(e["tags"]["error.kind"], e["level"]) for e in entries(store)]
    assert got == [("offload", "warning"), ("offload", "warning"), ("context", "error"), ("context", "warning")]
    doc = {"engine": {"engine": "llamacpp"}, "errors": list(store.errors), "metrics": []}
    assert [f["id"] for f in findings.compute(doc)] == ["context_too_small", "cpu_offload"]


def test_a_context_notice_is_one_counted_entry_whatever_its_request_numbers():
    """llama.cpp prints a truncated request once per request, with the slot, task and token count of each:
    400 of them are one entry counted 400 times (not 100 entries, the list's cap, and drops), and the
    findings see all 400 only when an engine was seen."""
    from graphsignal import findings

    store, cap = capture()
    feed(cap, b"".join(b"0.01.%03d.000 I slot      release: id  %d | task %d | stop processing: n_tokens = %d, "
                       b"truncated = 1\n" % (i % 1000, i % 4, 1000 + i, 100 + i) for i in range(400)))
    (e,) = entries(store, "context")
    assert e["count"] == 400 and e["message"] == ("slot      release: id * | task * | stop processing: n_tokens = *, "
                                                  "truncated = 1")
    doc = {"engine": {"engine": "llamacpp"}, "errors": list(store.errors), "metrics": []}
    (f,) = findings.compute(doc)
    assert f["id"] == "context_too_small" and f["evidence"][0]["value"] == 400
    assert findings.compute(dict(doc, engine=None)) == []  # no engine seen: the entry stays in errors only
