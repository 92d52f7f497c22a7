#!/usr/bin/env python3
"""SHA-256 of every document the sidecar serves, for one fixed store (JSON
lines): a refactor of the series, the payload or the exporters must leave
each digest as it was. Run it with one checkout and then another and
compare (PYTHONPATH picks the checkout):

  PYTHONPATH=/path/to/old python3 scripts/digest_outputs.py > old.jsonl
  python3 scripts/digest_outputs.py > new.jsonl && diff old.jsonl new.jsonl

The store is fed only from recorded inputs and a seeded generator, on a
fake clock (one tick a second, the history taken each tick): the recorded
/signals payloads of tests/data (their series, resources, errors,
context), the engines' recorded /metrics texts of tests/data/engines
(vLLM, SGLang, TensorRT-LLM, llama.cpp, one scrape a tick), probe
histograms and a kernel profile of real symbols (tests/data/
kernel_symbols.txt) past the payload's frame cut. Digested, once after the
first ticks and again after more (the second read goes through every
cache the first filled):

  signals        GET /signals
  window5        GET /signals?window=5
  history30      GET /signals?history=30
  final          the payload --output writes at exit (with its history)
  metrics.*      GET /metrics, text and OpenMetrics, with and without the
                 engine's series, with identity labels
  otlp.*         the OTLP request's protobuf bytes, with and without the
                 engine's series
  reference.*    prometheus_client's own encoders over each recorded
                 payload's decoded metrics (the judge /metrics is held to)
"""
import glob
import hashlib
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
T0 = 1_700_000_000 * 10**9


class Clock:
    def __init__(self):
        self.t = T0

    def __call__(self):
        return self.t


def recorded():
    paths = sorted(glob.glob(os.path.join(DATA, "**", "*.signals.json"), recursive=True))
    paths.append(os.path.join(DATA, "reference", "signals-example.json"))
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            out.append((os.path.relpath(p, DATA), json.load(f)))
    return out


def engine_texts():
    from graphsignal.sources import prometheus

    out = []
    for p in sorted(glob.glob(os.path.join(DATA, "engines", "*.txt"))):
        with open(p, encoding="utf-8") as f:
            text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
        try:
            out.append((os.path.basename(p), prometheus.parse_exposition(text)))
        except ValueError:
            pass  # not an exposition (an error page the engine served)
    return out


