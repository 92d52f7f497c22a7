"""End to end: graphsignal-run wraps a fake `vllm` executable (first on PATH,
so the launcher recognizes `vllm serve`). The fake behaves like a vLLM
endpoint: it loads for a while (connections refused), then serves real
prometheus_client metric objects under vLLM's names on its --port while
"requests" advance them, and finally logs an error and exits with code 3.
The engine's series, the engine summary and the error show up in /signals,
read over HTTP while it runs and from the final payload at exit."""
import json
import os
import stat
import subprocess
import sys
import textwrap

from support.gsrun import GS_RUN, free_port, json_or_none, quiet_env, wait_for

FAKE_VLLM = textwrap.dedent('''\
    #!{python}
    """A stand-in for `vllm serve MODEL --port P`: see tests/test_engines_e2e.py."""
    import json, os, sys, time
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

    argv = sys.argv[1:]
    with open(os.environ["FAKE_VLLM_ARGV"], "w") as f:
        json.dump(argv, f)
    port = int(argv[argv.index("--port") + 1])
    go, stop = os.environ["FAKE_VLLM_GO"], os.environ["FAKE_VLLM_STOP"]
    deadline = time.monotonic() + 60
    print("INFO 01-01 00:00:00 [api_server.py:1] loading weights", flush=True)
    while not os.path.exists(go) and time.monotonic() < deadline:  # the slow start: nothing listens
        time.sleep(0.05)

    reg = CollectorRegistry()
    lab = dict(model_name="fake-model", engine="0")
    names = list(lab)
    running = Gauge("vllm:num_requests_running", "running", names, registry=reg).labels(**lab)
    waiting = Gauge("vllm:num_requests_waiting", "waiting", names, registry=reg).labels(**lab)
    kv = Gauge("vllm:kv_cache_usage_perc", "kv", names, registry=reg).labels(**lab)
    prompt = Counter("vllm:prompt_tokens", "prompt", names, registry=reg).labels(**lab)
    gen = Counter("vllm:generation_tokens", "gen", names, registry=reg).labels(**lab)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", names, registry=reg,
                     buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5]).labels(**lab)
    itl = Histogram("vllm:inter_token_latency_seconds", "itl", names, registry=reg,
                    buckets=[0.01, 0.025, 0.05, 0.075, 0.1]).labels(**lab)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "e2e", names, registry=reg,
                    buckets=[0.3, 0.5, 0.8, 1, 1.5, 2]).labels(**lab)
    running.set(3)
    waiting.set(1)
    kv.set(0.42)
    start_http_server(port, addr="127.0.0.1", registry=reg)
    print("INFO 01-01 00:00:01 [api_server.py:2] Started server process", flush=True)
    while not os.path.exists(stop) and time.monotonic() < deadline:
        prompt.inc(20)
        gen.inc(50)
        ttft.observe(0.03)
        e2e.observe(1.2)
        for _ in range(5):
            itl.observe(0.02)
        time.sleep(0.1)
    sys.stderr.write("ERROR 01-01 00:00:09 [core.py:700] EngineCore died: fake failure\\n")
    sys.stderr.flush()
    sys.exit(3)
''')


def metric(signals, name):
    return [m for m in signals["metrics"] if m["name"] == name]


