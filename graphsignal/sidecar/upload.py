"""The uploader: with GRAPHSIGNAL_API_KEY set, new signals go to
${GRAPHSIGNAL_API_BASE:-https://api.graphsignal.com}/api/v1/ingest once a
second. Without the key nothing here runs and nothing connects anywhere.

Each upload is one POST (X-API-Key, Content-Type: application/json,
Content-Encoding: gzip) of:

    {"schema": 1,
     "instance_id": "...",            # context["instance.id"]
     "context": {...},                # /signals's context
     "profiler": {"version": ...},
     "start_ns": ..., "payload_ns": ...,
     "seq": 7,                        # attempt number of this run, from 1
     "metrics": [...],                # series whose value changed since the last accepted upload, in
                                      # /signals's shape (one set again to the same value is not resent,
                                      # so its updated_ns on the server is when its value last changed)
     "errors": [...],                 # new errors, and errors whose count grew, since then
     "resources": [...],              # only when they changed (last_seen_ts aside)
     "engine": {...},                 # the engine summary, when it changed
     "dropped_errors": 0}             # errors the buffer dropped so far (cumulative)

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
upload with a deadline of 2 s. Counters in the store say how it goes:
graphsignal_uploads_total (tag result: accepted / failed),
graphsignal_upload_bytes_total (compressed bytes sent) and
graphsignal_upload_dropped_errors_total.
"""
import collections
import gzip
import logging
import random
import threading
import time

import requests

from graphsignal import __version__, config, jsonsafe
from graphsignal.report import Reporter
from graphsignal.sidecar import api, retry
from graphsignal.sidecar.series import dumps
from graphsignal.sidecar.snapshot import series_content, signals_snapshot_encoded

logger = logging.getLogger("graphsignal")

ENV_API_KEY = config.API_KEY_ENV
INGEST_PATH = "/api/v1/ingest"
SCHEMA = 1
INTERVAL = 1.0  # seconds between uploads
BACKOFF_MIN, BACKOFF_MAX = retry.BASE, retry.CAP  # seconds: the range of the first and the longest draw
CONNECT_TIMEOUT, READ_TIMEOUT = 2.0, 3.0  # seconds
FINAL_DEADLINE = 2.0  # seconds for the last upload at exit
MAX_PENDING_ERRORS = 1000
GZIP_LEVEL = 3  # the first body carries every series: fast beats small

UPLOADS_METRIC = "graphsignal_uploads_total"
BYTES_METRIC = "graphsignal_upload_bytes_total"
DROPPED_METRIC = "graphsignal_upload_dropped_errors_total"


def api_key(given):
    """The key (config.Settings.api_key), or None when uploads are off.
    Raises ValueError for a key an HTTP header cannot carry."""
    key = (given or "").strip()
    if not key:
        return None
    if not key.isprintable() or not key.isascii():
        raise ValueError("%s holds characters an HTTP header cannot carry; not uploading" % ENV_API_KEY)
    return key


def _error_key(e):
    return dumps((e.get("timestamp_ns"), e.get("level"), e.get("message"), e.get("exception"), e.get("tags")))


def _resources_fingerprint(resources):
    return dumps([{k: v for k, v in r.items() if k != "last_seen_ts"} for r in resources])


