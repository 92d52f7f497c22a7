r"""A real inference engine end to end: llama.cpp's llama-server, bare,
under graphsignal-run in each mode, and behind other profilers' commands,
under a closed-loop load.

For every repetition and every client count, each mode gets a fresh
server (the order of the modes rotates each repetition, so no mode always
runs first on a cold GPU): start it, wait for GET /health to answer 200,
put `clients` concurrent clients on it, each POSTing /completion
{"prompt", "n_predict", "ignore_eos": true} back to back (closed loop),
warm up for --warmup seconds, then measure for --duration seconds, then
stop the server (SIGTERM, then SIGKILL after --stop-timeout). Tokens are
the server's own count (`timings.predicted_n`) of each request, prorated
by how much of the request's time lies inside the measured window (a
request that straddles an edge counts in part), so the figure is not
quantized to whole requests: counting only the requests that completed
inside the window put steps of 1/requests (2.5 % at 40 requests) into
every ratio. Requests in flight at the window's end finish before the
figure is taken. tokens/s divides the tokens by the window.

Where the run serves /signals, the load starts once /signals shows a good
scrape of the engine (prometheus_scrape_up and its timestamp; for a build
or tool without those, llama-server's own `llamacpp:` series; at most
--scrape-timeout seconds: a profiler that never shows one is measured all
the same, with engine_seen false), the
script polls /signals while the load runs (its latency p50/p99, as a
client sees it) and keeps the final payload (GRAPHSIGNAL_SIGNALS_FILE) of
the last repetition of each (mode, clients) as
OUT/signals_<mode>_c<clients>.json, with its dropped-record count, CUDA
graph frames and replays, and errors in the JSON line.

Output (stdout and OUT/engine_e2e.jsonl, each line flushed as it is
written): a config line; one line per point (mode, clients, repetition)
as soon as it is measured; after each repetition of a client count, a
"ratios" line (every mode's tokens/s over that repetition's bare run); at
the end one summary line per (mode, clients): ratio_to_bare, the median
over repetitions of each repetition's ratio, with ratio_min, ratio_max,
spread_points and every ratio (rep_ratios), a 95 % interval
(ratio_ci95, around ratio_geomean, from the spread of the ratios; with
reps_for_1_point, the repetitions a 1-point interval would need at that
spread: on the H200 single ratios spread 8-20 points, so 5 repetitions
cannot tell 0.99 from 0.95), and medians of tokens/s and
latency; and the same statistic of the server's own decode speed
(decode_ratio_to_bare: each request's timings.predicted_n over its
timings.predicted_ms, for the requests that ended in the window: the
decode loop alone, without HTTP, prompts and clients around it). The
ratios are to the mode named `bare` (else the first bare mode); `bare2`,
a second bare run, is the noise floor. --deadline ends a
run in time: no repetition starts that would end after it, and the
summary still comes.

Modes (--modes, in order; --mode NAME=SPEC adds or redefines one). A spec
is a list of words: `bare` (no graphsignal-run), `--option [value]`
(graphsignal-run options) and `NAME=VALUE` (environment variables of the
run):

  bare    bare
  bare2   bare (a second one: the noise between two bare runs)
  graph   (graphsignal-run as it is)
  node    --cuda-graph-trace node
  off     --cuda-trace off (no CUPTI: telemetry, engine, host signals only)

  e.g. --mode activity='GRAPHSIGNAL_CUPTI_COLLECTION=activity' --modes bare,graph,node,activity

--run NAME=COMMAND adds a mode run behind any other command: COMMAND's
words go in front of llama-server's command line, with {port} in any of
them replaced by a free port for that command's /signals (no {port}: the
command serves nothing to poll, and the points have no /signals figures).
It runs in an empty folder of its own (give it absolute paths), with the
script's environment without this checkout on PYTHONPATH (the command
brings its own graphsignal: Python puts the current folder and
PYTHONPATH ahead of the command's own packages, so either would shadow
them), plus GRAPHSIGNAL_LOG_LEVEL=warning (unless set) and
GRAPHSIGNAL_SIGNALS_FILE, which a tool may ignore. An older build of this
project, from a checkout of its commit (native parts built in it):

  --run baseline="env PYTHONPATH=/path/to/base python3 -m graphsignal.cli.run --listen-port {port} --"

another profiler, e.g. the published graphsignal 1.1.2 (the anchor) as a
black box, installed from its wheel into a folder of its own:

  pip install --no-deps --target /tmp/anchor graphsignal-1.1.2-py3-none-any.whl   (its dependencies:
      nvidia-ml-py, prometheus-client, protobuf, psutil, requests, xxhash: the same way where missing)
  --run anchor="env PYTHONPATH=/tmp/anchor /tmp/anchor/bin/graphsignal-run --listen-port {port}"

Where the cost comes from: scripts/build_floor_inject.py builds a CUPTI
injection that does nothing (GS_FLOOR_NOOP=1) or only what graphsignal's
default collection asks of CUPTI, and prints the ablation modes that use
it: `sidecar` (graphsignal-run without CUPTI: its sidecar, GPU telemetry
and engine scrape) and `cupti` (CUPTI's kinds and callbacks without
graphsignal-run).

Inputs are paths, so any llama.cpp and any GGUF model works:

  python scripts/engine_e2e.py --llama-server /path/to/llama-server --model tiny.gguf
  python scripts/engine_e2e.py --llama-src /tmp/eng/llama.cpp --build-dir /tmp/eng/build \
      --model /tmp/eng/tiny.gguf --make-model /tmp/eng/llama.cpp \
      --make-model-script ../shared/engines/make_tiny_gguf.py

--llama-src builds llama-server with cmake (the flags of
shared/engines/README.md; --cpu-only for a CPU build). --make-model SRC
writes --model with --make-model-script (shared/engines/make_tiny_gguf.py
style: `script SRC OUT [args]`; --make-model-args '--layers 16 --embd 2048
--ff 5632' for a model of about a billion parameters) and only when asked.

The H200 run (issue 24: modes bare, bare2, graph, node, baseline, anchor;
1 and 4 clients; 5 repetitions; the tiny model and the larger one). A
point takes about warmup + duration + 1.5 s (the H200: 60 points of
--duration 5 --warmup 1.5 in 471 s, the 1-billion-parameter model about
as fast), so one call of at most 10 minutes holds 6 modes x 5 repetitions
of both client counts at those settings; --deadline keeps each inside
it. Before the GPU session, on this machine, in the checkout (build/ is
git-ignored; carry build/e2e):

  git worktree add --detach /tmp/gs-base BASE_COMMIT && mkdir -p build/e2e && \
      git -C /tmp/gs-base archive --prefix=base/ HEAD | tar x -C build/e2e
  pip download --no-deps graphsignal==1.1.2 -d build/e2e/anchor   (plus the wheels of its missing
      dependencies for the GPU host's Python, e.g. pip download --only-binary=:all: --python-version 3.12
      protobuf xxhash -d build/e2e/anchor)

On the H200, first call (llama-server build about 5 minutes, both models):

  mkdir -p /tmp/eng && tar xzf shared/engines/llama.cpp-src.tgz -C /tmp/eng && \
  python3 scripts/engine_e2e.py --llama-src /tmp/eng/llama.cpp --build-dir /tmp/eng/build \
      --model /tmp/eng/tiny.gguf --make-model /tmp/eng/llama.cpp \
      --make-model-script shared/engines/make_tiny_gguf.py --prepare-only && \
  python3 shared/engines/make_tiny_gguf.py /tmp/eng/llama.cpp /tmp/eng/big.gguf --layers 16 --embd 2048 --ff 5632 && \
  (cd build/e2e/base && python3 graphsignal/_native_build.py && python3 csrc/cupti_build.py graphsignal/lib) && \
  python3 -m pip install -q --no-index --no-deps --target /tmp/anchor build/e2e/anchor/*.whl

then one call per line below, back to back (/tmp lasts while the machine
is warm); E2E stands for

  python3 scripts/engine_e2e.py --llama-server /tmp/eng/build/bin/llama-server --reps 5 --duration 10 \
      --warmup 2 --deadline 560 \
      --run baseline="env PYTHONPATH=$PWD/build/e2e/base python3 -m graphsignal.cli.run --listen-port {port} --" \
      --run anchor="env PYTHONPATH=/tmp/anchor /tmp/anchor/bin/graphsignal-run --listen-port {port}"

  E2E --model /tmp/eng/tiny.gguf --clients 4 --modes bare,graph,baseline,bare2 --out e2e/tiny-c4-a
  E2E --model /tmp/eng/tiny.gguf --clients 1 --modes bare,graph,baseline,bare2 --out e2e/tiny-c1-a
  E2E --model /tmp/eng/tiny.gguf --clients 4 --modes bare,node,anchor --out e2e/tiny-c4-b
  E2E --model /tmp/eng/tiny.gguf --clients 1 --modes bare,node,anchor --out e2e/tiny-c1-b
  E2E --model /tmp/eng/big.gguf --clients 4 --modes bare,graph,baseline,bare2 --out e2e/big-c4-a
  E2E --model /tmp/eng/big.gguf --clients 1 --modes bare,graph,baseline,bare2 --out e2e/big-c1-a
  E2E --model /tmp/eng/big.gguf --clients 4 --modes bare,node,anchor --out e2e/big-c4-b
  E2E --model /tmp/eng/big.gguf --clients 1 --modes bare,node,anchor --out e2e/big-c1-b

and what the sidecar's low priority (GRAPHSIGNAL_SIDECAR_PRIORITY, idle by
default) changes, against the same build at the workload's priority:

  E2E --model /tmp/eng/tiny.gguf --clients 4 --modes bare,graph,graphnormal \
      --mode graphnormal=GRAPHSIGNAL_SIDECAR_PRIORITY=normal --out e2e/tiny-c4-prio

(each summary line's ratio_to_bare is the statistic; a run split in two
shares no bare run, so compare modes within one run). With more time in
one call, all six modes at once: --modes bare,bare2,graph,node,baseline,anchor.
"""
import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the server, its load and what a payload shows: llama_harness.py
from llama_harness import (DEFAULT_PROMPT, Load, Mode, Server, SignalsPoller, build_server, free_port,  # noqa: E402
                           log, make_model, payload_facts, percentile, wait_scraped)

