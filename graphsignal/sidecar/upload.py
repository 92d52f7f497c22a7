"""The uploader: with GRAPHSIGNAL_API_KEY set, new signals go to
${GRAPHSIGNAL_API_BASE:-https://api.graphsignal.com}/api/v1/ingest once a
second. Without the key nothing here runs and nothing connects anywhere.

Each upload is one POST (X-API-Key, Content-Type: application/json,
Content-Encoding: gzip) of an upload body of schema 2, written down in
graphsignal.upload_model: the run's context and times, the series whose
value changed since the last accepted upload (in /signals's shape, each
with its cumulative state in graphsignal.windowmath's JSON form), new
errors, and resources and the engine summary when they changed.

The body is built from one store snapshot (its series views, their
cached JSON and states), never from rendered text read back. A series
whose view is the one already accepted is skipped by identity; another
is compared by its view's fingerprint (graphsignal.signals_model.
SeriesViewLike: its JSON without updated_ns), so one set again to the
same value is not resent and its updated_ns on the server is when its
value last changed.

Metrics are cumulative, so nothing is queued for them: a failed upload is
followed by one that carries every series changed since the last accepted
one. Errors are events: they wait in a buffer of MAX_PENDING_ERRORS
(oldest dropped first, counted) until an upload carrying them is accepted.
Resending an accepted body changes nothing on the server.

Never harm the workload: one request at a time with a short timeout, no
redirects, and graphsignal.sidecar.retry's policy after a failure: a
wait drawn between 0 and 1 s doubling to 30 s (full jitter, so a fleet
does not retry in lockstep), at least a 429's or 503's Retry-After, and
for a 401/403 (the key was refused) one line, then a try every 4 to 5
minutes (a key fixed on the server heals a long run); one log line when
uploads start failing and one when they recover, and at exit one last
upload with a deadline of 2 s. The periodic driver
(graphsignal.sidecar.periodic) runs it once a second. Counters in the
store say how it goes: graphsignal_uploads_total (tag result: accepted /
failed), graphsignal_upload_bytes_total (compressed bytes sent) and
graphsignal_upload_dropped_errors_total.
"""
import collections
import gzip
import logging
import random
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

import requests

from graphsignal import __version__, config, jsonsafe, windowmath
from graphsignal.jsonsafe import dumps
from graphsignal.sidecar import api, retry
from graphsignal.sidecar.payload import engine_of
from graphsignal.sidecar.periodic import FINAL_DEADLINE, PeriodicDriver, final_timeout
from graphsignal.signals_model import (OTHER_FRAME, ErrorEntry, ProfileState, ProfileStats, SeriesViewLike,
                                       StoreSnapshot)
from graphsignal.upload_model import SCHEMA

__all__ = ["FINAL_DEADLINE", "SCHEMA", "INTERVAL", "MAX_PENDING_ERRORS", "Uploader", "api_key", "series_json",
           "start"]

logger = logging.getLogger("graphsignal")

ENV_API_KEY = config.API_KEY_ENV
INGEST_PATH = "/api/v1/ingest"
INTERVAL = 1.0  # seconds between uploads
BACKOFF_MIN, BACKOFF_MAX = retry.BASE, retry.CAP  # seconds: the range of the first and the longest draw
CONNECT_TIMEOUT, READ_TIMEOUT = 2.0, 3.0  # seconds
MAX_PENDING_ERRORS = 1000
GZIP_LEVEL = 3  # the first body carries every series: fast beats small

UPLOADS_METRIC = "graphsignal_uploads_total"
BYTES_METRIC = "graphsignal_upload_bytes_total"
DROPPED_METRIC = "graphsignal_upload_dropped_errors_total"

Timeout = Union[float, Tuple[float, float]]
Acked = Tuple[SeriesViewLike, int, bytes]  # a series view, its series (`created`), its fingerprint
Sent = Tuple[List[Acked], List[Tuple[bytes, ErrorEntry]], bytes, bytes]


def api_key(given: Optional[str]) -> Optional[str]:
    """The key (config.Settings.api_key), or None when uploads are off.
    Raises ValueError for a key an HTTP header cannot carry."""
    key = (given or "").strip()
    if not key:
        return None
    if not key.isprintable() or not key.isascii():
        raise ValueError("%s holds characters an HTTP header cannot carry; not uploading" % ENV_API_KEY)
    return key


def _error_key(e: ErrorEntry) -> bytes:
    return dumps((e.get("timestamp_ns"), e.get("level"), e.get("message"), e.get("exception"), e.get("tags")))


def _resources_fingerprint(resources: Any) -> bytes:
    return dumps([{k: v for k, v in r.items() if k != "last_seen_ts"} for r in resources])


