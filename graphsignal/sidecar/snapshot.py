"""The seam through which the sidecar's readers (the /metrics exposition,
the uploader) read the store: /signals's shape, from one store snapshot
(graphsignal.signals_model.StoreSnapshot) and its series' cached JSON, so
a reader never touches a series and never holds the store's lock while it
works.
"""
import orjson

from graphsignal.sidecar.payload import render


def metrics_snapshot(store):
    """Every series as {name, type, tags, stats, updated_ns}, in /signals
    order (name, tags). updated_ns: epoch ns of the series' last change."""
    return orjson.loads(b"[" + b",".join(store.snapshot(encode=True).encoded) + b"]")


def metrics_snapshot_encoded(store):
    """metrics_snapshot, each series still JSON-encoded (bytes). A series
    that did not change since the last call is the very same bytes object,
    so a reader can skip it by identity without decoding anything."""
    return list(store.snapshot(encode=True).encoded)


def series_content(encoded):
    """An encoded series without its updated_ns: equal for a series that was
    only touched (set again to what it held)."""
    i = encoded.rfind(b',"updated_ns":')
    return encoded[:i] if i >= 0 else encoded


def signals_snapshot(store):
    """The whole /signals document (profiler, payload_ns, start_ns, context,
    metrics, errors, resources, engine) as a dict."""
    return orjson.loads(render(store.snapshot(encode=True)))


def signals_snapshot_encoded(store):
    """(the /signals document without "metrics", as a dict; its metrics as
    metrics_snapshot_encoded gives them), of one moment. Nothing of the
    metrics is decoded: an unchanged series is the same bytes object as in
    the last call."""
    snap = store.snapshot(encode=True)
    return orjson.loads(render(snap, metrics=False)), list(snap.encoded)