BUILTIN_MODES = {"bare": "bare", "bare2": "bare", "graph": "", "node": "--cuda-graph-trace node",
                 "off": "--cuda-trace off", "light": "--cuda-trace light"}


def median(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


# Student's t, two-sided 95 %, by degrees of freedom (1-30); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def ratio_interval(ratios):
    """What repetitions' ratios say about the true ratio: {ratio_geomean,
    ratio_ci95: [low, high] (a t interval on the ratios' logarithms: a cost
    is a factor), reps_for_1_point: the repetitions at which the interval's
    half-width would come to about 1 point at this spread}; {} for fewer
    than 2 ratios. On a noisy host, the interval says whether a
    difference of a few points was measured at all."""
    logs = [math.log(r) for r in ratios if r is not None and r > 0]
    n = len(logs)
    if n < 2:
        return {}
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return {"ratio_geomean": round(math.exp(mean), 4),
            "ratio_ci95": [round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)],
            "reps_for_1_point": max(2, math.ceil((1.96 * sd / 0.01) ** 2))}


def _named(item, flag):
    if "=" not in item or not item.split("=", 1)[0].strip():
        raise ValueError("%s wants NAME=%s, got %r" % (flag, "SPEC" if flag == "--mode" else "COMMAND", item))
    k, v = item.split("=", 1)
    return k.strip(), v


