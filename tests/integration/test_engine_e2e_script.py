"""scripts/engine_e2e.py end to end on a machine without llama.cpp: the
stand-in llama-server of tests/support/fakes (same command line, /health 503 then
200, /completion with timings.predicted_n, /metrics with llama-server's
names) run bare and under graphsignal-run, with the script's real load
generator, /signals poller and payload bookkeeping. The GPU host runs the
same script on the real llama-server (scripts/run_gpu_suite.sh)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "engine_e2e.py")
FAKE = os.path.join(ROOT, "tests", "support", "fakes", "fake_llama_server.py")
TOKEN_MS = 0.5  # the stand-in's decode time per token (it reports it as timings.predicted_ms)


def _fake_server(tmp_path):
    server = tmp_path / "llama-server"  # the name graphsignal-run's launcher recognizes
    server.symlink_to(FAKE)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # the stand-in does not read it
    return server, model


def _run(tmp_path, *extra, env=None, timeout=240):
    server, model = _fake_server(tmp_path)
    out = tmp_path / "out"
    e = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error", FAKE_LLAMA_TOKEN_MS=str(TOKEN_MS))
    e.update(env or {})
    r = subprocess.run([sys.executable, SCRIPT, "--llama-server", str(server), "--model", str(model),
                        "--n-predict", "16", "--signals-interval", "0.1", "--out", str(out)] + list(extra),
                       capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    if r.returncode == 0:
        assert lines == [json.loads(x) for x in (out / "engine_e2e.jsonl").read_text().splitlines()]
    return r, lines, out


def test_final_scrape_last_waits_only_in_the_last_repetition(tmp_path):
    """--final-scrape last: the scrape after the load (for the kept payload) only where the payload kept is
    written, the last repetition; the others stop the server at once."""
    r, lines, _ = _run(tmp_path, "--modes", "bare,graph", "--clients", "1", "--reps", "2", "--duration", "0.6",
                       "--warmup", "0.2", "--final-scrape", "last")
    assert r.returncode == 0, r.stderr[-3000:]
    graph = [x for x in lines if x.get("mode") == "graph" and "rep" in x and not x.get("summary")]
    assert [(p["rep"], "final_scrape_wait_seconds" in p) for p in graph] == [(0, False), (1, True)], graph
    assert all(p["engine_seen_by"] == "scrape" and p["payload"] for p in graph)


def test_engine_e2e_runs_each_mode_and_summarizes(tmp_path):
    r, lines, out = _run(tmp_path, "--modes", "bare,graph,probe", "--mode",
                         "probe=--cuda-graph-trace node GRAPHSIGNAL_X=1", "--clients", "2", "--reps", "1",
                         "--duration", "1.5", "--warmup", "0.3")
    assert r.returncode == 0, r.stderr[-3000:]
    config, points, ratios, summaries = lines[0], lines[1:4], lines[4], lines[5:]
    assert config["config"] and [m["name"] for m in config["modes"]] == ["bare", "graph", "probe"]
    assert config["modes"][2] == {"name": "probe", "bare": False, "options": ["--cuda-graph-trace", "node"],
                                  "env": {"GRAPHSIGNAL_X": "1"}}
    assert [p["mode"] for p in points] == ["bare", "graph", "probe"]  # repetition 0 runs them in --modes order
    for p in points:
        assert "error" not in p, p
        assert p["clients"] == 2 and p["rep"] == 0 and p["exit_status"] == 0
        # 16 tokens a request, prorated at the window's edges: each of the 2 clients has at most one
        # request across each edge, so the tokens are those of the requests completed inside, +-2x2 requests
        assert p["requests"] > 0 and p["load_errors"] == 0
        assert 16 * (p["requests"] - 4) <= p["tokens"] <= 16 * (p["requests"] + 4), p
        assert p["tokens_per_second"] > 0 and 0 < p["latency_p50_s"] <= p["latency_p90_s"]
        assert "ratio_to_bare" not in p  # a point is written as soon as it is measured, before its bare run may be
    # the server's own decode speed: each request's tokens over its generation ms (the fake's
    # token_ms a token, whatever HTTP and the clients add around it)
    for p in points:
        assert p["decode_tokens_per_second"] == pytest.approx(1000.0 / TOKEN_MS, rel=1e-6), p
    dec = {m: round(points[i]["decode_tokens_per_second"] / points[0]["decode_tokens_per_second"], 4)
           for i, m in enumerate(("bare", "graph", "probe"))}
    assert ratios == {"ratios": True, "rep": 0, "clients": 2, "ratio_to": "bare", "ratio_to_bare": {
        "bare": 1.0, "graph": round(points[1]["tokens_per_second"] / points[0]["tokens_per_second"], 4),
        "probe": round(points[2]["tokens_per_second"] / points[0]["tokens_per_second"], 4)},
        "decode_ratio_to_bare": dec}
    assert "signals_p99_ms" not in points[0]  # bare: nothing to poll
    for p in points[1:]:
        assert p["signals_polls"] > 3 and p["signals_failures"] == 0
        assert 0 < p["signals_p50_ms"] <= p["signals_p99_ms"]
        assert p["payload"] and p["dropped_records"] == 0 and p["errors"] == []
        # the load starts once the engine is scraped, and the server stops after one more scrape
        assert p["engine_seen"] is True and p["engine_seen_by"] == "scrape"
        assert p["scrape_wait_seconds"] is not None and p["final_scrape_wait_seconds"] is not None
        assert p["engine"] == "llamacpp" and p["engine_generation_tokens_total"] >= 16
        doc = json.loads(open(p["signals_file"]).read())
        assert os.path.basename(p["signals_file"]) == "signals_%s_c2.json" % p["mode"]
        assert any(m["name"] == "llamacpp:n_decode_total" for m in doc["metrics"])
    modes = {m["name"]: m["stats"]["value"] for m in
             json.loads(open(points[2]["signals_file"]).read())["metrics"] if m["name"] == "cuda_graph_trace_mode"}
    assert modes in ({}, {"cuda_graph_trace_mode": 1})  # set only where the CUDA library loads
    assert [(s["mode"], s["clients"], s["reps"]) for s in summaries] == [("bare", 2, 1), ("graph", 2, 1),
                                                                          ("probe", 2, 1)]
    assert summaries[0]["tokens_per_second"] == points[0]["tokens_per_second"]
    assert summaries[0]["ratio_to_bare"] == 1.0 and summaries[0]["rep_ratios"] == [1.0]
    assert summaries[1]["ratio_to_bare"] == ratios["ratio_to_bare"]["graph"]
    assert summaries[1]["dropped_records"] == 0 and "overhead_percent" in summaries[1]
    assert summaries[1]["decode_ratio_to_bare"] == dec["graph"] and summaries[1]["decode_rep_ratios"] == [dec["graph"]]
    assert (out / "server_graph_c2_r0.log").exists()


def test_tokens_are_prorated_by_the_share_of_each_request_inside_the_window():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import llama_harness
    finally:
        sys.path.pop(0)
    load = llama_harness.Load(port=1, clients=1)
    # (completed at, tokens, seconds, generation ms): inside, straddling the start, straddling the end,
    # outside, spanning it all
    load.done = [(5.0, 100, 2.0, 1000.0), (1.5, 100, 1.0, 500.0), (10.5, 100, 1.0, 900.0), (0.5, 100, 0.4, None),
                 (12.0, 120, 12.0, 600.0)]
    tokens, lat = load.window(1.0, 10.0)
    assert tokens == pytest.approx(100 + 50 + 50 + 0 + 120 * 9 / 12)
    assert sorted(lat) == [1.0, 2.0]  # latencies: the requests completed inside
    assert load.window(20.0, 30.0) == (0.0, [])
    # decode speed: the requests that ended inside, by their own generation time
    assert load.decode_rate(1.0, 10.0) == pytest.approx(1000.0 * 200 / 1500.0, abs=0.01)
    assert load.decode_rate(0.0, 1.0) is None  # one request, without timings
    assert load.decode_rate(20.0, 30.0) is None


def test_run_commands_bare2_and_the_ratio_statistic(tmp_path):
    """--run puts another command in front of llama-server (here this
    checkout's graphsignal-run, started as an outside tool would be),
    interleaved with the built-in modes; bare2 is a second bare run; the
    summary's statistic is the median of each repetition's own ratio."""
    ext = "env PYTHONPATH=%s %s -m graphsignal.cli.run --listen-port {port} --" % (ROOT, sys.executable)
    r, lines, out = _run(tmp_path, "--modes", "bare,bare2,ext", "--run", "ext=" + ext, "--clients", "1",
                         "--reps", "2", "--duration", "1.0", "--warmup", "0.3")
    assert r.returncode == 0, r.stderr[-3000:]
    config = lines[0]
    assert config["modes"][1] == {"name": "bare2", "bare": True, "options": [], "env": {}}
    assert config["modes"][2]["command"][-4:] == ["graphsignal.cli.run", "--listen-port", "{port}", "--"]
    assert config["modes"][2]["signals"] is True
    points = [x for x in lines if "mode" in x and "summary" not in x]
    # rotated: repetition 1 starts with the second mode
    assert [(p["rep"], p["mode"]) for p in points] == [(0, "bare"), (0, "bare2"), (0, "ext"),
                                                       (1, "bare2"), (1, "ext"), (1, "bare")]
    ext_points = [p for p in points if p["mode"] == "ext"]
    for p in ext_points:
        assert "error" not in p and p["tokens"] > 0
        # the outside command served /signals on the port it was given, and scraped the engine
        assert p["engine_seen"] is True and p["signals_polls"] > 3 and p["signals_failures"] == 0
        assert p["payload"] and p["engine"] == "llamacpp"  # it wrote GRAPHSIGNAL_SIGNALS_FILE
    groups = [x for x in lines if x.get("ratios")]
    assert [(g["rep"], g["clients"]) for g in groups] == [(0, 1), (1, 1)]
    tps = {(p["rep"], p["mode"]): p["tokens_per_second"] for p in points}
    for g in groups:
        for m in ("bare2", "ext"):
            assert g["ratio_to_bare"][m] == round(tps[(g["rep"], m)] / tps[(g["rep"], "bare")], 4)
    summaries = {s["mode"]: s for s in lines if s.get("summary")}
    for m in ("bare", "bare2", "ext"):
        rs = [g["ratio_to_bare"][m] for g in groups]
        s = summaries[m]
        assert s["rep_ratios"] == rs and s["ratio_reps"] == 2 and s["ratio_to"] == "bare"
        assert s["ratio_to_bare"] == sum(rs) / 2 and s["ratio_min"] == min(rs) and s["ratio_max"] == max(rs)
        assert s["spread_points"] == round(100 * (max(rs) - min(rs)), 2)
        if m == "bare":
            assert "ratio_ci95" not in s  # the reference's ratios are 1 by definition
        else:
            lo, hi = s["ratio_ci95"]
            assert lo <= s["ratio_geomean"] <= hi and s["reps_for_1_point"] >= 2
    assert summaries["ext"]["engine_seen"] == 2


def test_the_interval_of_a_ratio_is_a_t_interval_on_its_logarithms():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import engine_e2e
    finally:
        sys.path.pop(0)
    import math
    import statistics
    rs = [0.9, 1.0, 1.1]
    logs = [math.log(r) for r in rs]
    m, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = 4.303 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom), from a printed table
    got = engine_e2e.ratio_interval(rs)
    assert got["ratio_geomean"] == round(math.exp(m), 4)
    assert got["ratio_ci95"] == [round(math.exp(m - half), 4), round(math.exp(m + half), 4)]
    assert got["reps_for_1_point"] == math.ceil((1.96 * sd / 0.01) ** 2)  # about 385: 10 points apart is noisy
    # more repetitions at the same spread: a narrower interval
    wide, narrow = got["ratio_ci95"], engine_e2e.ratio_interval(rs * 4)["ratio_ci95"]
    assert narrow[0] > wide[0] and narrow[1] < wide[1]
    assert engine_e2e.ratio_interval([0.95]) == {} and engine_e2e.ratio_interval([]) == {}
    # 5 repetitions of the default mode on the H200 (tiny model, 1 client, this session): the interval
    # holds neither 0.99 nor 0.85, and a 1-point answer needs about a hundred repetitions
    h200 = engine_e2e.ratio_interval([0.9383, 0.8857, 0.9873, 0.9219, 0.8654])
    assert 0.85 < h200["ratio_ci95"][0] < h200["ratio_ci95"][1] < 0.99 and 80 < h200["reps_for_1_point"] < 120


def test_a_tool_without_the_engine_costs_the_scrape_timeout_and_a_deadline_ends_the_run(tmp_path):
    """A command whose /signals never shows the engine (here: nothing
    listens on its port) is measured after --scrape-timeout, not the start
    timeout; a command without {port} is not polled, and neither this
    checkout on PYTHONPATH nor the folder the script runs in (the checkout
    here) can shadow its own packages; --deadline starts no repetition
    that cannot end in time, and the summary still comes."""
    seen = tmp_path / "pythonpath.txt"
    plain = "sh -c 'printf \"%%s\\n%%s\" \"${PYTHONPATH-unset}\" \"$PWD\" > %s; ls -A >> %s; exec \"$@\"' sh" % (
        seen, seen)
    r, lines, out = _run(tmp_path, "--modes", "bare,silent,plain", "--run", "silent=env GS_E2E_PORT={port}",
                         "--run", "plain=" + plain, "--clients", "1", "--reps", "3", "--duration", "1.0",
                         "--warmup", "0.3", "--scrape-timeout", "1.5", "--start-timeout", "120",
                         "--deadline", "21", env={"PYTHONPATH": ROOT + os.pathsep + "/elsewhere"})
    assert r.returncode == 0, r.stderr[-3000:]
    points = [x for x in lines if "mode" in x and "summary" not in x]
    # 3 points of 1.3 s at least, and a repetition estimated at 3 x (0.3 + 1.0 + 5) s: the second would end late
    assert [p["mode"] for p in points] == ["bare", "silent", "plain"]
    stopped = [x for x in lines if x.get("stopped")]
    assert len(stopped) == 1 and stopped[0]["rep"] == 1 and "--deadline" in stopped[0]["reason"]
    silent, plain_point = points[1], points[2]
    assert "error" not in silent and silent["tokens"] > 0
    assert silent["engine_seen"] is False and silent["scrape_wait_seconds"] is None
    assert "final_scrape_wait_seconds" not in silent  # no second wait for what never came
    assert silent["signals_polls"] == 0 and silent["signals_failures"] > 0
    assert silent["payload"] is False
    assert "error" not in plain_point and plain_point["tokens"] > 0
    assert "signals_polls" not in plain_point and "scrape_wait_seconds" not in plain_point
    pythonpath, cwd = seen.read_text().split("\n")
    assert pythonpath == "/elsewhere"
    assert os.path.realpath(cwd) != ROOT and os.path.basename(cwd).startswith("gs-e2e-cwd-")  # empty: ls said nothing
    assert not os.path.exists(cwd)  # and removed after the point
    summaries = {s["mode"]: s for s in lines if s.get("summary")}
    assert set(summaries) == {"bare", "silent", "plain"} and summaries["silent"]["reps"] == 1
    assert summaries["silent"]["engine_seen"] == 0


def test_bad_mode_and_missing_inputs_are_one_line(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, "--llama-server", FAKE, "--model", FAKE, "--modes", "bare,nope"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown mode 'nope'" in r.stderr and r.stdout == ""
    r = subprocess.run([sys.executable, SCRIPT, "--llama-server", str(tmp_path / "none"), "--model", FAKE],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "llama-server not found" in r.stderr
    r = subprocess.run([sys.executable, SCRIPT, "--llama-server", FAKE, "--model", FAKE, "--make-model", "x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--make-model-script" in r.stderr
    for bad, said in ((["--run", "ext"], "--run wants NAME=COMMAND"), (["--run", "=x"], "--run wants NAME=COMMAND"),
                      (["--run", "ext=", "--modes", "bare,ext"], "--run ext: the command is empty"),
                      (["--modes", "graph,node"], "needs a bare mode"),
                      (["--modes", "bare,graph,bare"], "named twice")):
        r = subprocess.run([sys.executable, SCRIPT, "--llama-server", FAKE, "--model", FAKE] + bad,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and said in r.stderr and r.stdout == "", (bad, r.stderr)


def test_prepare_only_makes_the_model_only_when_asked(tmp_path):
    maker = tmp_path / "make_tiny_gguf.py"
    maker.write_text("import sys\nopen(sys.argv[2], 'w').write('GGUF from %s %s' % (sys.argv[1], sys.argv[3:]))\n")
    model = tmp_path / "models" / "tiny.gguf"
    base = [sys.executable, SCRIPT, "--llama-server", FAKE, "--model", str(model), "--prepare-only"]
    r = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "model not found" in r.stderr and not model.exists()
    r = subprocess.run(base + ["--make-model", "/src/llama.cpp", "--make-model-script", str(maker),
                               "--make-model-args", "--layers 2 --embd 256"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"llama_server": FAKE, "model": str(model)}
    assert model.read_text() == "GGUF from /src/llama.cpp ['--layers', '2', '--embd', '256']"


def test_engine_shown_by_the_scrape_or_by_the_engines_own_series():
    """The wait for the engine reads this project's scrape metrics, or, for
    a build or tool without them, llama-server's own series."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import llama_harness
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))

    def doc(*metrics):
        return {"metrics": [{"name": n, "stats": {"value": v}} for n, v in metrics]}

    ours = doc(("prometheus_scrape_up", 1), ("prometheus_scrape_timestamp_ns", 500), ("llamacpp:n_decode_total", 3))
    assert llama_harness.engine_shown(ours) == "scrape"
    assert llama_harness.engine_shown(ours, after_ns=499) == "scrape"
    assert llama_harness.engine_shown(ours, after_ns=500) is None
    down = doc(("prometheus_scrape_up", 0), ("prometheus_scrape_timestamp_ns", 500), ("llamacpp:n_decode_total", 3))
    assert llama_harness.engine_shown(down) is None  # an old scrape's series do not count while ours says down
    other = doc(("host_memory_usage_bytes", 1), ("llamacpp:n_decode", 0))
    assert llama_harness.engine_shown(other) == "metrics"
    assert llama_harness.engine_shown(other, after_ns=1) is None  # no time to tell a later scrape by
    assert llama_harness.engine_shown(doc(("host_memory_usage_bytes", 1))) is None
    assert llama_harness.engine_shown({"metrics": None}) is None


