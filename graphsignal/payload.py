"""The /signals document.

The shape follows the reference payload agents already read: profiler,
payload_ns, start_ns, context, metrics, errors, resources, engine. It is
rendered from one StoreSnapshot (graphsignal.store), whose series carry
their own cached JSON, so the document is framed from pre-serialized
pieces and the engine summary describes the same moment.
"""
import logging

from graphsignal import __version__
from graphsignal.series import dumps

logger = logging.getLogger("graphsignal")


def build_signals(store, extra=None):
    """The serialized /signals payload (bytes). `extra` adds top-level
    keys (e.g. a window)."""
    return render(store.snapshot(encode=True), extra)


def render(snap, extra=None, metrics=True):
    """The /signals payload (bytes) of a snapshot taken with encode=True;
    without metrics: the document without its "metrics" key."""
    head = {
        "profiler": {"version": __version__},
        "payload_ns": snap.taken_ns,
        "start_ns": snap.start_ns,
        "context": dict(snap.context),
    }
    # dumps never fails on a number (integers beyond 64 bits become floats): data
    # cannot make /signals fail or the signals file go unwritten
    tail = dumps({"errors": list(snap.errors), "resources": list(snap.resources)})
    parts = [dumps(head)[:-1]]
    if metrics:
        parts += [b',"metrics":[', b",".join(snap.encoded), b"]"]
    parts += [b",", tail[1:-1], b',"engine":', dumps(engine_of(snap))]
    if extra:
        parts.append(b"," + dumps(extra)[1:-1])
    parts.append(b"}")
    return b"".join(parts)


def engine_of(snap):
    """The engine summary (graphsignal.engine_summary), or None; a failure
    there costs the summary only (one log line and error entry, once)."""
    try:
        from graphsignal import engine_summary

        return engine_summary.from_snapshot(snap)
    except Exception as e:
        from graphsignal import report

        report.once(("payload", "engine_summary"), "engine summary failed: %s: %s" % (type(e).__name__, e))
        return None
