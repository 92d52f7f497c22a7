"""graphsignal-top --once against a live sidecar (probe, CUPTI-like and
host data), and the command's behaviour around it, hostile endpoints
included."""
import subprocess

import pytest

from support.hostile_http import REFERENCE, HostileServer, assert_clean, console_script, escapes_inside
from support.top_sidecar import TOP, Sidecar, free_port


@pytest.fixture(scope="module")
def sidecar():
    with Sidecar() as s:
        yield s


def once(port, *args, env=None):
    r = subprocess.run(TOP + ["--once", "--port", str(port)] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30, env=env)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_once_shows_every_section(sidecar):
    rc, out, err = once(sidecar.port)
    assert rc == 0, err
    assert "\x1b[" not in out  # a pipe is never colored
    lines = out.splitlines()
    assert lines[0].startswith(" graphsignal-top ") and "127.0.0.1:%d" % sidecar.port in lines[0]
    assert "window 5s" in lines[0]
    for heading in (" HOST ", " GPU", " ENGINE ", " PROBES ", " ERRORS ", " [k]ernels"):
        assert any(ln.startswith(heading) for ln in lines), heading
    assert "top_probe_child.py" in out  # the workload's process and command line
    # GPU: telemetry where a GPU exists, else the section says there is none
    assert "no GPU telemetry" in out or " util " in out
    assert "no engine metrics" in out
    assert "myengine_batch_duration_nanoseconds" in out and "myengine_tokens" in out
    assert "myengine_queue_depth" in out and "myengine_ops_nanoseconds" in out
    assert "cuda graph trace: graph" in out
    table = out[out.index("[k]ernels"):]
    for cat, name in (("gemm", "sm90_xmma_gemm_bf16bf16"), ("attention", "flash_fwd_kernel<Flash_fwd_kernel_traits>"),
                      ("communication", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
                      ("normalization", "rms_norm_kernel<Half>"),
                      ("memory", "vectorized_elementwise_kernel<FillFunctor>")):
        row = next(ln for ln in table.splitlines() if name in ln)
        assert cat in row
    rows = [ln for ln in table.splitlines() if "%" in ln and "us" in ln]
    assert "sm90_xmma_gemm" in rows[0]  # the largest share of the window comes first
    assert "last " in table


@pytest.mark.parametrize("table,expect", [("graphs", "graph_1"), ("memory", "memcpy host_to_device (pageable)"),
                                          ("sync", "stream")])
def test_once_other_tables(sidecar, table, expect):
    rc, out, err = once(sidecar.port, "--table", table)
    assert rc == 0, err
    body = out[out.index("[k]ernels"):]
    assert any(expect in ln and "%" in ln for ln in body.splitlines()), body


def test_once_against_nothing_says_unreachable_and_fails():
    port = free_port()
    rc, out, err = once(port)
    assert rc == 1
    assert "127.0.0.1:%d unreachable" % port in out and "connection refused" in out
    # and one line on stderr, for scripts that read only that
    assert err.count("\n") == 1 and err.startswith("graphsignal-top: 127.0.0.1:%d: " % port) and "refused" in err
    assert "no CUDA kernel profile" in out  # the page still has its shape


def test_without_a_terminal_and_without_once_exits_2():
    r = subprocess.run(TOP + ["--port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert r.returncode == 2
    assert "not a terminal" in r.stderr.decode() and "--once" in r.stderr.decode()
    assert r.stdout == b""


def test_help_and_version():
    r = subprocess.run(TOP + ["--help"], stdout=subprocess.PIPE, timeout=30)
    assert r.returncode == 0 and b"--once" in r.stdout and b"--no-color" in r.stdout and b"--window" in r.stdout
    r = subprocess.run(TOP + ["--version"], stdout=subprocess.PIPE, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith(b"graphsignal-top ")


GS_TOP = console_script("graphsignal-top")


@pytest.mark.parametrize("mode,needle,args", [
    ("binary", "binary data, not JSON", []),
    ("nohttp", "not an HTTP answer", []),
    ("deep", "not a /signals payload: objects and lists nest 300000 levels deep", []),  # before: SIGSEGV
    ("html", "an HTML or XML page, not JSON", []),
    ("shape", "JSON, but not a /signals payload (no metrics list)", []),
    ("error", "HTTP 500: \\x1b[2J\\x1b]0;pwned\\x07\\x1b[31m", []),  # escaped, not obeyed
    ("error_huge", "HTTP 500\n", []),
    ("huge", "the answer is 2048 MB, larger than 256 MB", ["--timeout", "600"]),
    ("endless", "the answer is larger than 256 MB", ["--timeout", "600"]),
    ("trickle", "no complete answer within 2 s", ["--timeout", "2"]),
    ("trickle_head", "no complete answer within 2 s", ["--timeout", "2"]),
])
def test_once_against_a_hostile_endpoint_says_why_in_one_line_and_fails(mode, needle, args):
    with HostileServer(mode) as srv:
        r = subprocess.run(GS_TOP + ["--once", "--port", str(srv.port)] + args, capture_output=True, timeout=120)
        assert srv.requests >= 1
    assert r.returncode == 1
    # no traceback: the page says what is wrong, and one line on stderr the same
    err = assert_clean(r.stderr)
    assert err.count("\n") == 1 and err.startswith("graphsignal-top: 127.0.0.1:%d: " % srv.port) and needle in err
    out = assert_clean(r.stdout)
    said = [ln for ln in out.splitlines(True) if ("127.0.0.1:%d unreachable: " % srv.port in ln
                                                  or "127.0.0.1:%d answered HTTP " % srv.port in ln)]
    assert len(said) == 1 and needle in said[0], out
    assert "no CUDA kernel profile" in out  # the page keeps its shape


def test_once_against_a_payload_it_cannot_show_is_one_line_on_stderr():
    # the outline of a payload (a metrics list) with the wrong things inside
    with HostileServer("inside") as srv:
        r = subprocess.run(GS_TOP + ["--once", "--port", str(srv.port)], capture_output=True, timeout=120)
    assert r.returncode == 1 and r.stdout == b""
    err = assert_clean(r.stderr)
    assert err.count("\n") == 1 and b"Traceback" not in r.stderr
    assert err.startswith("graphsignal-top: 127.0.0.1:%d: cannot show this payload: " % srv.port), err


def test_once_shows_control_characters_inside_a_payload_escaped():
    with HostileServer("payload", body=escapes_inside(REFERENCE)) as srv:
        r = subprocess.run(GS_TOP + ["--once", "--port", str(srv.port)], capture_output=True, timeout=120)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    out = assert_clean(r.stdout)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b" in out, out


def test_the_timeout_must_be_a_positive_number():
    for bad in ("0", "-1", "soon", "601"):
        r = subprocess.run(TOP + ["--once", "--timeout", bad], capture_output=True, timeout=30)
        assert r.returncode == 2 and b"--timeout" in r.stderr, r.stderr


def test_once_bounds_the_retry_without_a_window_by_the_same_timeout():
    # before: a sidecar that refuses ?window is asked again, and each request had the
    # whole --timeout: two slow answers took twice as long
    with open(REFERENCE, "rb") as f:
        body = f.read()
    # 1.5 s: inside the 2 s a single read may wait, so only the whole-fetch deadline can end it
    with HostileServer("late_nowindow", body=body, late=1.5) as srv:
        r = subprocess.run(GS_TOP + ["--once", "--port", str(srv.port), "--timeout", "2.5"], capture_output=True,
                           timeout=120)
    assert r.returncode == 1, r.stderr
    err = assert_clean(r.stderr)
    assert err.count("\n") == 1 and err.startswith("graphsignal-top: 127.0.0.1:%d: " % srv.port), err
    assert "no complete answer within 2.5 s" in err, err


def test_once_against_a_server_that_answers_404_says_not_found_not_unreachable():
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        rc, out, err = once(port)
    finally:
        srv.shutdown()
        srv.server_close()
    assert rc == 1
    assert "not found at http://127.0.0.1:%d/signals (HTTP 404" % port in out, out
    assert "unreachable" not in out