class Uploader:
    """Builds and sends upload bodies; step() is one cycle (the thread
    calls it once a second), so tests drive it with their own clock."""

    def __init__(self, store, key, base, clock=time.monotonic, snapshot=signals_snapshot_encoded, http=None,
                 rand=random.random):
        self.store = store
        self.key = key
        self.url = base + INGEST_PATH
        self.shown_url = config.shown_url(self.url)  # for lines and entries: no credentials
        self.clock = clock
        self.snapshot = snapshot
        self.http = http
        self.seq = 0
        self.retry = retry.Retry("uploads to %s" % self.shown_url,
                                 "the API key was not accepted (check %s)" % ENV_API_KEY, store, "upload", clock, rand)
        self.accepted = 0
        self.dropped_errors = 0
        # the encoded series of accepted uploads, by identity (the store hands
        # out the same bytes object until a series changes), and what they
        # held (a series set again to the same value is not sent again)
        self._acked_metrics = {}  # id(bytes) -> (bytes, content)
        self._acked_contents = set()
        self._acked_errors = {}  # error key -> (count, last_ns) accepted
        self._pending_errors = collections.OrderedDict()  # error key -> entry, oldest first
        self._acked_resources = None
        self._acked_engine = None

    # -- one cycle -------------------------------------------------------------------
    def step(self, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), force=False):
        """Collects what is new; uploads it unless backing off (force: try
        anyway, the final upload). Returns True when an upload was accepted."""
        snap, metrics = self.snapshot(self.store)
        self._collect_errors(snap["errors"])
        now = self.clock()
        if not force and not self.retry.due(now):
            return False
        body, sent = self._body(snap, metrics)
        return self._send(body, sent, now, timeout)

    def _collect_errors(self, errors):
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

    def _body(self, snap, metrics):
        """(body bytes, what it carries). The changed series go in as the
        store encoded them, never decoded here."""
        acked, contents = self._acked_metrics, self._acked_contents
        changed, present = [], []
        for m in metrics:
            hit = acked.get(id(m))
            if hit is not None and hit[0] is m:
                present.append(hit)  # the very series state the server has
                continue
            c = series_content(m)
            present.append((m, c))
            if c not in contents:  # a new value (not just set again to the same)
                changed.append(m)
        errors = list(self._pending_errors.items())
        self.seq += 1
        context = snap.get("context") or {}
        head = {"schema": SCHEMA, "instance_id": context.get("instance.id"), "context": context,
                "profiler": snap.get("profiler"), "start_ns": snap.get("start_ns"),
                "ended_ns": snap.get("ended_ns"), "exit_status": snap.get("exit_status"),
                "payload_ns": snap.get("payload_ns"), "seq": self.seq,
                "errors": [e for _, e in errors], "dropped_errors": self.dropped_errors}
        res_fp = _resources_fingerprint(snap.get("resources") or [])
        if res_fp != self._acked_resources:
            head["resources"] = snap.get("resources") or []
        engine_fp = dumps(snap.get("engine"))
        if engine_fp != self._acked_engine:
            head["engine"] = snap.get("engine")
        body = dumps(head)[:-1] + b',"metrics":[' + b",".join(changed) + b"]}"
        return body, (present, errors, res_fp, engine_fp)

    def _send(self, body, sent, now, timeout):
        data = gzip.compress(body, GZIP_LEVEL)
        if self.http is None:
            self.http = api.session(self.url)
        try:
            resp = self.http.post(self.url, data=data, timeout=timeout, allow_redirects=False, stream=True,
                                  headers={"X-API-Key": self.key, "Content-Type": "application/json",
                                           "Content-Encoding": "gzip",
                                           "User-Agent": "graphsignal/%s" % __version__})
            try:
                status = resp.status_code
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
    def failures(self):
        return self.retry.failures

    @property
    def next_try(self):
        return self.retry.next_try

    def _accepted(self, sent, now):
        present, errors, res_fp, engine_fp = sent
        # what the server now holds of every series present at that moment
        # (keeping only these drops series that went away)
        self._acked_metrics = {id(mc[0]): mc for mc in present}
        self._acked_contents = {c for _, c in present}
        for k, e in errors:
            self._acked_errors[k] = (e.get("count"), e.get("last_ns"))
            if self._pending_errors.get(k) is e:
                del self._pending_errors[k]
        self._acked_resources, self._acked_engine = res_fp, engine_fp
        self.accepted += 1
        self.store.add_counter(UPLOADS_METRIC, {"result": "accepted"}, 1)
        self.retry.succeeded(now)

    def _failed(self, status, detail, now, after=None):
        self.store.add_counter(UPLOADS_METRIC, {"result": "failed"}, 1)
        reason = detail if status is None else "HTTP %d%s" % (status, " (%s)" % detail if detail else "")
        self.retry.failed(status, reason, now, after)


def _detail(resp):
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


def _one_line(e):
    text = " ".join(str(e).split())
    return text[:300] + "..." if len(text) > 300 else text


class UploaderThread(threading.Thread):
    """Runs an Uploader once a second; stop() makes one last upload within
    a deadline."""

    def __init__(self, uploader, interval=INTERVAL):
        threading.Thread.__init__(self, name="graphsignal-upload", daemon=True)
        self.uploader = uploader
        self.interval = interval
        self._halt = threading.Event()
        self._deadline = None
        self._reporter = Reporter()

    def run(self):
        while not self._halt.wait(self.interval):
            self._step()
        remaining = (self._deadline or 0) - time.monotonic()
        if remaining > 0.05:
            self._step(timeout=(min(CONNECT_TIMEOUT, remaining), remaining), force=True)

    def _step(self, **kw):
        try:
            self.uploader.step(**kw)
        except Exception as e:  # a bug here must not take the sidecar down: say it once, go on
            self._reporter.once("step", "upload failed: %s: %s" % (type(e).__name__, e), entry=False)

    def stop(self, deadline=FINAL_DEADLINE):
        """Asks for the final upload and waits for it at most `deadline`
        seconds; the thread is a daemon, so a hung request is left behind."""
        self._deadline = time.monotonic() + deadline
        self._halt.set()
        if self.is_alive():
            self.join(deadline + 0.1)


def start(store, key, base=None):
    """The running uploader thread, or None without a key
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
    t = UploaderThread(Uploader(store, key, base))
    t.start()
    return t
