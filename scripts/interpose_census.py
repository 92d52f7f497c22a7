"""The CUDA interposer's coverage, measured against CUPTI on a real GPU.

Each workload runs under graphsignal-run's default (CUPTI) collection with
the interposer preloaded beside it (libgraphsignal_interpose.so,
GRAPHSIGNAL_INTERPOSE_REPORT): one process, both collections, so every difference
is one of coverage. Then once more with --cuda-trace light (the
interposer alone, no CUPTI in the process, as graphsignal-run preloads
it): its payload's series against its own report, and its sampled graph
time against CUPTI's graph records of the census run (the event pairs'
bias, raw and with the host's share taken out).
One JSON line per workload and collection: kernel launches per symbol,
graph replays per graph name, synchronizations by kind, copies (and per
kind and host memory: pinned, pageable, managed) and memsets, as CUPTI's
payload has them and as the interposer counted them;
which cuGetProcAddress answers it bound and how; and, per family, whether
the counts agree.

  python scripts/interpose_census.py --out census [--workloads exact,exact_graph,torch_mix,torch_compile]
      [--llama-server PATH --model GGUF]
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from benchutil import emit, free_port, require_gpu  # noqa: E402

WL = os.path.join(ROOT, "scripts", "workloads")
LIB = os.path.join(ROOT, "graphsignal", "lib", "libgraphsignal_interpose.so")

WORKLOADS = {
    "exact": [sys.executable, os.path.join(WL, "exact.py"), "--eager", "20000", "--copies", "200", "--copy-bytes",
              "65536", "--pageable-bytes", "1048576", "--memsets", "300", "--syncs", "200"],
    "exact_graph": [sys.executable, os.path.join(WL, "exact.py"), "--graph-nodes", "64", "--replays", "3000"],
    "torch_mix": [sys.executable, os.path.join(WL, "torch_mix.py"), "--eager", "300", "--replays", "2000"],
    "torch_compile": [sys.executable, os.path.join(WL, "torch_mix.py"), "--eager", "50", "--replays", "0",
                      "--compiled", "300"],
}


def frames(payload, name, field="samples"):
    """name -> samples (or value) summed over the series of that metric (every device, process and tag set)."""
    out = {}
    for m in payload.get("metrics", []):
        if m.get("name") != name or m.get("type") != "profile":
            continue
        for f in (m.get("stats") or {}).get("frames") or []:
            out[f["name"]] = out.get(f["name"], 0) + (f.get(field) or 0)
    return out


def counters(payload, prefix):
    out = {}
    for m in payload.get("metrics", []):
        if m.get("name", "").startswith(prefix) and m.get("type") == "counter":
            key = m["name"] + json.dumps({k: v for k, v in (m.get("tags") or {}).items()
                                          if not k.startswith(("process.", "device."))}, sort_keys=True)
            out[key] = out.get(key, 0) + ((m.get("stats") or {}).get("total") or 0)
    return out


COPY_KINDS = {"0": "unknown", "1": "host_to_device", "2": "device_to_host", "8": "device_to_device",
              "9": "host_to_host", "10": "peer_to_peer"}  # the report's copy kinds (CUpti_ActivityMemcpyKind)


def host_memory_split(payload, profile):
    """{"<copy kind> <host_memory>": calls} of a payload's copy profile ("-": a series without host_memory)."""
    out = {}
    for m in payload.get("metrics", []):
        if m.get("name") != profile or m.get("type") != "profile":
            continue
        hm = (m.get("tags") or {}).get("host_memory") or "-"
        for f in (m.get("stats") or {}).get("frames") or []:
            key = "%s %s" % (f.get("name"), hm)
            out[key] = out.get(key, 0) + (f.get("samples") or 0)
    return out