def test_payload_facts_count_graph_captures_and_replays():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import llama_harness
    finally:
        sys.path.pop(0)
    doc = {"metrics": [
        {"name": "cuda_graph_captures", "tags": {"graph": "graph_a"}, "stats": {"total": 3}},
        {"name": "cuda_graph_captures", "tags": {"graph": "graph_b"}, "stats": {"total": 2}},
        {"name": "cuda_graphs_nanoseconds", "stats": {"frames": [{"name": "graph_a", "value": 10, "samples": 7}]}},
        {"name": "graphsignal_dropped_records", "stats": {"total": 0}}]}
    facts = llama_harness.payload_facts(doc)
    assert facts["graph_captures"] == 5 and facts["graph_replays"] == 7 and facts["graph_frames"] == 1


def test_the_built_in_modes_are_graphsignal_runs_with_their_options():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import engine_e2e
    finally:
        sys.path.pop(0)
    modes = {m.name: m for m in engine_e2e.parse_modes(["bare", "bare2", "graph", "node", "off"], ())}
    assert modes["bare"].bare and modes["bare2"].bare and not modes["off"].bare
    assert (modes["graph"].options, modes["node"].options, modes["off"].options) == (
        [], ["--cuda-graph-trace", "node"], ["--cuda-trace", "off"])
    # and graphsignal-run takes them
    from graphsignal.cli import run as cli_run
    assert cli_run.parse_args(modes["off"].options + ["x"]).cuda_trace == "off"
