"""The Signals API as a Werkzeug app: make_app builds it from a DB and
the accepted keys (graphsignal-server serves it behind its own front,
graphsignal.fleet.serving; tests drive it with werkzeug.test.Client);
create_app, with no arguments, builds it from the environment
(graphsignal.fleet.settings) for a WSGI server:

  waitress-serve --port 18260 --threads 8 --call graphsignal.fleet.app:create_app
  gunicorn --workers 1 --threads 8 'graphsignal.fleet.app:create_app()'   (SQLite; PostgreSQL: --workers N)

  POST /api/v1/ingest                     an upload (graphsignal.sidecar.upload's body)
  GET  /api/v1/instances[?service=NAME]   {"instances": [{instance_id, context, first_seen_ns, last_seen_ns,
                                          start_ns, ended_ns, exit_status, gpus, service}]}, newest first (service: the
                                          run's service.name, else its engine or first program)
  GET  /api/v1/signals?instance_id=ID     the instance's latest snapshot, in /signals's shape
       [&window=N]                        ... plus `window` over the last N seconds (N >= 60)
  GET  /api/v1/history?instance_id=ID     the `history` block (graphsignal.timeline): the last N seconds
       [&seconds=N]                       (default a day), a point a second up to 15 minutes (the recent
                                          tier in memory, graphsignal.fleet.recent), else a minute
  GET  /, /static/NAME                    the fleet page (graphsignal/fleet/static: HTML, JS, the
                                          vendored uPlot), public: every data call it makes needs the key
  GET  /api/v1/version                    {"latest": "<this server's version>"} (the sidecar's version check)
  GET  /health                            {"status": "ok", ...}

Every /api/v1 call but version needs a known key in X-API-Key (or
Authorization: Bearer KEY); each key sees only the instances it uploaded.
Errors are JSON {"error": "..."}: 401 for a missing or unknown key, 400
for a bad body or query, 404 for an instance this key does not have,
405, 411 without Content-Length, 413 for a body over the caps, 503 with
Retry-After for an upload while the disk under the database is full
(nothing of it is stored; one line a minute says so while it lasts, one
when uploads are stored again).
"""
import logging
import threading
import time

import orjson
from werkzeug.wrappers import Request, Response

from graphsignal import __version__, findings, gctune
from graphsignal.fleet import ingest, pages
from graphsignal.fleet.storage import Full, NoSpace, Unavailable, owner_of
from graphsignal.fleet.history import DEFAULT_SECONDS, history
from graphsignal.fleet.recent import Recent
from graphsignal.fleet.windows import MIN_SECONDS, window

logger = logging.getLogger("graphsignal.fleet")

JSON = "application/json"
NOSNIFF = (("X-Content-Type-Options", "nosniff"),)
MAX_WINDOW = 7 * 86400
FULL_RETRY_AFTER = 60  # seconds an uploader waits while the disk is full (it keeps what it would send)
FULL_LINE_EVERY = 60.0  # seconds between lines while the disk stays full
DOWN_RETRY_AFTER = 10  # seconds a client waits while the database cannot be reached


def _json(obj, status=200):
    # nosniff as on the page: a browser must never read an answer (which echoes
    # what uploads sent) as anything but JSON
    return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status=status, mimetype=JSON,
                    headers=NOSNIFF)


def _error(message, status):
    return _json({"error": message}, status)


class DiskFull:
    """The lines about a full disk (or, with what="cannot be reached", a
    database that is down): the first refused request says it, then one
    line a minute at most (how many were refused since), and the first
    upload stored again says that. clock: monotonic seconds."""

    def __init__(self, path, clock=time.monotonic, what=None):
        self.path, self.clock, self.what = path, clock, what
        self.lock = threading.Lock()  # uploads of different keys fail at once
        self.refused = 0  # since the last line
        self.next_line = None  # clock seconds; None: not full

    def failed(self, why):
        with self.lock:
            self.refused += 1
            now = self.clock()
            if self.next_line is not None and now < self.next_line:
                return
            first = self.next_line is None
            self.next_line = now + FULL_LINE_EVERY
            n, self.refused = self.refused, 0
        if first and self.what:
            logger.warning("graphsignal-server: the database %s %s (%s): requests are answered 503 with "
                           "Retry-After until it answers", self.path, self.what, str(why).strip()[:300])
        elif first:
            logger.warning("graphsignal-server: the disk under %s is full (%s): uploads are answered 503 with "
                           "Retry-After until there is room", self.path, why)
        elif self.what:
            logger.warning("graphsignal-server: the database %s still %s: %d request%s answered 503 since "
                           "the last line", self.path, self.what, n, "" if n == 1 else "s")
        else:
            logger.warning("graphsignal-server: the disk under %s is still full: %d upload%s answered 503 since "
                           "the last line", self.path, n, "" if n == 1 else "s")

    def stored(self):
        if self.next_line is None:  # the common case, without the lock
            return
        with self.lock:
            if self.next_line is None:
                return
            self.next_line, n, self.refused = None, self.refused, 0
        logger.warning("graphsignal-server: uploads are stored again in %s (%d more answered 503 before)",
                       self.path, n)


