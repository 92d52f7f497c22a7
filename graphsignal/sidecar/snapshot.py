"""/signals's shape as dicts, from one store snapshot
(graphsignal.signals_model.StoreSnapshot) and its series' cached JSON: for
tests and tools that want the document decoded. The sidecar's own
readers (the /metrics exposition, the uploader, the OTLP exporter) read
the snapshot's series views instead and never decode rendered text.
"""
import orjson

from graphsignal.sidecar.payload import render


def metrics_snapshot(store):
    """Every series as {name, type, tags, stats, updated_ns}, in /signals
    order (name, tags). updated_ns: epoch ns of the series' last change."""
    return orjson.loads(b"[" + b",".join(store.snapshot(encode=True).encoded) + b"]")


def signals_snapshot(store):
    """The whole /signals document (profiler, payload_ns, start_ns, context,
    metrics, errors, resources, engine) as a dict."""
    return orjson.loads(render(store.snapshot(encode=True)))
