"""The /signals document.

The shape follows the reference payload agents already read: profiler,
payload_ns, start_ns, context, metrics, errors, resources, engine, plus
ended_ns and exit_status (null while the workload runs; the final payload
has them). start_ns is the workload's launch. It is
rendered from one StoreSnapshot (graphsignal.sidecar.store), whose series carry
their own cached JSON, so the document is framed from pre-serialized
pieces and the engine summary describes the same moment.
"""
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, TypedDict

from graphsignal import __version__
from graphsignal.sidecar.series import dumps

if TYPE_CHECKING:
    from graphsignal.sidecar.store import MetricStore, StoreSnapshot

logger = logging.getLogger("graphsignal")


# -- the document's shape (SPEC.md is the contract; units are in the names) ---------
class Profiler(TypedDict):
    version: str


class Metric(TypedDict):
    """A series: its stats by type (graphsignal.sidecar.series), updated_ns its
    last change (epoch ns)."""

    name: str
    type: str  # "gauge" | "counter" | "histogram" | "profile"
    tags: Dict[str, str]
    stats: Dict[str, Any]
    updated_ns: Optional[int]


class ErrorEntry(TypedDict):
    level: str  # "warning" | "error" | ...
    message: str
    exception: Optional[str]
    tags: Dict[str, str]
    timestamp_ns: int  # first seen
    last_ns: int  # last seen
    count: int
    resolved_ns: Optional[int]  # when its condition cleared (None: current)


class Resource(TypedDict):
    kind: str
    tags: Dict[str, str]
    attributes: Dict[str, Any]
    first_seen_ts: int  # epoch seconds
    last_seen_ts: int


class Signals(TypedDict, total=False):
    """GET /signals: every key but `window` is always there."""

    profiler: Profiler
    payload_ns: int
    start_ns: int
    ended_ns: Optional[int]
    exit_status: Optional[int]
    context: Dict[str, Any]
    metrics: List[Metric]
    errors: List[ErrorEntry]
    resources: List[Resource]
    engine: Optional[Dict[str, Any]]
    window: Dict[str, Any]  # with ?window=N (graphsignal.sidecar.windows)


def build_signals(store: "MetricStore", extra: Optional[Mapping[str, Any]] = None) -> bytes:
    """The serialized /signals payload (bytes). `extra` adds top-level
    keys (e.g. a window)."""
    return render(store.snapshot(encode=True), extra)


def render(snap: "StoreSnapshot", extra: Optional[Mapping[str, Any]] = None, metrics: bool = True) -> bytes:
    """The /signals payload (bytes) of a snapshot taken with encode=True;
    without metrics: the document without its "metrics" key."""
    head: Signals = {
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
    parts = [dumps(head)[:-1]]
    if metrics:
        if snap.encoded is None:
            raise ValueError("render() needs a snapshot taken with encode=True")
        parts += [b',"metrics":[', b",".join(snap.encoded), b"]"]
    parts += [b",", tail[1:-1], b',"engine":', dumps(engine_of(snap))]
    if extra:
        parts.append(b"," + dumps(extra)[1:-1])
    parts.append(b"}")
    return b"".join(parts)


def engine_of(snap: "StoreSnapshot") -> Optional[Dict[str, Any]]:
    """The engine summary (graphsignal.engine_summary), or None; a failure
    there costs the summary only (one log line, once)."""
    try:
        from graphsignal import engine_summary

        return engine_summary.from_snapshot(snap)
    except Exception as e:
        from graphsignal import report

        report.once(("payload", "engine_summary"), "engine summary failed: %s: %s" % (type(e).__name__, e))
        return None
