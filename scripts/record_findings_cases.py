#!/usr/bin/env python3
r"""Records the llama-server payloads the findings are tested on: one
payload per case, each a real llama-server under graphsignal-run with one
cause planted (or none: the control), read under load as an agent reads
it (GET /signals?window=W&history=H after a warm-up), written to
OUT/<case>.signals.json (default tests/data/llamacpp_cases), with one JSON
line per case on stdout and in OUT/cases.jsonl (tokens/s, failed requests,
the findings the payload got).

  healthy        -np 4 -c 8192, 4 clients: the control (no finding)
  one_slot       -np 1, 4 clients: requests queue behind one slot
  graphs_off     GGML_CUDA_DISABLE_GRAPHS=1: the decode step runs kernel by kernel
  cpu_layers     -ngl 3: most layers left on the CPU
  tiny_ubatch    -b 8 -ub 8, long uncached prompts: prompts in tiny micro-batches
  fa_off         -fa off, uncached prompts: attention without flash attention
  small_context  -c 512 -np 4 --no-kv-unified, ~160-token prompts, 64 tokens asked:
                 each slot holds too little, so requests are refused or (llama.cpp
                 without context shift, its default) cut short, "truncated = 1" in
                 its console. With a unified KV cache (the default) -c 512 over four
                 slots does not bite: the script counts the requests that failed or
                 got fewer tokens than asked, and says so when none did.

Usage (on a GPU host; the llama.cpp tree and model as in scripts/engine_e2e.py):

  python3 scripts/record_findings_cases.py --llama-server /path/llama-server --model /path/tiny.gguf
  python3 scripts/record_findings_cases.py --llama-src /path/llama.cpp --model /tmp/tiny.gguf \
      --make-model /path/llama.cpp --make-model-script /path/make_tiny_gguf.py   # builds it, writes the model

tests/unit/test_findings_cases.py reads the files (and skips while they are absent).
"""
import argparse
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_harness  # noqa: E402  (the server, load, build and model helpers engine_e2e.py uses)
from benchutil import require_gpu  # noqa: E402

ROOT = os.path.dirname(HERE)
LONG_PROMPT = " ".join("Paragraph %d: the lighthouse keeper counted the ships that passed in the fog." % i
                       for i in range(30))  # ~600 tokens
CONTEXT_PROMPT = " ".join("word%d" % i for i in range(80))  # ~160 tokens
UNCACHED = {"cache_prompt": False}

# case -> (server args, environment, clients, prompt, n_predict, request extras)
CASES = {
    "healthy": ([], {}, 4, llama_harness.DEFAULT_PROMPT, 128, None),
    "one_slot": (["-np", "1"], {}, 4, llama_harness.DEFAULT_PROMPT, 128, None),
    "graphs_off": ([], {"GGML_CUDA_DISABLE_GRAPHS": "1"}, 4, llama_harness.DEFAULT_PROMPT, 128, None),
    "cpu_layers": (["-ngl", "3"], {}, 4, llama_harness.DEFAULT_PROMPT, 64, None),
    "tiny_ubatch": (["-b", "8", "-ub", "8"], {}, 4, LONG_PROMPT, 16, UNCACHED),
    "fa_off": (["-fa", "off"], {}, 4, LONG_PROMPT, 64, UNCACHED),
    "small_context": (["-c", "512", "--no-kv-unified"], {}, 4, CONTEXT_PROMPT, 64, UNCACHED),
}