def parse_modes(names, extra, runs=()):
    """Modes in the order of `names`, from the built-in table, --mode NAME=SPEC
    (extra) and --run NAME=COMMAND (runs); a later definition of a name
    wins."""
    table = {k: ("spec", v) for k, v in BUILTIN_MODES.items()}
    for item in extra or ():
        k, v = _named(item, "--mode")
        table[k] = ("spec", v)
    for item in runs or ():
        k, v = _named(item, "--run")
        table[k] = ("command", v)
    if len(set(names)) != len(names):
        raise ValueError("a mode is named twice in --modes: %s (bare2 is a second bare run)" % ",".join(names))
    modes = []
    for n in names:
        if n not in table:
            raise ValueError("unknown mode %r (known: %s; add one with --mode NAME=SPEC or --run NAME=COMMAND)"
                             % (n, ", ".join(table)))
        how, v = table[n]
        modes.append(Mode(n, command=v) if how == "command" else Mode(n, v))
    if not any(m.bare for m in modes):
        raise ValueError("--modes needs a bare mode: ratios are to bare runs of the same repetition")
    return modes


def reference_mode(modes):
    """The bare mode every ratio is taken to: the one named "bare", else the
    first bare one (bare2 then measures the noise between two bare runs)."""
    return next((m for m in modes if m.name == "bare"), None) or next(m for m in modes if m.bare)