def request_key(get):
    """A request's API key: X-API-Key, else Authorization: Bearer KEY, or
    None. get(name) -> the header's value or None (the app and the
    server's front, graphsignal.fleet.serving, read keys the same way)."""
    key = get("X-API-Key")
    if key is None:
        auth = get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            key = auth[7:]
    key = (key or "").strip()
    return key or None


def tenant_of(keys):
    """For the server's front: a request head -> the owner of its key when
    the key is accepted, else None."""
    owners = {owner_of(k) for k in keys}

    def of(head):
        key = request_key(head.get)
        if key is None:
            return None
        owner = owner_of(key)
        return owner if owner in owners else None

    return of


def make_app(db, keys, recent=None):
    """keys: the accepted API keys (strings); recent: the recent tier of
    per-second points (graphsignal.fleet.recent.Recent; a new one by
    default, none on a database several servers share: each replica's
    tier would hold only the uploads it took, and replicas must answer
    alike; False: none)."""
    owners = {owner_of(k) for k in keys}
    routes = {
        "/api/v1/ingest": ("POST", lambda req, owner: _ingest(req, owner)),
        "/api/v1/instances": ("GET", lambda req, owner: _instances(req, owner)),
        "/api/v1/signals": ("GET", lambda req, owner: _signals(req, owner)),
        "/api/v1/history": ("GET", lambda req, owner: _history(req, owner)),
    }
    files = pages.load()
    full = DiskFull(getattr(db, "path", "the database"))
    if recent is None and not getattr(db, "SHARED", False):
        recent = Recent()
    elif recent is False:  # none asked for: the stored history alone (tests comparing backends)
        recent = None
    down = DiskFull(getattr(db, "path", "the database"), what="cannot be reached")

    def app(environ, start_response):
        req = Request(environ)
        try:
            resp = _route(req)
        except Unavailable as e:  # PostgreSQL down or restarting: nothing was stored, ask again later
            down.failed(e)
            resp = _error("the database is unavailable: nothing was stored, send it again later", 503)
            resp.headers["Retry-After"] = str(DOWN_RETRY_AFTER)
        except Exception as e:  # a bug must cost one request, not the server
            logger.exception("graphsignal-server: %s %s failed", req.method, req.path)
            resp = _error("internal error: %s" % type(e).__name__, 500)
        return resp(environ, start_response)

    def _route(req):
        if req.path == "/health":
            return _json({"status": "ok", "version": __version__})
        if req.path == "/" or req.path.startswith("/static/"):
            if req.method not in ("GET", "HEAD"):
                return _error("method not allowed: use GET", 405)
            return pages.response(files, "index.html" if req.path == "/" else req.path[len("/static/"):])
        if req.path == "/api/v1/version":
            if req.method not in ("GET", "HEAD"):
                return _error("method not allowed: use GET", 405)
            return _json({"latest": __version__})
        route = routes.get(req.path)
        if route is None:
            return _error("not found: %s (endpoints: %s, /api/v1/version, /health)"
                          % (req.path, ", ".join(sorted(routes))), 404)
        method, handler = route
        if req.method != method and not (method == "GET" and req.method == "HEAD"):
            return _error("method not allowed: use %s" % method, 405)
        key = request_key(req.headers.get)
        if not key:
            return _error("missing API key: send it in the X-API-Key header", 401)
        owner = owner_of(key)
        if owner not in owners:
            return _error("unknown API key", 401)
        return handler(req, owner)

    def _ingest(req, owner):
        n = req.content_length
        if n is None:
            return _error("Content-Length is required", 411)
        if n > ingest.MAX_BODY:
            return _error("body of %d bytes is over the %d MiB cap" % (n, ingest.MAX_BODY >> 20), 413)
        raw = req.get_data(cache=False)
        try:
            doc = ingest.validate(ingest.decode(raw, req.headers.get("Content-Encoding")))
        except ingest.BadBody as e:
            return _error(str(e), e.status)
        try:
            out = db.ingest(owner, doc)
        except Full as e:
            return _error(str(e), 429)
        except NoSpace as e:  # not the server's fault nor the upload's: it may come again
            full.failed(e)
            resp = _error("the server's disk is full: nothing was stored, send it again later", 503)
            resp.headers["Retry-After"] = str(FULL_RETRY_AFTER)
            return resp
        full.stored()
        down.stored()
        if recent is not None:
            recent.add(owner, doc["instance_id"], doc, lambda: db.snapshot_states(owner, doc["instance_id"]))
        return _json(out)

    def _instances(req, owner):
        unknown = sorted(set(req.args) - {"service"})
        if unknown:
            return _error("unknown query parameter(s): %s (known: service)" % ", ".join(unknown), 400)
        return _json({"instances": db.instances(owner, req.args.get("service"))})

    def _instance(req, owner, name, default):
        """(instance id, seconds from the `name` parameter or default, its
        snapshot, its states) of a read of one instance, or an error
        response."""
        known = ("instance_id", name)
        unknown = sorted(set(req.args) - set(known))
        if unknown:
            return _error("unknown query parameter(s): %s (known: %s)" % (", ".join(unknown), ", ".join(known)),
                          400)
        iid = req.args.get("instance_id")
        if not iid:
            return _error("instance_id is required (GET /api/v1/instances lists them)", 400)
        seconds = default
        if name in req.args:
            raw = req.args.get(name)
            if not (raw.isascii() and raw.isdigit()) or not MIN_SECONDS <= int(raw) <= MAX_WINDOW:
                what = "window must be a whole number of seconds" if name == "window" else \
                    "%s must be a whole number" % name
                return _error("%s between %d and %d, got %r" % (what, MIN_SECONDS, MAX_WINDOW, raw), 400)
            seconds = int(raw)
        snap, states = db.snapshot_states(owner, iid) if seconds is not None else (db.snapshot(owner, iid), {})
        if snap is None:
            return _error("no instance %r for this key" % iid, 404)
        return iid, seconds, snap, states

    def _signals(req, owner):
        got = _instance(req, owner, "window", None)
        if not isinstance(got, tuple):
            return got
        iid, seconds, snap, states = got
        if seconds is not None:
            snap["window"] = window(db, owner, iid, snap, states, seconds)
        snap["findings"] = findings.compute(snap)  # the sidecar's rules, over the same snapshot (and window)
        return _json(snap)

    def _history(req, owner):
        got = _instance(req, owner, "seconds", DEFAULT_SECONDS)
        if not isinstance(got, tuple):
            return got
        iid, seconds, snap, states = got
        return _json({"instance_id": iid, "history": history(db, owner, iid, snap, states, seconds, recent)})

    return app