def series_json(view: SeriesViewLike, max_frames: int) -> bytes:
    """A series as the body carries it: its /signals JSON (cached in the
    view) with its state beside its stats (upload schema 2; a profile's:
    the frames its stats do not list, none unless it has more than
    max_frames, the payload's cut). The view's JSON is an object by
    construction: the state is its last key."""
    if view.type == windowmath.PROFILE:
        state = cast(ProfileState, view.state) or {}
        if len(state) <= max_frames:
            rest: Dict[str, Any] = {}
        else:
            st = cast(ProfileStats, view.stats())
            listed = {f["name"] for f in st["frames"]}
            if st.get("frames_folded"):
                listed.discard(OTHER_FRAME)  # the cut's sum, not the state's own "(other)"
            rest = {k: v for k, v in state.items() if k not in listed}
        data = dumps(rest)
    else:
        data = dumps(windowmath.dump_state(view.type, view.state))
    return view.encoded()[:-1] + b',"state":' + data + b"}"


class Uploader:
    """Builds and sends upload bodies; an exporter of the periodic driver
    (graphsignal.sidecar.periodic): export(snapshot) is one cycle (the
    driver's once a second), so tests drive it with their own clock
    (step())."""

    name = "graphsignal-upload"
    what = "upload"

    def __init__(self, store: Any, key: str, base: str, clock: Callable[[], float] = time.monotonic,
                 http: Any = None, rand: Callable[[], float] = random.random, interval: float = INTERVAL) -> None:
        self.store = store
        self.key = key
        self.url = base + INGEST_PATH
        self.shown_url = config.shown_url(self.url)  # for lines and entries: no credentials
        self.clock = clock
        self.http = http
        self.tick = interval
        self.seq = 0
        self.retry = retry.Retry("uploads to %s" % self.shown_url,
                                 "the API key was not accepted (check %s)" % ENV_API_KEY, store, "upload", clock, rand)
        self.accepted = 0
        self.dropped_errors = 0
        # the series of the last accepted upload: by view identity (the store hands out
        # the same view until a series changes), and each series' fingerprint (a series
        # set again to the same value is not sent again)
        self._acked_views: Dict[int, Acked] = {}
        self._acked_values: Dict[int, bytes] = {}
        self._acked_errors: Dict[bytes, Tuple[Any, Any]] = {}  # error key -> (count, last_ns) accepted
        self._pending_errors: "collections.OrderedDict[bytes, ErrorEntry]" = collections.OrderedDict()
        self._acked_resources: Optional[bytes] = None
        self._acked_engine: Optional[bytes] = None

    # -- the periodic driver's exporter ----------------------------------------------------
    def due(self) -> bool:
        return True  # every tick: new errors are gathered even while backing off

    def snapshot(self) -> StoreSnapshot:
        snap: StoreSnapshot = self.store.snapshot(encode=True)
        return snap

    def export(self, snapshot: StoreSnapshot, timeout: Timeout = (CONNECT_TIMEOUT, READ_TIMEOUT),
               force: bool = False) -> bool:
        """Collects what is new; uploads it unless backing off (force: try
        anyway, the final upload). Returns True when an upload was accepted."""
        self._collect_errors(snapshot.errors)
        now = self.clock()
        if not force and not self.retry.due(now):
            return False
        body, sent = self.body(snapshot)
        return self._send(body, sent, now, timeout)

    def shutdown(self, deadline: float) -> bool:
        """The final upload, its request ending by `deadline` (time.monotonic())."""
        return self.export(self.snapshot(), final_timeout(deadline, CONNECT_TIMEOUT), force=True)

    def step(self, timeout: Timeout = (CONNECT_TIMEOUT, READ_TIMEOUT), force: bool = False) -> bool:
        """One cycle on a snapshot taken now (what the driver does each tick)."""
        return self.export(self.snapshot(), timeout, force)

    # -- one cycle -------------------------------------------------------------------
    def _collect_errors(self, errors: Any) -> None:
        for e in errors:
            k = _error_key(e)
            if self._acked_errors.get(k) == (e.get("count"), e.get("last_ns")):
                continue
            if k in self._pending_errors:
                self._pending_errors[k] = e  # its newer count, same place in line
                continue
            self._pending_errors[k] = e
            if len(self._pending_errors) > MAX_PENDING_ERRORS:
                self._pending_errors.popitem(last=False)
                self.dropped_errors += 1
                self.store.add_counter(DROPPED_METRIC, {}, 1)
        # errors the store no longer holds cannot come back with a new count
        if len(self._acked_errors) > 4 * MAX_PENDING_ERRORS:
            live = {_error_key(e) for e in errors}
            self._acked_errors = {k: v for k, v in self._acked_errors.items() if k in live}

    def body(self, snap: StoreSnapshot) -> Tuple[bytes, Sent]:
        """(body bytes, what it carries) of a snapshot taken with
        encode=True: the series whose value changed, as the store encoded
        them, each with its state."""
        acked, values = self._acked_views, self._acked_values
        changed: List[bytes] = []
        present: List[Acked] = []
        for v in snap.series:
            hit = acked.get(id(v))
            if hit is not None and hit[0] is v:
                present.append(hit)  # the very series state the server has
                continue
            key, fp = v.created, v.fingerprint  # created: one number per series of the store
            if values.get(key) != fp:  # a new value (not just set again to the same)
                try:
                    changed.append(series_json(v, snap.max_frames))
                except (TypeError, ValueError, OverflowError):  # one the store could not serialize (it said so)
                    continue
            present.append((v, key, fp))
        errors = list(self._pending_errors.items())
        self.seq += 1
        context = dict(snap.context)
        head = {"schema": SCHEMA, "instance_id": context.get("instance.id"), "context": context,
                "profiler": {"version": __version__}, "start_ns": snap.start_ns, "ended_ns": snap.ended_ns,
                "exit_status": snap.exit_status, "payload_ns": snap.taken_ns, "seq": self.seq,
                "errors": [e for _, e in errors], "dropped_errors": self.dropped_errors}
        resources = list(snap.resources)
        res_fp = _resources_fingerprint(resources)
        if res_fp != self._acked_resources:
            head["resources"] = resources
        engine = engine_of(snap)
        engine_fp = dumps(engine)
        if engine_fp != self._acked_engine:
            head["engine"] = engine
        body = dumps(head)[:-1] + b',"metrics":[' + b",".join(changed) + b"]}"
        return body, (present, errors, res_fp, engine_fp)

    def _send(self, body: bytes, sent: Sent, now: float, timeout: Timeout) -> bool:
        data = gzip.compress(body, GZIP_LEVEL)
        if self.http is None:
            self.http = api.session(self.url)
        status: Optional[int]
        try:
            resp = self.http.post(self.url, data=data, timeout=timeout, allow_redirects=False, stream=True,
                                  headers={"X-API-Key": self.key, "Content-Type": "application/json",
                                           "Content-Encoding": "gzip",
                                           "User-Agent": "graphsignal/%s" % __version__})
            try:
                status = int(resp.status_code)
                detail = _detail(resp) if status >= 300 else None
                after = retry.retry_after(resp.headers.get("Retry-After"))
            finally:
                resp.close()
        except requests.RequestException as e:
            status, detail, after = None, _reason(e, timeout), None
        self.store.add_counter(BYTES_METRIC, {}, len(data))
        if status is not None and 200 <= status < 300:
            self._accepted(sent, now)
            return True
        self._failed(status, detail, now, after)
        return False

    # the retry state, as before it had its own module
    @property
    def failures(self) -> int:
        return int(self.retry.failures)

    @property
    def next_try(self) -> float:
        return float(self.retry.next_try)

    def _accepted(self, sent: Sent, now: float) -> None:
        present, errors, res_fp, engine_fp = sent
        # what the server now holds of every series present at that moment
        # (keeping only these drops series that went away)
        self._acked_views = {id(a[0]): a for a in present}
        self._acked_values = {a[1]: a[2] for a in present}
        for k, e in errors:
            self._acked_errors[k] = (e.get("count"), e.get("last_ns"))
            if self._pending_errors.get(k) is e:
                del self._pending_errors[k]
        self._acked_resources, self._acked_engine = res_fp, engine_fp
        self.accepted += 1
        self.store.add_counter(UPLOADS_METRIC, {"result": "accepted"}, 1)
        self.retry.succeeded(now)

    def _failed(self, status: Optional[int], detail: Optional[str], now: float, after: Optional[float] = None) -> None:
        self.store.add_counter(UPLOADS_METRIC, {"result": "failed"}, 1)
        reason = (detail or "") if status is None else "HTTP %d%s" % (status, " (%s)" % detail if detail else "")
        self.retry.failed(status, reason, now, after)


