"""The /signals document.

The shape follows the reference payload agents already read: profiler,
payload_ns, start_ns, context, metrics, errors, resources, engine, plus
ended_ns and exit_status (null while the workload runs; the final payload
has them). start_ns is the workload's launch. The shape is written down
once, as the Signals TypedDict of graphsignal.signals_model (and, from it,
the JSON Schema graphsignal/schema/signals.schema.json).

It is rendered from one StoreSnapshot (MetricStore.snapshot(encode=True)),
whose series carry their own cached JSON, so the document is framed from
pre-serialized pieces and the engine summary describes the same moment.
"""
import logging
from typing import Any, Dict, Mapping, Optional

from graphsignal import __version__, engine_summary, report
from graphsignal.sidecar.series import dumps
from graphsignal.sidecar.store import MetricStore
from graphsignal.signals_model import StoreSnapshot

logger = logging.getLogger("graphsignal")


def build_signals(store: MetricStore, extra: Optional[Mapping[str, Any]] = None) -> bytes:
    """The serialized /signals payload (bytes). `extra` adds top-level
    keys (e.g. a window)."""
    return render(store.snapshot(encode=True), extra)


def render(snap: StoreSnapshot, extra: Optional[Mapping[str, Any]] = None, metrics: bool = True) -> bytes:
    """The /signals payload (bytes) of a snapshot taken with encode=True;
    without metrics: the document without its "metrics" key."""
    head: Dict[str, Any] = {  # the Signals document's first keys
        "profiler": {"version": __version__},
        "payload_ns": snap.taken_ns,
        "start_ns": snap.start_ns,
        "ended_ns": snap.ended_ns,
        "exit_status": snap.exit_status,
        "context": dict(snap.context),
    }
    # dumps never fails on a number (integers beyond 64 bits become floats): data
    # cannot make /signals fail or the signals file go unwritten
    tail = dumps({"errors": list(snap.errors), "resources": list(snap.resources)})
    rest = [b",", tail[1:-1], b',"engine":', dumps(engine_of(snap))]
    if extra:
        rest.append(b"," + dumps(extra)[1:-1])
    rest.append(b"}")
    if not metrics:
        return dumps(head)[:-1] + b"".join(rest)
    encoded = snap.encoded
    if encoded is None:
        raise ValueError("render() needs a snapshot taken with encode=True")
    start, end = dumps(head)[:-1] + b',"metrics":[', b"]" + b"".join(rest)
    if not encoded:
        return start + end
    # one join copies the megabytes of series once: the document's head goes
    # in front of the first series, its rest after the last
    if len(encoded) == 1:
        return start + encoded[0] + end
    return b",".join((start + encoded[0],) + encoded[1:-1] + (encoded[-1] + end,))


def engine_of(snap: StoreSnapshot) -> Optional[Dict[str, Any]]:
    """The engine summary (graphsignal.engine_summary), or None; a failure
    there costs the summary only (one log line, once)."""
    try:
        return engine_summary.from_snapshot(snap)
    except Exception as e:
        report.once(("payload", "engine_summary"), "engine summary failed: %s: %s" % (type(e).__name__, e))
        return None