def record(args, case, out_dir):
    server_args, env, clients, prompt, n_predict, extra = CASES[case]
    port, listen = llama_harness.free_port(), llama_harness.free_port()
    ctx = 512 if "-c" in server_args else 8192
    server_args = [a for i, a in enumerate(server_args)
                   if a != "-c" and (i == 0 or server_args[i - 1] != "-c")]
    ngl = 99
    if "-ngl" in server_args:
        i = server_args.index("-ngl")
        ngl, server_args = int(server_args[i + 1]), server_args[:i] + server_args[i + 2:]
    parallel = 4
    if "-np" in server_args:
        i = server_args.index("-np")
        parallel, server_args = int(server_args[i + 1]), server_args[:i] + server_args[i + 2:]
    mode = llama_harness.Mode("graph", "")
    server = llama_harness.Server(args.server_bin, args.model, port, mode=mode, listen_port=listen, ngl=ngl, ctx=ctx,
                               parallel=parallel, server_args=server_args, env=dict(os.environ, **env),
                               log_path=os.path.join(out_dir, case + ".log"))
    line = {"case": case, "server_args": server_args, "ngl": ngl, "ctx": ctx, "np": parallel, "env": env,
            "clients": clients}
    try:
        server.wait_healthy()
        line["scraped_after_s"], _ = llama_harness.wait_scraped(server.signals_url, timeout=args.scrape_timeout)
        load = llama_harness.Load(port, clients, prompt=prompt, n_predict=n_predict, extra=extra).start()
        time.sleep(args.warmup + args.window)
        url = "%s?window=%d&history=%d" % (server.signals_url, args.window, args.window + args.warmup)
        with urllib.request.urlopen(url, timeout=30) as r:
            data = r.read()
        load.stop(timeout=60)
        doc = json.loads(data)
        path = os.path.join(out_dir, case + ".signals.json")
        with open(path, "wb") as f:
            f.write(data)
        short = sum(1 for _, n, _, _ in load.done if n < n_predict)
        line.update(path=os.path.relpath(path, ROOT), requests=len(load.done), failed=len(load.errors),
                    first_failure=load.errors[0] if load.errors else None, short=short,
                    tokens=sum(n for _, n, _, _ in load.done),
                    findings=[f["id"] for f in doc.get("findings") or []])
        if case == "small_context" and not load.errors and not short:
            line["warning"] = "no request failed or was cut short: the context did not bite (is the KV cache unified?)"
    finally:
        line["exit_status"] = server.stop()
    return line


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--llama-server", help="a built llama-server binary")
    src.add_argument("--llama-src", help="a llama.cpp source tree to build llama-server from (cmake)")
    p.add_argument("--build-dir", help="cmake build folder for --llama-src (default: SRC/build)")
    p.add_argument("--cuda-arch", default="90", help="CMAKE_CUDA_ARCHITECTURES (default: 90)")
    p.add_argument("--model", required=True, help="the GGUF model (written by --make-model when given)")
    p.add_argument("--make-model", metavar="SRC", help="write --model with make_tiny_gguf.py from this llama.cpp tree")
    p.add_argument("--make-model-script", help="the script that writes a GGUF model (SRC MODEL), with --make-model")
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "llamacpp_cases"))
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated (default: all)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the window")
    p.add_argument("--window", type=int, default=10, help="the ?window=N read (seconds)")
    p.add_argument("--scrape-timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    require_gpu(__file__)  # the cases are GPU causes (graphs off, layers left on the CPU)
    if args.llama_src:
        args.server_bin = llama_harness.build_server(args.llama_src, args.build_dir or os.path.join(args.llama_src,
                                                                                                "build"),
                                                  cuda_arch=args.cuda_arch)
    else:
        args.server_bin = args.llama_server
    if args.make_model:
        if not args.make_model_script:
            p.error("--make-model needs --make-model-script (e.g. make_tiny_gguf.py)")
        llama_harness.make_model(args.make_model_script, args.make_model, args.model, "")
    os.makedirs(args.out, exist_ok=True)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error("unknown case(s) %s (known: %s)" % (", ".join(unknown), ", ".join(CASES)))
    with open(os.path.join(args.out, "cases.jsonl"), "a") as log:
        for case in cases:
            line = record(args, case, args.out)
            text = json.dumps(line)
            print(text, flush=True)
            log.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