def merged_reports(prefix):
    """The interposer's reports of every process of the run, summed."""
    tot = {"kernels": {}, "graphs": {}, "syncs": {}, "copies": {}, "memsets": [0, 0], "captured": 0,
           "graph_captures": 0, "graphs_unnamed": 0, "bound_by_export": 0, "bound_by_rule": 0, "unbound": 0,
           "slots_full": 0, "pids": 0, "rows": {}, "lookups_not_by_export": [], "sampled": {},
           "samples": {"taken": 0, "skipped": 0, "failed": 0}, "copies_host_memory": {},
           "hostmem": {"ranges": 0, "unrecorded": 0, "unsure": 0, "overflows": 0, "gave_up": 0}}
    for path in glob.glob(prefix + ".*.json"):
        with open(path) as f:
            r = json.load(f)
        tot["pids"] += 1
        for fam in ("kernels", "graphs"):
            for e in r[fam]:
                tot[fam][e["name"]] = tot[fam].get(e["name"], 0) + e["count"]
        for e in r["graphs"]:
            a = tot["sampled"].setdefault(e["name"], [0, 0, 0, 0])
            a[0] += e.get("sampled_n", 0)
            a[1] += e.get("sampled_ns", 0)
            a[2] += e.get("sampled_raw_ns", 0)
            a[3] += e.get("sampled_idle", 0)
        for k in tot["samples"]:
            tot["samples"][k] += r.get("samples", {}).get(k, 0)
        for k, (n, ns) in r["syncs"].items():
            a = tot["syncs"].setdefault(k, [0, 0])
            a[0] += n
            a[1] += ns
        for k, (n, b) in r["copies"].items():
            a = tot["copies"].setdefault(k, [0, 0])
            a[0] += n
            a[1] += b
        for k, by_mem in r.get("copies_host_memory", {}).items():  # as host_memory_split names them
            for mem, (n, _) in by_mem.items():
                key = "%s %s" % (COPY_KINDS.get(k, "kind_" + k), "-" if mem in ("none", "unknown") else mem)
                tot["copies_host_memory"][key] = tot["copies_host_memory"].get(key, 0) + n
        for k in tot["hostmem"]:
            tot["hostmem"][k] = tot["hostmem"][k] | r.get("hostmem", {}).get(k, 0) if k == "unsure" else \
                tot["hostmem"][k] + r.get("hostmem", {}).get(k, 0)
        tot["memsets"][0] += r["memsets"][0]
        tot["memsets"][1] += r["memsets"][1]
        for k in ("captured", "graph_captures", "graphs_unnamed", "bound_by_export", "bound_by_rule", "unbound",
                  "slots_full"):
            tot[k] += r[k]
        for row in r["rows"]:
            if row["calls"]:
                tot["rows"][row["name"]] = tot["rows"].get(row["name"], 0) + row["calls"]
        tot["lookups_not_by_export"] += [x for x in r["lookups"] if x["how"] != 0][:50]
    return tot


def diff(cupti, ours):
    """Agreement of two name -> count maps."""
    names = set(cupti) | set(ours)
    bad = sorted(((n, cupti.get(n, 0), ours.get(n, 0)) for n in names if cupti.get(n, 0) != ours.get(n, 0)),
                 key=lambda x: -abs(x[1] - x[2]))
    return {"names_cupti": len(cupti), "names_ours": len(ours), "total_cupti": sum(cupti.values()),
            "total_ours": sum(ours.values()), "equal": not bad, "differences": len(bad),
            "worst": [{"name": n[:120], "cupti": a, "ours": b} for n, a, b in bad[:12]]}


CUPTI_TIMES = {}  # workload -> (replays, ns) per graph name, from its census run


def run_workload(name, cmd, out, lib, mode, timeout, server=None):
    emit(**measure(name, cmd, out, lib, mode, timeout, server))


