"""End to end: graphsignal-run wraps a stand-in `llama-server` (first on
PATH, so the launcher recognizes it) that, like the real one while it loads
its model, answers /metrics and /health with HTTP 503, then serves a real
llama-server exposition (tests/data/engines/llamacpp_2_live.txt). The
start-up is no error: one `info` entry that names the address and its
503 while it loads, resolved once it answers, no warning or error entry,
and the engine summary appears once it answers."""
import json
import os
import stat
import subprocess
import sys
import textwrap

from support.gsrun import GS_RUN, free_port, json_or_none, quiet_env, wait_for

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "engines")

FAKE = textwrap.dedent('''\
    #!{python}
    """A stand-in for `llama-server -m M --port P --metrics`: see tests/test_llamacpp_startup_e2e.py."""
    import http.server, json, os, sys, threading, time

    argv = sys.argv[1:]
    with open(os.environ["FAKE_ARGV"], "w") as f:
        json.dump(argv, f)
    port = int(argv[argv.index("--port") + 1])
    go, stop, served = os.environ["FAKE_GO"], os.environ["FAKE_STOP"], os.environ["FAKE_SERVED"]
    with open(os.environ["FAKE_BODY"], "rb") as f:
        body = f.read().split(b"\\n", 1)[1]
    n503 = [0]

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if not os.path.exists(go):
                n503[0] += 1
                with open(served, "w") as f:
                    f.write(str(n503[0]))
                out, status = b'{{"error":{{"code":503,"message":"Loading model"}}}}', 503
            elif self.path == "/metrics":
                out, status = body, 200
            else:
                out, status = b'{{"status":"ok"}}', 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("main: loading model", flush=True)
    deadline = time.monotonic() + 90
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.shutdown()
''')


def test_llama_server_loading_503_is_start_up_not_an_error(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "llama-server"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    go, stop, served, argv_file = (tmp_path / n for n in ("go", "stop", "served", "argv.json"))
    final = tmp_path / "signals.json"
    port, listen = free_port(), free_port()
    env = quiet_env(PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""), FAKE_GO=go, FAKE_STOP=stop,
                    FAKE_SERVED=served, FAKE_ARGV=argv_file, FAKE_BODY=os.path.join(DATA, "llamacpp_2_live.txt"),
                    GRAPHSIGNAL_SIGNALS_FILE=final)
    cmd = GS_RUN + ["--listen-port", str(listen), "llama-server", "-m", "tiny.gguf", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d/signals" % listen

    def signals():
        return json_or_none(url)

    def scrape_errors(doc):
        # (a host without a GPU adds its own "no NVIDIA driver" lines: not ours to judge here)
        return [e for e in doc["errors"] if e["level"] != "info" and (
            e["tags"].get("source") == "prometheus" or "503" in e["message"] or "metrics" in e["message"])]

    def loading(doc):
        return [e for e in doc["errors"] if e["level"] == "info" and e["tags"].get("source") == "prometheus"]

    def failures(doc):
        ms = [m for m in doc["metrics"] if m["name"] == "prometheus_scrape_failures_total"] if doc else []
        return ms[0]["stats"]["total"] if ms else 0

    try:
        # the scraper has met the 503 at least twice (two attempts, 1 s apart)
        doc = wait_for(lambda: (lambda d: d if d and failures(d) >= 2 and served.exists() and
                                int(served.read_text() or 0) >= 2 else None)(signals()), timeout=60)
        assert doc, "the sidecar never scraped the loading engine"
        assert json.loads(argv_file.read_text()) == ["-m", "tiny.gguf", "--port", str(port), "--metrics"]
        assert scrape_errors(doc) == [] and doc["engine"] is None
        (e,) = loading(doc)
        assert "answers HTTP 503 (not ready)" in e["message"] and e["resolved_ns"] is None
        go.write_text("")  # the model is loaded
        doc = wait_for(lambda: (lambda d: d if d and d["engine"] else None)(signals()), timeout=40)
        assert doc, "the engine summary never appeared"
        assert doc["engine"]["engine"] == "llamacpp" and doc["engine"]["generation_tokens_total"] == 112
        assert scrape_errors(doc) == []
        stop.write_text("")
        out, _ = proc.communicate(timeout=60)
    finally:
        go.write_text("")
        stop.write_text("")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and b"main: loading model" in out
    final_doc = json.loads(final.read_text())
    assert scrape_errors(final_doc) == []
    assert all(e["resolved_ns"] is not None for e in loading(final_doc))
    assert final_doc["engine"]["engine"] == "llamacpp"
