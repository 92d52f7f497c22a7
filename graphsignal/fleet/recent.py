"""The recent tier of graphsignal-server's history: one point per upload
(a second apart) for the last RECENT_SECONDS, of the series the charts
and traces draw (graphsignal.timeline.selected: host, process, GPU and
engine series and the workload's own probes), so the fleet page shows
the last 15 minutes a second at a time; the database keeps one point a
minute (graphsignal.fleet.db's history), which GET /api/v1/history
reads for longer spans.

Kept in the server's memory, not in the database: a second-by-second
row of every instance would multiply what the database writes by 60 for
points nobody reads after 15 minutes. A restarted server starts this
tier empty (the page says how many points it has) and a WSGI server
with several processes has one per process (create_app's docstring asks
for one).

Bounded: per instance, at most MAX_KEYS series, and points are kept as
changes (an upload carries only the series that changed: a point costs
what changed, and a base holds the states before the oldest point);
across instances at most max_bytes of encoded states, the instances
silent longest dropped first. An upload older than the newest point (a
resent body) adds nothing."""
import collections
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import orjson

from graphsignal import timeline
from graphsignal.fleet.rows import series_key, upload_state
from graphsignal.fleet.storage import NS

RECENT_SECONDS = 900
MAX_BYTES = 64 << 20  # encoded states, all instances together
MAX_KEYS = 2 * timeline.MAX_SERIES  # series per instance

Key = str
Meta = Tuple[str, str, Dict[str, str]]  # (name, type, tags)


class _Instance:
    __slots__ = ("metas", "base", "points", "bytes", "base_bytes")

    def __init__(self) -> None:
        self.metas: Dict[Key, Meta] = {}
        self.base: Dict[Key, Any] = {}  # the states before the oldest point
        self.points: Deque[Tuple[int, Dict[Key, Any], int]] = collections.deque()  # (ts_ns, changes, bytes)
        self.bytes = 0
        self.base_bytes = 0


def _selected(metrics: Any, inst: _Instance, states: Optional[Dict[Key, Any]] = None) -> Dict[Key, Any]:
    """{key: state in JSON form} of the series the tier keeps: an upload's
    (storage.upload_state: its stats and the state it carries), or
    a stored snapshot's, whose states are given."""
    out: Dict[Key, Any] = {}
    for m in metrics or ():
        name, type_, tags = m.get("name"), m.get("type"), m.get("tags")
        if not isinstance(name, str) or not isinstance(tags, dict) or not timeline.selected(name, type_, tags):
            continue
        k = series_key(m).decode()
        if k not in inst.metas:
            if len(inst.metas) >= MAX_KEYS:
                continue
            inst.metas[k] = (name, type_, tags)
        if states is not None:
            out[k] = states.get(k)
            continue
        try:
            out[k] = upload_state(m)
        except (TypeError, ValueError, AttributeError, KeyError):
            continue
    return out


class Recent:
    """The tier; thread-safe (uploads of many keys arrive at once)."""

    def __init__(self, seconds: int = RECENT_SECONDS, max_bytes: int = MAX_BYTES) -> None:
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.instances: "collections.OrderedDict[Tuple[str, str], _Instance]" = collections.OrderedDict()
        self.bytes = 0

    def add(self, owner: str, iid: str, doc: Dict[str, Any],
            seed: Callable[[], Tuple[Optional[Dict[str, Any]], Dict[Key, Any]]]) -> None:
        """An accepted upload (graphsignal.fleet.ingest.validate's doc).
        seed() -> the instance's stored snapshot (its every series) and
        states (db.snapshot_states), read the first time this tier sees
        the instance."""
        ts = doc.get("payload_ns")
        if not isinstance(ts, int):
            return
        with self.lock:
            inst = self.instances.get((owner, iid))
        if inst is None:
            snap, states = seed()  # outside the lock: a database read
            fresh = _Instance()
            fresh.base = _selected((snap or {}).get("metrics"), fresh, states)
            fresh.base_bytes = len(orjson.dumps(fresh.base))
            with self.lock:
                inst = self.instances.get((owner, iid))
                if inst is None:
                    inst = self.instances[(owner, iid)] = fresh
                    self.bytes += fresh.base_bytes
        with self.lock:
            if inst.points and ts <= inst.points[-1][0]:
                return
            changes = _selected(doc.get("metrics"), inst)
            size = len(orjson.dumps(changes)) + 16
            inst.points.append((ts, changes, size))
            inst.bytes += size
            self.bytes += size
            self.instances.move_to_end((owner, iid))
            self._trim(inst, ts - self.seconds * NS)
            while self.bytes > self.max_bytes and len(self.instances) > 1:
                _, old = self.instances.popitem(last=False)
                self.bytes -= old.bytes + old.base_bytes

    def _trim(self, inst: _Instance, cutoff_ns: int) -> None:
        # one point at or before the cutoff stays: it starts the span's first interval
        while len(inst.points) > 1 and inst.points[1][0] <= cutoff_ns:
            _, changes, size = inst.points.popleft()
            inst.base.update(changes)
            inst.bytes -= size
            self.bytes -= size

    def points(self, owner: str, iid: str, since_ns: int) -> Tuple[List[int], Dict[Key, Meta],
                                                                    Callable[[Key, int], Any]]:
        """(times, {key: (name, type, tags)}, state_at(key, i)) of the
        points from the newest at or before since_ns on; times empty when
        the tier has none of this instance."""
        with self.lock:
            inst = self.instances.get((owner, iid))
            if inst is None:
                return [], {}, lambda k, i: None
            metas = dict(inst.metas)
            state = dict(inst.base)
            pts = list(inst.points)
        times: List[int] = []
        rows: List[Dict[Key, Any]] = []
        for i, (ts, changes, _) in enumerate(pts):
            state.update(changes)
            if ts < since_ns and i + 1 < len(pts) and pts[i + 1][0] <= since_ns:
                continue
            times.append(ts)
            rows.append(dict(state))
        return times, metas, lambda k, i: rows[i].get(k)