def _detail(resp: Any) -> Optional[str]:
    """The server's reason for a non-2xx answer, in one short line."""
    if resp.status_code in retry.AUTH_STATUSES:
        return "the API key was not accepted"
    if 300 <= resp.status_code < 400:
        return "redirects are not followed; set %s to the final URL" % api.ENV_API_BASE
    try:
        raw = resp.raw.read(2048, decode_content=True)
        err = jsonsafe.loads(raw, 8).get("error")
        return _one_line(err)[:200] if isinstance(err, str) else None
    except Exception:  # a body that is not our JSON error: the status says enough
        return None


_reason = retry.request_failure  # a request that got no answer, in a few words


def _one_line(e: Any) -> str:
    text = " ".join(str(e).split())
    return text[:300] + "..." if len(text) > 300 else text


def start(store: Any, key: Optional[str], base: Optional[str] = None) -> Optional[PeriodicDriver]:
    """The running uploader's driver, or None without a key
    (GRAPHSIGNAL_API_KEY; base: GRAPHSIGNAL_API_BASE's value, None for the
    default). A bad key or base is one log line and no uploads."""
    try:
        key = api_key(key)
        if key is None:
            return None
        base = api.api_base(base)
    except ValueError as e:
        logger.warning("graphsignal: %s", e)
        store.add_error("warning", str(e), tags={"source": "upload"})
        return None
    t = PeriodicDriver(Uploader(store, key, base))
    t.start()
    return t