def create_app(environ=None):
    """The app for a WSGI server, configured by the environment
    (graphsignal.fleet.settings: the keys, the key file, the database, the
    retention, the sync mode), checked as graphsignal-server checks them.
    Raises settings.SettingError with one line for a value that cannot be
    used (or no key at all), and for a database that cannot be opened, so
    the server stops at start instead of answering errors.

    On the SQLite file, one process: the file takes one writer at a time
    and this app holds it under one lock, so threads (waitress --threads,
    gunicorn --workers 1 --threads N), not processes, answer requests at
    once. On PostgreSQL (GRAPHSIGNAL_SERVER_DB=postgresql://...), any
    number of processes, on any number of machines.
    The app enforces its own caps (413 over ingest.MAX_BODY, 411 without
    Content-Length, gzip expanding past ingest.MAX_JSON); timeouts are the
    WSGI server's (README)."""
    import atexit
    import os
    import sqlite3

    from graphsignal.fleet import settings

    environ = os.environ if environ is None else environ
    try:
        cfg = settings.resolve(environ)
    except settings.SettingError as e:
        raise settings.SettingError("graphsignal-server: %s" % e) from None
    if not cfg.api_keys:
        raise settings.SettingError("graphsignal-server: " + settings.no_keys_message())
    try:
        db, path = settings.open_db(cfg, environ)
    except (OSError, RuntimeError, sqlite3.Error, Unavailable) as e:
        where = cfg.db or settings.default_db(environ)
        if settings.is_postgresql(where):
            where = settings.redacted(where)
        raise settings.SettingError("graphsignal-server: cannot open the database %s: %s" % (where, e))
    gctune.tune()
    atexit.register(db.close)
    logger.info("graphsignal-server %s: the Signals API for a WSGI server (database %s, %d key%s)",
                __version__, path, len(cfg.api_keys), "" if len(cfg.api_keys) == 1 else "s")
    return make_app(db, cfg.api_keys)