def symbols():
    with open(os.path.join(DATA, "kernel_symbols.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def apply_doc(s, doc, ts, scale):
    """A recorded payload's series into the store, its numbers scaled (so
    each tick moves them)."""
    for r in doc.get("resources", ()):
        s.set_resource(r["kind"], r["tags"], r["attributes"], ts=ts)
    for m in doc["metrics"]:
        st, tags, name = m["stats"], m["tags"], m["name"]
        if m["type"] == "gauge":
            v = st["value"]
            s.set_gauge(name, tags, v if v is None else v * scale, ts=ts)
        elif m["type"] == "counter":
            v = st["total"]
            s.set_counter(name, tags, v if v is None else v * scale, ts=ts)
        elif m["type"] == "profile":
            s.add_profile(name, tags, [(f["name"], f["value"], f["samples"]) for f in st["frames"]], ts=ts)
        else:
            s.set_histogram_buckets(name, tags, st["count"] * scale, st["sum"], st["bins"],
                                    [c * scale for c in np.cumsum(st["counts"]).tolist()], ts=ts)


def tick(s, clock, i, docs, engines, syms, rng, keys):
    from graphsignal.sources import prometheus

    clock.t += 10**9
    ts = clock.t
    for _, doc in docs:
        apply_doc(s, doc, ts, 1 + (i % 3))
    _, parsed = engines[i % len(engines)]
    keys |= prometheus.apply(s, parsed, ts)
    for h in range(6):
        s.add_histogram_values("probe_latency_nanoseconds", {"op": str(h)},
                               rng.integers(1, 1 << (10 + 4 * h), 200 + 50 * i).astype(np.uint64), ts=ts)
    s.add_histogram_agg("probe_step_nanoseconds", {}, 3, 3000 + i, 900, 1100 + i,
                        (np.array([300, 310, 320]), np.array([1, 1, 1])), ts=ts)
    frames = [(syms[(j * 7 + i) % len(syms)], int(rng.integers(1, 1 << 20)), 1 + j % 4) for j in range(180)]
    frames += [("k_unnamed_%d" % j, int(rng.integers(1, 1 << 12)), 1) for j in range(40 * i)]
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "4242", "device.uuid": "GPU-aaaa"}, frames, ts=ts)
    s.add_profile("probe_work_nanoseconds", {"process.pid": "4242"}, [("step", 10 + i, 1), ("load", i, 1)], ts=ts)
    s.add_counter("myapp_requests_total", {"process.pid": "4242"}, 3 + i, ts=ts)
    s.set_gauge("myapp_queue_depth", {"process.pid": "4242"}, float(i % 4), ts=ts)
    s.set_gauge("myapp_ratio_percent", {"process.pid": "4242", "a.b": "x\"y"}, 12.5 + i, ts=ts)
    if i % 4 == 0:
        s.add_error("warning", "tick %d said something" % (i // 4), tags={"source": "digest"}, ts=ts)
    s.take_history(ts, ts)


def store_and_keys():
    from graphsignal.sidecar.store import MetricStore

    clock = Clock()
    s = MetricStore(clock=clock, monotonic=clock)
    s.set_started(T0 - 10**9)
    s.set_context(**{"instance.id": "run-digest", "host.name": "gpu-box"})
    s.set_resource("device", {"device.index": "0", "device.uuid": "GPU-aaaa", "device.bus_id": "0000:01:00.0"},
                   {"device.name": "NVIDIA H200", "driver_version": "580.1", "cuda_driver_version": "13000"}, ts=T0)
    return s, clock


def sha(b):
    return hashlib.sha256(b).hexdigest()


def settings_of(engine):
    from graphsignal import config

    env = {"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
           "GRAPHSIGNAL_SERVICE": "svc", "GRAPHSIGNAL_TAGS": "pod=p-1", "OTEL_RESOURCE_ATTRIBUTES": "zone=z"}
    if engine:
        env["GRAPHSIGNAL_METRICS_ENGINE"] = "1"
    return config.from_environ(env, ["python3", "serve.py"])


def reference_of(doc, om):
    """prometheus_client's encoders over a recorded payload's metrics."""
    from prometheus_client.exposition import choose_encoder

    from graphsignal.sidecar import exposition

    encoder, _ = choose_encoder(OPENMETRICS if om else "")
    metrics = doc["metrics"]
    try:  # the series views of a recorded document, where the checkout has them
        from graphsignal.sidecar.recorded import views_of
    except ImportError:  # an older checkout: its Collector took the decoded metric dicts
        series = metrics
    else:
        series = views_of(metrics)
    return encoder(exposition.Collector(series, exposition.DEFAULT_TOP_FRAMES, set(), False))


def main():
    from werkzeug.test import Client

    from graphsignal.sidecar.exposition import Exposition
    from graphsignal.sidecar.history_block import final_history
    from graphsignal.sidecar.otlp import Builder
    from graphsignal.sidecar.payload import build_signals
    from graphsignal.sidecar.server import make_app
    from graphsignal.sidecar.windows import window_stats

    docs = recorded()
    engines = engine_texts()
    syms = symbols()
    rng = np.random.default_rng(7)
    s, clock = store_and_keys()
    keys = set()
    exp = Exposition(s, engine_keys=lambda: keys, identity={"service": "svc", "pod": 'p"1'})
    client = Client(make_app(s, windows=window_stats, exposition=exp))
    out = []
    for rnd, ticks in (("a", range(0, 8)), ("b", range(8, 14))):
        for i in ticks:
            tick(s, clock, i, docs, engines, syms, rng, keys)
        for name, url in (("signals", "/signals"), ("window5", "/signals?window=5"),
                          ("history30", "/signals?history=30")):
            body = client.get(url).get_data()
            json.loads(body)
            out.append((rnd, name, body))
        for accept, fmt in ((None, "text"), (OPENMETRICS, "openmetrics")):
            for engine in ("0", "1"):
                headers = {"Accept": accept} if accept else {}
                out.append((rnd, "metrics.%s.engine%s" % (fmt, engine),
                            client.get("/metrics?engine=" + engine, headers=headers).get_data()))
        for engine in (False, True):
            b = Builder(settings_of(engine), engine_keys=lambda: keys)
            out.append((rnd, "otlp.engine%d" % engine, b.request(s.snapshot()).SerializeToString(deterministic=True)))
    history = final_history(s)
    out.append(("end", "final", build_signals(s, {"history": history} if history is not None else None)))
    for rel, doc in docs:
        for om in (False, True):
            out.append(("ref", "reference.%s.%s" % (rel, "openmetrics" if om else "text"), reference_of(doc, om)))
    for rnd, name, body in out:
        sys.stdout.write(json.dumps({"round": rnd, "doc": name, "bytes": len(body), "sha256": sha(body)}) + "\n")


if __name__ == "__main__":
    main()