def measure(name, cmd, out, lib, mode, timeout, server=None):
    """One run of a workload in `mode` (census: CUPTI and the interposer;
    light: --cuda-trace light, the interposer alone), as the dict
    run_workload prints."""
    d = os.path.join(out, "%s-%s" % (name, mode))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    payload = os.path.join(d, "payload.json")
    prefix = os.path.join(d, "interpose")
    env = dict(os.environ, GRAPHSIGNAL_INTERPOSE_REPORT=prefix, GRAPHSIGNAL_LOG_LEVEL="warning",
               GRAPHSIGNAL_CUDA_SAMPLE=str(SAMPLE), GRAPHSIGNAL_CUDA_SAMPLE_RATE="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(free_port()), "--output", payload]
    if mode == "light":
        argv += ["--cuda-trace", "light"]  # graphsignal-run preloads the package's interposer
    else:
        env["LD_PRELOAD"] = lib
    t0 = time.time()
    if server:
        p = subprocess.Popen(argv + ["--"] + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        logs = []
        threading.Thread(target=lambda: logs.extend(p.stdout), daemon=True).start()
        did = server(p)
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        stdout = "".join(logs)
    else:
        p = subprocess.run(argv + ["--"] + cmd, env=env, capture_output=True, text=True, timeout=timeout)
        stdout = p.stdout + p.stderr
        did = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    line = {"bench": "interpose_census", "workload": name, "mode": mode, "rc": p.returncode,
            "seconds": round(time.time() - t0, 1), "did": did}
    if p.returncode not in (0, -2, 130) or not os.path.exists(payload):
        line["tail"] = stdout[-3000:]
        return line
    with open(payload) as f:
        pl = json.load(f)
    r = merged_reports(prefix)
    syncs_cupti = frames(pl, "cuda_sync_nanoseconds")
    if mode == "census":
        CUPTI_TIMES[name] = (frames(pl, "cuda_graphs_nanoseconds"), frames(pl, "cuda_graphs_nanoseconds", "value"))
    line.update(
        kernels=diff(frames(pl, "cuda_kernels_nanoseconds"), r["kernels"]) if mode == "census" else
        diff(frames(pl, "cuda_kernel_launches"), r["kernels"]),  # light: its payload against its own report
        graphs=diff(frames(pl, "cuda_graphs_nanoseconds"), r["graphs"]),
        syncs_cupti=syncs_cupti, syncs_ours=r["syncs"],
        copies_cupti=frames(pl, "cuda_memcpy_nanoseconds" if mode == "census" else "cuda_memcpy_calls"),
        copy_bytes_cupti=counters(pl, "cuda_memcpy_bytes"),
        copies_ours=r["copies"],
        # copies per kind and host memory: CUPTI's (census) or light's payload (light) against the interposer's
        copies_host_memory=diff(host_memory_split(pl, "cuda_memcpy_nanoseconds" if mode == "census" else
                                                  "cuda_memcpy_calls"), r["copies_host_memory"]),
        hostmem=r["hostmem"], memsets_cupti=frames(pl, "cuda_memset_nanoseconds" if mode == "census" else
                                                      "cuda_memset_calls"), memsets_ours=r["memsets"],
        captured=r["captured"], graph_captures=r["graph_captures"], graphs_unnamed=r["graphs_unnamed"],
        bound_by_export=r["bound_by_export"], bound_by_rule=r["bound_by_rule"], unbound=r["unbound"],
        slots_full=r["slots_full"], pids=r["pids"], rows=r["rows"],
        lookups_not_by_export=r["lookups_not_by_export"][:30], samples=r["samples"],
        graph_time=graph_time(*(CUPTI_TIMES.get(name) or ({}, {})), r["sampled"]),
        payload_graph_ns=frames(pl, "cuda_graphs_nanoseconds", "value") if mode == "light" else None,
        errors=[e.get("message", "")[:200] for e in pl.get("errors", [])][:5])
    return line


def graph_time(replays, ns, sampled):
    """Per graph: CUPTI's mean replay time (its GRAPH_TRACE records, from
    the census run) beside the event pairs' mean, corrected (the host's
    share out of samples whose stream was idle) and raw, and their ratios
    to CUPTI's: the event pairs' bias."""
    out = []
    for name, (n, total, raw, idle) in sorted(sampled.items(), key=lambda x: -x[1][0]):
        row = {"name": name, "sampled": n, "idle": idle, "ours_mean_ns": round(total / n) if n else None,
               "raw_mean_ns": round(raw / n) if n else None}
        if replays.get(name) and ns.get(name):
            cupti = ns[name] / replays[name]
            row["cupti_mean_ns"] = round(cupti)
            if n:
                row["ratio"] = round((total / n) / cupti, 4)
                row["raw_ratio"] = round((raw / n) / cupti, 4)
        out.append(row)
    return out[:8]


def llama_driver(port, clients, requests, n_predict):
    """Waits for llama-server, then sends `requests` completions from `clients` threads."""
    def go(p):
        base = "http://127.0.0.1:%d" % port
        deadline = time.time() + 300
        while time.time() < deadline:
            if p.poll() is not None:
                return {"error": "server exited %s" % p.returncode}
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        done = []

        def client(i):
            for j in range(requests // clients):
                body = json.dumps({"prompt": "Request %d-%d: tell a long story about GPUs." % (i, j),
                                   "n_predict": n_predict, "cache_prompt": False,
                                   "ignore_eos": True}).encode()
                req = urllib.request.Request(base + "/completion", data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        done.append(json.loads(r.read()).get("tokens_predicted", 0))
                except OSError as e:
                    done.append(str(e))
        ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return {"requests": len(done), "tokens": sum(x for x in done if isinstance(x, int)),
                "errors": [x for x in done if not isinstance(x, int)][:3]}
    return go


SAMPLE = 8


def main():
    global SAMPLE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", type=int, default=SAMPLE, help="GRAPHSIGNAL_CUDA_SAMPLE: time one graph launch in N")
    ap.add_argument("--out", default="census")
    ap.add_argument("--lib", default=LIB)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default="census,light")
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--llama-server")
    ap.add_argument("--model")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=64, help="tokens per llama-server request")
    a = ap.parse_args()
    require_gpu(__file__)
    SAMPLE = a.sample
    if not os.path.exists(a.lib):
        raise SystemExit("no interposer at %s (python3 csrc/cupti_build.py graphsignal/lib)" % a.lib)
    os.makedirs(a.out, exist_ok=True)
    for name in filter(None, a.workloads.split(",")):
        for mode in a.modes.split(","):
            run_workload(name, WORKLOADS[name], a.out, a.lib, mode, a.timeout)
    if a.llama_server and a.model:
        for mode in a.modes.split(","):
            port = free_port()
            cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-ngl", "99", "-np", str(a.clients),
                   "-c", "4096"]
            run_workload("llama_server", cmd, a.out, a.lib, mode, a.timeout,
                         server=llama_driver(port, a.clients, 4 * a.clients, a.n_predict))


if __name__ == "__main__":
    main()