def test_vllm_like_endpoint_shows_up_in_signals(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    go, stop, argv_file = tmp_path / "go", tmp_path / "stop", tmp_path / "argv.json"
    final = tmp_path / "signals.json"
    port, listen = free_port(), free_port()
    env = quiet_env(PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""), FAKE_VLLM_GO=go,
                    FAKE_VLLM_STOP=stop, FAKE_VLLM_ARGV=argv_file, GRAPHSIGNAL_SIGNALS_FILE=final)
    cmd = GS_RUN + ["--listen-port", str(listen), "vllm", "serve", "fake-model", "--port", str(port),
                    "--disable-log-stats", "--max-num-seqs", "8"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = "http://127.0.0.1:%d/signals" % listen

    def signals():
        return json_or_none(url)

    def up_value(doc):
        ms = metric(doc, "prometheus_scrape_up") if doc else []
        return ms[0]["stats"]["value"] if ms else None

    try:
        # While the engine loads: the scraper is there, down, and says where it looks (an info entry)
        doc = wait_for(lambda: (lambda d: d if d and up_value(d) == 0 and
                                metric(d, "prometheus_scrape_failures_total")[0]["stats"]["total"] >= 1
                                else None)(signals()), timeout=30)
        assert doc, "the sidecar never reported the engine as down while it loads"
        up = metric(doc, "prometheus_scrape_up")[0]
        assert up["tags"] == {"url": "http://127.0.0.1:%d/metrics" % port, "engine": "vllm"}
        assert doc["engine"] is None
        said = [e for e in doc["errors"] if e["tags"].get("source") == "prometheus"]
        assert [(e["level"], e["resolved_ns"]) for e in said] == [("info", None)], said
        assert up["tags"]["url"] in said[0]["message"]
        assert wait_for(argv_file.exists, timeout=30)  # the engine may still be starting its interpreter
        assert json.loads(argv_file.read_text()) == ["serve", "fake-model", "--port", str(port),
                                                     "--max-num-seqs", "8"]  # --disable-log-stats dropped

        go.write_text("")  # the engine is up
        doc = wait_for(lambda: (lambda d: d if d and d["engine"] and d["engine"]["window"] and
                                (d["engine"]["window"]["generation_tokens_per_second"] or 0) > 0
                                else None)(signals()), timeout=40)
        assert doc, "engine metrics and their rates never showed up"
        eng = doc["engine"]
        assert eng["engine"] == "vllm"
        assert (eng["requests_running"], eng["requests_waiting"]) == (3, 1)
        assert abs(eng["kv_cache_usage_percent"] - 42.0) < 1e-9
        assert eng["ttft_seconds"]["count"] >= 1 and abs(eng["ttft_seconds"]["p50"] - 0.03) < 1e-9
        assert abs(eng["itl_seconds"]["p50"] - 0.0175) < 1e-9
        # 50 tokens every ~0.1 s: a positive rate; its exact value depends on the machine's pace
        assert eng["window"]["seconds"] > 0.5  # between two scrapes, about a second apart or more
        running = metric(doc, "vllm:num_requests_running")[0]
        assert running["type"] == "gauge" and running["tags"] == {"model_name": "fake-model", "engine": "0"}
        ttft = metric(doc, "vllm:time_to_first_token_seconds")[0]
        assert ttft["type"] == "histogram" and ttft["stats"]["min"] is None and ttft["stats"]["bins"][-1] is None
        assert up_value(doc) == 1

        stop.write_text("")
        out, err = proc.communicate(timeout=60)
    finally:
        go.write_text("")
        stop.write_text("")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3
    assert b"Started server process" in out
    assert err.endswith(b"ERROR 01-01 00:00:09 [core.py:700] EngineCore died: fake failure\n")

    final_doc = json.loads(final.read_text())
    assert final_doc["engine"]["engine"] == "vllm"
    assert final_doc["engine"]["generation_tokens_total"] >= 50
    # what the workload did per generated token and per finished request, from our own measurements: the
    # process tree's CPU time here (no CUPTI, no GPU: those figures are null, not 0)
    eng = final_doc["engine"]
    (tree,) = [m for m in metric(final_doc, "process_cpu_time_nanoseconds") if m["tags"].get("scope")]
    cpu = tree["stats"]["total"]
    assert cpu > 0
    assert eng["work_per_token"]["cpu_nanoseconds"] == cpu / eng["generation_tokens_total"]
    assert eng["work_per_request"]["cpu_nanoseconds"] == cpu / eng["e2e_seconds"]["count"]
    assert eng["work_per_token"]["kernel_launches"] is None and eng["work_per_token"]["copies"] is None
    died = [e for e in final_doc["errors"] if e["message"] == "EngineCore died: fake failure"]
    assert len(died) == 1 and died[0]["tags"]["stream"] == "stderr" and died[0]["level"] == "error"
    assert [e["tags"].get("exit.code") for e in final_doc["errors"] if "exit.code" in e["tags"]] == ["3"]
    # the scrape after the engine exited is no news
    # the engine loading was no error, and it is over
    assert all(e["level"] == "info" and e["resolved_ns"] is not None
               for e in final_doc["errors"] if e["tags"].get("source") == "prometheus")
