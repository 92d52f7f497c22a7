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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "engine_e2e.py")
FAKE = os.path.join(ROOT, "tests", "support", "fakes", "fake_llama_server.py")


def test_engine_e2e_runs_each_mode_and_summarizes(tmp_path):
    server = tmp_path / "llama-server"  # the name graphsignal-run's launcher recognizes
    server.symlink_to(FAKE)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")  # the stand-in does not read it
    out = tmp_path / "out"
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error", FAKE_LLAMA_TOKEN_MS="0.5")
    r = subprocess.run([sys.executable, SCRIPT, "--llama-server", str(server), "--model", str(model),
                        "--modes", "bare,graph,probe", "--mode", "probe=--cuda-graph-trace node GRAPHSIGNAL_X=1",
                        "--clients", "2", "--reps", "1", "--duration", "1.5", "--warmup", "0.3",
                        "--n-predict", "16", "--signals-interval", "0.1", "--out", str(out)],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines == [json.loads(x) for x in (out / "engine_e2e.jsonl").read_text().splitlines()]
    config, points, summaries = lines[0], lines[1:4], lines[4:]
    assert config["config"] and [m["name"] for m in config["modes"]] == ["bare", "graph", "probe"]
    assert config["modes"][2] == {"name": "probe", "bare": False, "options": ["--cuda-graph-trace", "node"],
                                  "env": {"GRAPHSIGNAL_X": "1"}}
    assert [p["mode"] for p in points] == ["bare", "graph", "probe"]
    for p in points:
        assert "error" not in p, p
        assert p["clients"] == 2 and p["rep"] == 0 and p["exit_status"] == 0
        # 16 tokens a request: the tokens are the server's own count of whole requests
        assert p["requests"] > 0 and p["tokens"] == 16 * p["requests"] and p["load_errors"] == 0
        assert p["tokens_per_second"] > 0 and 0 < p["latency_p50_s"] <= p["latency_p90_s"]
    assert points[0]["ratio_to_bare"] == 1.0
    assert points[1]["ratio_to_bare"] == round(points[1]["tokens_per_second"] / points[0]["tokens_per_second"], 4)
    assert "signals_p99_ms" not in points[0]  # bare: nothing to poll
    for p in points[1:]:
        assert p["signals_polls"] > 3 and p["signals_failures"] == 0
        assert 0 < p["signals_p50_ms"] <= p["signals_p99_ms"]
        assert p["payload"] and p["dropped_records"] == 0 and p["errors"] == []
        # the load starts once the engine is scraped, and the server stops after one more scrape
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
    assert summaries[1]["dropped_records"] == 0 and "overhead_percent" in summaries[1]
    assert (out / "server_graph_c2_r0.log").exists()


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
