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
from typing import Any, Dict, List, Mapping, Optional

import orjson

from graphsignal import __version__, engine_summary, findings, report
from graphsignal.jsonsafe import dumps
from graphsignal.signals_model import SnapshotSource, StoreSnapshot

logger = logging.getLogger("graphsignal")


def build_signals(store: SnapshotSource, extra: Optional[Mapping[str, Any]] = None) -> bytes:
    """The serialized /signals payload (bytes). `extra` adds top-level
    keys (e.g. a window)."""
    return render(store.snapshot(encode=True), extra)


def render(snap: StoreSnapshot, extra: Optional[Mapping[str, Any]] = None) -> bytes:
    """The /signals payload (bytes) of a snapshot taken with encode=True."""
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
    engine = engine_of(snap)
    rest = [b",", tail[1:-1], b',"engine":', dumps(engine), b',"findings":',
            dumps(findings_of(snap, head, engine, extra))]
    if extra:
        rest.append(b"," + dumps(extra)[1:-1])
    rest.append(b"}")
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



def findings_of(snap: StoreSnapshot, head: Mapping[str, Any], engine: Optional[Dict[str, Any]],
                extra: Optional[Mapping[str, Any]]) -> List[Any]:
    """The findings (graphsignal.findings) of the document being rendered,
    over its window when it has one. Only the series the rules read are
    decoded (a probe flood costs a prefix test each), and none for a
    window; a failure costs the findings only (one log line, once).
    Cost: about 5 ms a read for 250 kernel frames on a busy 2-core VM,
    growing with the frames of every process (8 x 250: about 25 ms)."""
    try:
        doc: Dict[str, Any] = dict(head, errors=list(snap.errors), resources=list(snap.resources), engine=engine)
        wanted = findings.ENCODED_PREFIXES
        windowed = bool(extra) and isinstance(extra.get("window"), dict)  # type: ignore[union-attr]
        # over a window the rules read the window's series (already dicts): the cumulative ones stay encoded
        doc["metrics"] = [] if windowed else [orjson.loads(e) for e in snap.encoded or () if e.startswith(wanted)]
        for key in ("window", "history"):
            if extra and key in extra:
                doc[key] = extra[key]
        return list(findings.compute(doc, log=lambda m: report.once(("payload", "findings", m), m)))  # type: ignore[arg-type]
    except Exception as e:
        report.once(("payload", "findings"), "findings failed: %s: %s" % (type(e).__name__, e))
        return []