# -- one point ----------------------------------------------------------------------


def run_point(args, mode, clients, rep, out_dir):
    port = args.port or free_port()
    listen = args.listen_port or free_port()
    fd, signals_file = tempfile.mkstemp(prefix="gs-e2e-", suffix=".json")
    os.close(fd)
    os.unlink(signals_file)
    log_path = os.path.join(out_dir, "server_%s_c%d_r%d.log" % (mode.name, clients, rep))
    line = {"mode": mode.name, "clients": clients, "rep": rep}
    t_point = time.monotonic()
    # A --run command starts in an empty folder: Python puts the current folder first on
    # sys.path for -m and -c, so a graphsignal package there (this checkout, when the script
    # runs from it) would be imported instead of the command's own.
    cwd = tempfile.mkdtemp(prefix="gs-e2e-cwd-") if mode.external else None
    try:
        server = Server(args.llama_server, args.model, port, mode=mode, listen_port=listen, ngl=args.ngl,
                        ctx=args.ctx, parallel=max(args.parallel, clients), server_args=args.server_arg,
                        gs_run=shlex.split(args.graphsignal_run) if args.graphsignal_run else None,
                        signals_file=signals_file, log_path=log_path, cwd=cwd)
        return _measure(args, server, line, clients, signals_file, out_dir, t_point)
    finally:
        if cwd:
            shutil.rmtree(cwd, ignore_errors=True)


def _measure(args, server, line, clients, signals_file, out_dir, t_point):
    mode, port = server.mode, server.port
    load = poller = None
    try:
        t_start = time.monotonic()
        server.wait_healthy(args.start_timeout)
        line["start_seconds"] = round(time.monotonic() - t_start, 3)
        if server.signals_url:
            # the payload should hold the engine's metrics over the whole measurement; a
            # profiler that never shows the engine's scrape costs --scrape-timeout, then is
            # measured all the same
            line["scrape_wait_seconds"], how = wait_scraped(server.signals_url, args.scrape_timeout)
            line["engine_seen"] = how is not None
            if how:
                line["engine_seen_by"] = how
        load = Load(port, clients, args.prompt, args.n_predict).start()
        time.sleep(args.warmup)
        if server.signals_url and args.signals_interval > 0:
            poller = SignalsPoller(server.signals_url, args.signals_interval).start()
        t0 = time.monotonic()
        time.sleep(args.duration)
        t1 = time.monotonic()
        if poller is not None:
            poller.stop()
        load.stop(timeout=args.n_predict * 0.5 + 30)  # the requests in flight at t1 finish: their share counts
        tokens, lat = load.window(t0, t1)
        tokens = round(tokens, 1)
        line.update(tokens=tokens, requests=len(lat), seconds=round(t1 - t0, 3),
                    tokens_per_second=round(tokens / (t1 - t0), 2),
                    decode_tokens_per_second=load.decode_rate(t0, t1),
                    latency_p50_s=_r(percentile(lat, 50), 6), latency_p90_s=_r(percentile(lat, 90), 6),
                    load_errors=len(load.errors))
        if load.errors:
            line["load_error"] = load.errors[-1]
        if poller is not None:
            ms = [x * 1e3 for x in poller.latencies]
            line.update(signals_polls=len(ms), signals_p50_ms=_r(percentile(ms, 50)),
                        signals_p99_ms=_r(percentile(ms, 99)), signals_max_ms=_r(max(ms) if ms else None),
                        signals_failures=poller.failures)
            poller = None
    except RuntimeError as e:
        line["error"] = str(e)
    finally:
        if poller is not None:
            poller.stop()
        if load is not None:
            load.stop(timeout=args.n_predict * 0.5 + 30)
            last = args.final_scrape == "every" or line["rep"] == args.reps - 1
            if server.signals_url and "error" not in line and line.get("engine_seen_by") == "scrape" and last:
                # one scrape after the load, so the kept payload's engine counters cover all of it
                line["final_scrape_wait_seconds"] = wait_scraped(server.signals_url, min(15.0, args.scrape_timeout),
                                                                 time.time_ns())[0]
        line["exit_status"] = server.stop(args.stop_timeout)
    line["point_seconds"] = round(time.monotonic() - t_point, 3)
    if not mode.bare:
        doc = None
        if os.path.exists(signals_file):
            try:
                with open(signals_file, "rb") as f:
                    doc = json.load(f)
            except ValueError:
                doc = None
            kept = os.path.join(out_dir, "signals_%s_c%d.json" % (mode.name, clients))
            os.replace(signals_file, kept)
            line["signals_file"] = kept
        line.update(payload_facts(doc))
    return line


