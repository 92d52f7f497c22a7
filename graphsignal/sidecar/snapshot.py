"""The one seam through which the sidecar's readers (the /metrics
exposition, the uploader) read the store.

They return /signals's shape, from the store's own cached JSON, so a
reader never touches a Series and never holds the store's lock while it
works. The read-side refactor (immutable store snapshots) replaces these
bodies and nothing else.
"""
import orjson

from graphsignal.payload import build_signals


def metrics_snapshot(store):
    """Every series as {name, type, tags, stats, updated_ns}, in /signals
    order (name, tags). updated_ns: epoch ns of the series' last change."""
    return orjson.loads(b"[" + b",".join(store.metrics_json()) + b"]")


def metrics_snapshot_encoded(store):
    """metrics_snapshot, each series still JSON-encoded (bytes). A series
    that did not change since the last call is the very same bytes object,
    so a reader can skip it by identity without decoding anything."""
    return store.metrics_json()


def series_content(encoded):
    """An encoded series without its updated_ns: equal for a series that was
    only touched (set again to what it held)."""
    i = encoded.rfind(b',"updated_ns":')
    return encoded[:i] if i >= 0 else encoded


def signals_snapshot(store):
    """The whole /signals document (profiler, payload_ns, start_ns, context,
    metrics, errors, resources, engine) as a dict."""
    return orjson.loads(build_signals(store))


def signals_snapshot_encoded(store):
    """(the /signals document without "metrics", as a dict; its metrics as
    metrics_snapshot_encoded gives them). Nothing of the metrics is decoded:
    an unchanged series is the same bytes object as in the last call."""
    with store.lock:  # one moment for both
        doc = build_signals(store)
        metrics = store.metrics_json()
    # the document frames the very same pieces: cut them out by length
    # (a JSON string cannot hold this key sequence unescaped)
    start = doc.find(_METRICS)
    end = start + len(_METRICS) + sum(len(m) for m in metrics) + max(0, len(metrics) - 1)
    if start < 0 or doc[end:end + 1] != b"]":  # not the layout build_signals writes today: decode it all
        rest = orjson.loads(doc)
        return rest, [orjson.dumps(m) for m in rest.pop("metrics", [])]
    return orjson.loads(doc[:start] + doc[end + 1:]), metrics


_METRICS = b',"metrics":['
