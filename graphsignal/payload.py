"""The /signals document.

The shape follows the reference payload agents already read: profiler,
payload_ns, start_ns, context, metrics, errors, resources. Series carry
their own cached JSON (see store.Series.to_json), so the document is
framed from pre-serialized pieces.
"""
import logging

from graphsignal import __version__
from graphsignal.store import dumps

logger = logging.getLogger("graphsignal")
_summary_failed = []


def build_signals(store, extra=None):
    """The serialized /signals payload (bytes). `extra` adds top-level
    keys (e.g. a window)."""
    engine = _engine(store)
    with store.lock:
        metrics = store.metrics_json()
        head = {
            "profiler": {"version": __version__},
            "payload_ns": store.clock(),
            "start_ns": store.start_ns,
            "context": dict(store.context),
        }
        errors = list(store.errors)
        resources = sorted(store.resources.values(), key=lambda r: (r["kind"], sorted(r["tags"].items())))
        tail = dumps({"errors": errors, "resources": resources})
    # dumps never fails on a number (integers beyond 64 bits become floats): data
    # cannot make /signals fail or the signals file go unwritten
    parts = [dumps(head)[:-1], b',"metrics":[', b",".join(metrics), b"],", tail[1:-1],
             b',"engine":', dumps(engine)]
    if extra:
        parts.append(b"," + dumps(extra)[1:-1])
    parts.append(b"}")
    return b"".join(parts)


def _engine(store):
    """The engine summary (graphsignal.engine_summary), or None; a failure
    there costs the summary only, logged once."""
    try:
        from graphsignal import engine_summary

        return engine_summary.from_store(store)
    except Exception as e:
        if not _summary_failed:
            _summary_failed.append(e)
            logger.warning("graphsignal: engine summary failed: %s: %s", type(e).__name__, e)
        return None