def _r(v, nd=3):
    return None if v is None else round(v, nd)


# -- main ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--llama-server", help="a built llama-server binary")
    src.add_argument("--llama-src", help="a llama.cpp source tree to build llama-server from (cmake)")
    p.add_argument("--build-dir", help="cmake build folder for --llama-src (default: SRC/build)")
    p.add_argument("--cpu-only", action="store_true", help="build without CUDA (-DGGML_CUDA=OFF)")
    p.add_argument("--cuda-arch", default="90", help="CMAKE_CUDA_ARCHITECTURES for the build (default: 90)")
    p.add_argument("--jobs", type=int, help="build jobs (default: CPU count)")
    p.add_argument("--model", required=True, help="the GGUF model (written by --make-model when given)")
    p.add_argument("--make-model", metavar="SRC", help="write --model first: --make-model-script SRC MODEL ARGS")
    p.add_argument("--make-model-script", help="make_tiny_gguf.py (shared/engines/ in this project)")
    p.add_argument("--make-model-args", default="", help="extra arguments for the script, e.g. '--layers 2'")
    p.add_argument("--modes", default="bare,graph,node", help="modes in order (default: %(default)s)")
    p.add_argument("--mode", action="append", metavar="NAME=SPEC", help="add or redefine a mode (see above)")
    p.add_argument("--run", action="append", metavar="NAME=COMMAND",
                   help="a mode run behind another command, e.g. an older build or another profiler; {port} in "
                        "it becomes the port its /signals listens on (see above; repeat)")
    p.add_argument("--clients", default="1,4", help="concurrent clients per point (default: %(default)s)")
    p.add_argument("--reps", type=int, default=5, help="repetitions (default: %(default)s)")
    p.add_argument("--duration", type=float, default=12.0, help="measured seconds per point (default: 12)")
    p.add_argument("--warmup", type=float, default=3.0, help="load seconds before measuring (default: 3)")
    p.add_argument("--n-predict", type=int, default=128, help="tokens per request (default: 128)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--ngl", type=int, default=99, help="llama-server -ngl (default: 99; 0 on a CPU)")
    p.add_argument("--ctx", type=int, default=8192, help="llama-server -c (default: 8192)")
    p.add_argument("--parallel", type=int, default=4, help="llama-server -np, at least --clients (default: 4)")
    p.add_argument("--server-arg", action="append", default=[], help="one more llama-server argument (repeat)")
    p.add_argument("--graphsignal-run", help="the graphsignal-run command (default: this checkout's, "
                                             "python -m graphsignal.cli.run)")
    p.add_argument("--port", type=int, help="llama-server port (default: a free one per point)")
    p.add_argument("--listen-port", type=int, help="/signals port (default: a free one per point)")
    p.add_argument("--signals-interval", type=float, default=0.5,
                   help="seconds between /signals polls under load; 0: no polling (default: 0.5)")
    p.add_argument("--start-timeout", type=float, default=300.0,
                   help="seconds for llama-server to answer /health with 200 (default: 300)")
    p.add_argument("--scrape-timeout", type=float, default=20.0,
                   help="seconds for /signals to show a good scrape of the engine before the load starts anyway "
                        "(default: 20)")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds for the whole run: no repetition starts that would end after it, and the summary "
                        "comes out in time (default: 0, none)")
    p.add_argument("--final-scrape", choices=("every", "last"), default="every",
                   help="wait for one scrape after the load (so the kept payload's engine counters cover it) in "
                        "every repetition, or only in the last (its payload is the one kept; about 0.8 s saved a "
                        "point; a run the deadline cuts keeps a payload without it) (default: every)")
    p.add_argument("--stop-timeout", type=float, default=20.0)
    p.add_argument("--out", default="engine-e2e", help="output folder (default: ./engine-e2e)")
    p.add_argument("--prepare-only", action="store_true",
                   help="build llama-server / write the model as asked, print their paths as JSON, and exit")
    a = p.parse_args(argv)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    a.clients = [int(c) for c in a.clients.split(",") if c.strip()]
    if a.make_model and not a.make_model_script:
        p.error("--make-model needs --make-model-script (the path of make_tiny_gguf.py)")
    if a.reps < 1 or a.duration <= 0 or not a.clients or min(a.clients) < 1:
        p.error("--reps, --duration and --clients must be positive")
    if a.scrape_timeout <= 0 or a.deadline < 0:
        p.error("--scrape-timeout must be positive and --deadline not negative")
    return a


def group_ratios(group, modes, key="tokens_per_second"):
    """{mode: tokens/s over the reference bare mode's} of one repetition and
    client count (group: {mode name: point}); None where either has no
    tokens/s. key: which tokens/s (decode_tokens_per_second: the
    server's own decode speed)."""
    ref = group.get(reference_mode(modes).name) or {}
    base = ref.get(key)
    out = {}
    for m in modes:
        tps = (group.get(m.name) or {}).get(key)
        out[m.name] = round(tps / base, 4) if base and tps is not None and "error" not in group[m.name] \
            and "error" not in ref else None
    return out


def summarize(lines, ratios, modes, clients_list, decode_ratios=()):
    """One line per (mode, clients): medians over the repetitions, and the
    statistic: the median of each repetition's ratio to that repetition's
    bare run, with its spread (min, max) and every ratio (ratios: [(rep,
    clients, {mode: ratio})]); the same of the server's own decode speed
    (decode_ratios, same shape) as decode_ratio_to_bare."""
    out = []
    ref = reference_mode(modes).name
    for clients in clients_list:
        for mode in modes:
            pts = [x for x in lines if x["mode"] == mode.name and x["clients"] == clients and "error" not in x]
            if not pts:
                continue
            rs = [r[mode.name] for _, c, r in ratios if c == clients and r.get(mode.name) is not None]
            s = {"summary": True, "mode": mode.name, "clients": clients, "reps": len(pts), "ratio_reps": len(rs),
                 "ratio_to": ref, "ratio_to_bare": median(rs), "ratio_min": min(rs) if rs else None,
                 "ratio_max": max(rs) if rs else None, "rep_ratios": rs,
                 "tokens_per_second": median([x.get("tokens_per_second") for x in pts]),
                 "latency_p50_s": median([x.get("latency_p50_s") for x in pts]),
                 "latency_p90_s": median([x.get("latency_p90_s") for x in pts])}
            if rs:
                s["spread_points"] = round(100.0 * (max(rs) - min(rs)), 2)
                if mode.name != ref:  # the reference's ratios are 1 by definition
                    s.update(ratio_interval(rs))
            ds = [r[mode.name] for _, c, r in decode_ratios if c == clients and r.get(mode.name) is not None]
            if ds:
                s.update(decode_ratio_to_bare=median(ds), decode_rep_ratios=ds,
                         decode_tokens_per_second=median([x.get("decode_tokens_per_second") for x in pts]))
            if not mode.bare:
                s.update(signals_p50_ms=median([x.get("signals_p50_ms") for x in pts]),
                         signals_p99_ms=max((x.get("signals_p99_ms") or 0) for x in pts),
                         dropped_records=sum(x.get("dropped_records") or 0 for x in pts),
                         graph_frames=median([x.get("graph_frames") for x in pts]),
                         engine_seen=sum(1 for x in pts if x.get("engine_seen")))
            if s["ratio_to_bare"] is not None:
                s["overhead_percent"] = round(100.0 * (1.0 - s["ratio_to_bare"]), 2)
            out.append(s)
    return out


def main(argv=None):
    args = parse_args(argv)
    try:
        modes = parse_modes(args.modes, args.mode, args.run)
    except ValueError as e:
        raise SystemExit("engine_e2e: %s" % e)
    if args.llama_src:
        args.llama_server = build_server(args.llama_src, args.build_dir or os.path.join(args.llama_src, "build"),
                                         args.cpu_only, args.cuda_arch, args.jobs)
    if args.make_model:
        make_model(args.make_model_script, args.make_model, args.model, args.make_model_args)
    for path, what in ((args.llama_server, "llama-server"), (args.model, "model")):
        if not os.path.exists(path):
            raise SystemExit("engine_e2e: %s not found: %s" % (what, path))
    if args.prepare_only:
        print(json.dumps({"llama_server": os.path.abspath(args.llama_server), "model": os.path.abspath(args.model)}))
        return 0
    os.makedirs(args.out, exist_ok=True)
    jsonl = open(os.path.join(args.out, "engine_e2e.jsonl"), "w")

    def emit(d):
        s = json.dumps(d)
        sys.stdout.write(s + "\n")
        sys.stdout.flush()
        jsonl.write(s + "\n")
        jsonl.flush()

    t_start = time.monotonic()
    emit({"config": True, "llama_server": os.path.abspath(args.llama_server), "model": os.path.abspath(args.model),
          "modes": [m.describe() for m in modes], "clients": args.clients, "reps": args.reps,
          "duration_s": args.duration, "warmup_s": args.warmup, "n_predict": args.n_predict, "ngl": args.ngl,
          "ctx": args.ctx, "parallel": args.parallel, "server_args": args.server_arg,
          "scrape_timeout_s": args.scrape_timeout, "deadline_s": args.deadline})
    lines, ratios, decode_ratios, longest = [], [], [], 0.0
    stopped = None
    for rep in range(args.reps):
        for clients in args.clients:
            k = rep % len(modes)
            order = modes[k:] + modes[:k]  # rotate: no mode always runs first
            # a whole group or none: a ratio needs its repetition's bare run
            need = len(order) * max(longest, args.warmup + args.duration + 5.0)
            if args.deadline and time.monotonic() - t_start + need > args.deadline:
                stopped = {"stopped": True, "rep": rep, "clients": clients,
                           "reason": "--deadline %g s: %.0f s spent, a repetition takes about %.0f s"
                                     % (args.deadline, time.monotonic() - t_start, need)}
                break
            group = {}
            for mode in order:
                log("rep %d, %d client(s), %s" % (rep, clients, mode.name))
                line = group[mode.name] = run_point(args, mode, clients, rep, args.out)
                longest = max(longest, line.get("point_seconds") or 0.0)
                emit(line)  # at once: a run cut short keeps every point it measured
                lines.append(line)
            r = group_ratios(group, modes)
            ratios.append((rep, clients, r))
            rd = group_ratios(group, modes, "decode_tokens_per_second")
            decode_ratios.append((rep, clients, rd))
            emit({"ratios": True, "rep": rep, "clients": clients, "ratio_to": reference_mode(modes).name,
                  "ratio_to_bare": r, "decode_ratio_to_bare": rd})
        if stopped:
            break
    if stopped:
        log(stopped["reason"])
        emit(stopped)
    for s in summarize(lines, ratios, modes, args.clients, decode_ratios):
        emit(s)
    jsonl.close()
    return 1 if any("error" in x for x in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
