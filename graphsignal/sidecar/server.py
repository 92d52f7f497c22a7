"""The Werkzeug app serving /signals and /health, and the thread that
serves it.

make_app(state) builds a plain WSGI callable from what it serves, so tests
drive it with werkzeug.test.Client; ServerThread binds and serves it,
retrying a busy port in the background so the workload never waits.

The endpoint guards itself. A request whose Host header names neither
this machine's loopback (localhost, 127.0.0.0/8, ::1) nor, with
--listen-host, the bound host (its name, its addresses, and for 0.0.0.0 /
:: every name and address of this machine) gets 403: a web page the user
visits cannot read /signals by pointing its own DNS name at 127.0.0.1
(DNS rebinding). Names given with --allow-host (GRAPHSIGNAL_ALLOW_HOSTS)
pass too, e.g. the Kubernetes Service name Prometheus scrapes through;
--allow-host '*' turns the check off, with one warning line. Connections
idle for IDLE_TIMEOUT seconds are closed, so idle clients cannot hold the
server's threads.
"""
import errno
import hmac
import ipaddress
import logging
import socket
import threading
import time

import orjson
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from graphsignal import __version__
from graphsignal.config import ALLOW_HOSTS_ENV, ANY_HOST, SIGNALS_TOKEN_ENV
from graphsignal.httpserve import QuietHandler
from graphsignal.sidecar.payload import build_signals
from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")

JSON = "application/json"
IDLE_TIMEOUT = 15.0  # seconds a connection may sit without a request (or a stalled read or write)
# seconds between the serving loop's looks at whether stop() was called; stop() also wakes it
# at once (a connection to it), so this only bounds a stop whose wake-up cannot connect
POLL_INTERVAL = 2.0
LOOPBACK_NAMES = frozenset(("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"))
WILDCARD_HOSTS = frozenset(("", "0.0.0.0", "::", "*"))


def _json(obj, status=200):
    return Response(orjson.dumps(obj), status=status, mimetype=JSON)


def _host_of(header):
    """The host part of a Host header ('[::1]:80' -> '::1'), lowercased."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else h
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _canonical(host):
    """An address as config.allowed_host writes it (IPv6 compressed); a
    name as it is."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _is_loopback(host):
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class HostGuard:
    """Which Host headers the endpoint answers (see the module docstring).
    Loopback names and addresses always; for another bind, the names and
    addresses resolve() finds (it may ask DNS: call it off the workload's
    path, before serving). extra: names and addresses allowed besides
    (Settings.allow_hosts, as config.allowed_host checked them);
    config.ANY_HOST among them allows every Host (any_host)."""

    def __init__(self, listen_host, extra=()):
        self.listen_host = (listen_host or "").strip().lower().strip("[]")
        self.any_host = ANY_HOST in extra
        self.allowed = {_canonical(n) for n in extra if n != ANY_HOST}
        self.loopback_only = _is_loopback(self.listen_host)
        if not self.loopback_only and self.listen_host not in WILDCARD_HOSTS:
            self.allowed.add(self.listen_host)

    def resolve(self):
        if self.loopback_only:
            return
        names = set()
        if self.listen_host in WILDCARD_HOSTS:
            names.update(_machine_names())
            self.allowed.update(_interface_addresses())
        else:
            try:
                addrs = {ai[4][0] for ai in socket.getaddrinfo(self.listen_host, None)}
            except OSError:
                addrs = set()
            self.allowed.update(a.lower() for a in addrs)
            # this machine's names, when they resolve to the bound address
            for name in _machine_names():
                try:
                    if {ai[4][0] for ai in socket.getaddrinfo(name, None)} & addrs:
                        names.add(name)
                except OSError:
                    pass
            for a in addrs:
                try:
                    host, aliases, _ = socket.gethostbyaddr(a)
                    names.update([host] + list(aliases))
                except OSError:
                    pass
        self.allowed.update(n.lower().rstrip(".") for n in names if n)

    def allows(self, header):
        if header is None or self.any_host:
            return True  # HTTP/1.0 without Host: not a browser, which always sends one
        host = _host_of(header)
        return _is_loopback(host) or _canonical(host) in self.allowed


def _machine_names():
    out = {socket.gethostname()}
    try:
        out.add(socket.getfqdn())
    except OSError:
        pass
    return {n for n in out if n}


def _interface_addresses():
    try:
        import psutil

        return {a.address.split("%", 1)[0].lower() for addrs in psutil.net_if_addrs().values() for a in addrs
                if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:
        return set()


class ReadGate:
    """Renders at most `renders` reads at once, and hands a read the answer
    of an identical one that began after it arrived instead of rendering
    it again.

    Why: the sidecar is one Python process, and every thread that runs
    Python takes turns at one interpreter lock. Fifty readers rendering at
    once would give the poller one turn in fifty-one, and its rings fill
    (issue 36: 20-29 % of the records dropped). Waiting here costs no turn
    (the semaphore blocks outside the interpreter), so however many read,
    the drain competes with `renders` renders, and the readers that wait
    share what the next render makes: an answer rendered after a request
    arrived is as fresh as one rendered for it. Memory: at most `keep`
    answers are kept."""

    def __init__(self, renders=1, keep=4, monotonic=time.monotonic):
        self._renders = threading.Semaphore(renders)
        self._lock = threading.Lock()
        self._done = {}  # key -> (monotonic start of its render, answer)
        self.keep = keep
        self.monotonic = monotonic
        self.rendered = 0  # renders made (the rest were shared)

    def read(self, key, render):
        """render()'s answer for key: made now, or one whose render started
        after this call did."""
        arrived = self.monotonic()
        with self._renders:
            with self._lock:
                hit = self._done.get(key)
            if hit is not None and hit[0] >= arrived:
                return hit[1]
            started = self.monotonic()
            answer = render()
            with self._lock:
                self.rendered += 1
                self._done.pop(key, None)
                self._done[key] = (started, answer)
                while len(self._done) > self.keep:
                    del self._done[next(iter(self._done))]  # the oldest
            return answer


def make_app(store, windows=None, host_guard=None, exposition=None, token=None, gate=None):
    """windows: optional callable(store, seconds) -> dict added to the
    payload for ?window=N (see graphsignal.sidecar.windows). host_guard: a
    HostGuard; requests it does not allow get 403. exposition: what
    serves /metrics (graphsignal.sidecar.exposition.Exposition; default:
    one for this store without engine metrics). token: when set
    (GRAPHSIGNAL_SIGNALS_TOKEN), /signals and /metrics answer only
    requests with "Authorization: Bearer <token>" (401 otherwise);
    /health stays open (it tells only that a profiler runs). gate: the
    ReadGate that /signals and /metrics render through (default: one
    render at a time), so readers never crowd out the drain."""
    expected = ("Bearer " + token).encode() if token else None
    if gate is None:
        gate = ReadGate()
    if exposition is None:
        from graphsignal.sidecar.exposition import Exposition

        exposition = Exposition(store)

    def app(environ, start_response):
        req = Request(environ)
        if host_guard is not None and not host_guard.allows(environ.get("HTTP_HOST")):
            resp = _json({"error": "host %r is not allowed: use a loopback address or the --listen-host this "
                                   "profiler was started with, or start it with --allow-host NAME (%s) for "
                                   "another name" % (environ.get("HTTP_HOST"), ALLOW_HOSTS_ENV)}, 403)
        elif req.method not in ("GET", "HEAD"):
            resp = _json({"error": "method not allowed: use GET"}, 405)
        elif expected is not None and req.path in ("/signals", "/metrics") and not hmac.compare_digest(
                (environ.get("HTTP_AUTHORIZATION") or "").encode("latin-1", "replace"), expected):
            resp = _json({"error": "this profiler asks for a token: send Authorization: Bearer <token> (%s)"
                                   % SIGNALS_TOKEN_ENV}, 401)
            resp.headers["WWW-Authenticate"] = 'Bearer realm="graphsignal"'
        elif req.path == "/signals":
            resp = _signals(req)
        elif req.path == "/metrics":
            resp = _metrics(req)
        elif req.path == "/health":
            resp = _json({"status": "ok", "profiler": {"version": __version__},
                          "uptime_ns": store.clock() - store.start_ns})
        else:
            resp = _json({"error": "not found: %s (endpoints: /signals, /metrics, /health)" % req.path}, 404)
        # a browser never reads an answer as anything but its declared type (as graphsignal-server's answers)
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp(environ, start_response)

    def _metrics(req):
        engine = req.args.get("engine")
        if engine not in (None, "0", "1"):
            return _json({"error": "engine must be 0 or 1, got %r" % engine}, 400)
        accept = req.headers.get("Accept")
        body, content_type = gate.read(("metrics", engine, accept), lambda: exposition.render(
            accept, None if engine is None else engine == "1"))
        return Response(body, content_type=content_type)

    def _signals(req):
        unknown = sorted(set(req.args) - {"window", "history"})
        if unknown:
            return _json({"error": "unknown query parameter(s): %s (known: window, history)" % ", ".join(unknown)},
                         400)
        # the answer's parts, not the Response: one Response is not served twice
        status, body, mimetype = gate.read(("signals", req.query_string), lambda: _frozen(_render_signals(req)))
        return Response(body, status=status, mimetype=mimetype)

    def _frozen(resp):
        return resp.status_code, resp.get_data(), resp.mimetype

    def _render_signals(req):
        extra = None
        if "window" in req.args:
            if windows is None:
                return _json({"error": "windows are not available"}, 400)
            raw_all = req.args.getlist("window")
            raw = raw_all[0]
            if len(raw_all) > 1:
                return _json({"error": "give window once, got %d values" % len(raw_all)}, 400)
            if not (raw.isascii() and raw.isdigit()):
                return _json({"error": "window must be a whole number of seconds, got %r" % raw}, 400)
            seconds = int(raw)
            limit = store.history_seconds
            if not 1 <= seconds <= limit:
                return _json({"error": "window must be between 1 and %d seconds, got %d" % (limit, seconds)}, 400)
            extra = {"window": windows(store, seconds)}
        if "history" in req.args:
            seconds = _seconds_arg(req, "history", store.history_seconds)
            if isinstance(seconds, Response):
                return seconds
            from graphsignal.sidecar.history_block import history_stats

            extra = dict(extra or {}, history=history_stats(store, seconds))
        return Response(build_signals(store, extra), mimetype=JSON)

    def _seconds_arg(req, name, limit):
        """?name=N as whole seconds from 1 to limit, or the 400 Response."""
        raw_all = req.args.getlist(name)
        raw = raw_all[0]
        if len(raw_all) > 1:
            return _json({"error": "give %s once, got %d values" % (name, len(raw_all))}, 400)
        if not (raw.isascii() and raw.isdigit()):
            return _json({"error": "%s must be a whole number of seconds, got %r" % (name, raw)}, 400)
        seconds = int(raw)
        if not 1 <= seconds <= limit:
            return _json({"error": "%s must be between 1 and %d seconds, got %d" % (name, limit, seconds)}, 400)
        return seconds

    return app


class ServerThread(threading.Thread):
    """Serves app on (host, port). A busy port is retried every
    retry_interval seconds for up to retry_seconds, with one log line; the
    workload runs regardless."""

    def __init__(self, app, host, port, retry_seconds=60.0, retry_interval=1.0, on_error=None, host_guard=None,
                 idle_timeout=IDLE_TIMEOUT):
        threading.Thread.__init__(self, name="graphsignal-server", daemon=True)
        self.app, self.host, self.port = app, host, port
        self.requested_port = port
        self.retry_seconds, self.retry_interval = retry_seconds, retry_interval
        self.on_error = on_error
        self.reporter = Reporter(on_error=on_error)
        self.host_guard = host_guard
        self.handler = type("Handler", (QuietHandler,), {"timeout": idle_timeout})
        self.server = None
        self.bound = threading.Event()
        self.failed = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._serving = False

    def run(self):
        deadline = time.monotonic() + self.retry_seconds
        warned = False
        while not self._halt.is_set():
            try:
                self.server = self._make_server()
                break
            except OSError as e:
                busy = e.errno == errno.EADDRINUSE
                msg = ("port %d on %s is in use; /signals is not served yet (retrying for %ds; "
                       "pick another with --listen-port)" % (self.port, self.host, self.retry_seconds)
                       if busy else "cannot serve /signals on %s:%d: %s" % (self.host, self.port, e))
                if not warned:
                    warned = True
                    self.reporter.say(msg)
                if not busy or time.monotonic() >= deadline:
                    self.failed = msg
                    if busy:
                        self.reporter.say("gave up on port %d on %s: still in use; /signals is not served" % (
                            self.port, self.host))
                    self.bound.set()
                    return
                self._halt.wait(self.retry_interval)
        with self._lock:
            # stop() may have come while we were binding: then never serve
            if self.server is None or self._halt.is_set():
                self.bound.set()
                return
            self.port = self.server._graphsignal_sock.getsockname()[1]
        if self.host_guard is not None and self.host_guard.any_host:
            logger.warning("graphsignal: --allow-host '*': the Host check of %s is off; a web page can read it "
                           "through a name of its own that resolves to this address (DNS rebinding)",
                           self.url("/signals"))
        elif self.host_guard is not None:
            try:
                self.host_guard.resolve()
            except Exception as e:  # loopback names stay allowed
                logger.warning("graphsignal: cannot look up the names of %s: %s", self.host, e)
        with self._lock:
            if self._halt.is_set():
                self.bound.set()
                return
            self._serving = True
        # Once, and loud enough to be seen by default when the port was
        # left to the system (--listen-port 0): there is no other way to learn it.
        logger.log(logging.WARNING if self.requested_port == 0 else logging.INFO,
                   "graphsignal: serving %s", self.url("/signals"))
        self.bound.set()
        self.server.serve_forever(poll_interval=POLL_INTERVAL)

    def url(self, path=""):
        host = self.host if self.host not in WILDCARD_HOSTS else socket.gethostname()
        if ":" in host:
            host = "[%s]" % host
        return "http://%s:%d%s" % (host, self.port, path)

    def _make_server(self):
        # Bind the socket ourselves: werkzeug reports a busy port by printing
        # to stderr and exiting, which would land in the workload's console.
        family, stype, proto, _, addr = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, stype, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(128)
            srv = make_server(self.host, sock.getsockname()[1], self.app, threaded=True, fd=sock.fileno(),
                              request_handler=self.handler)
        except BaseException:
            sock.close()
            raise
        srv._graphsignal_sock = sock  # keep the listening socket alive with the server
        return srv

    def stop(self):
        with self._lock:
            self._halt.set()
            serving = self._serving
        if serving:
            done = threading.Event()
            threading.Thread(target=self._wake_until, args=(done,), name="graphsignal-server-wake",
                             daemon=True).start()
            self.server.shutdown()  # returns once serve_forever has stopped
            done.set()
        if self.server is not None:
            self.server.server_close()
        self.join(5)

    def _wake_until(self, done, every=0.02):
        """Connects to the server every `every` seconds until `done`: the
        serving loop waits for a connection (POLL_INTERVAL at most), and
        one that comes after shutdown() asked it to stop ends the wait."""
        host = self.host if self.host not in WILDCARD_HOSTS else (
            "::1" if ":" in self.host else "127.0.0.1")
        while not done.wait(every):
            try:
                socket.create_connection((host, self.port), timeout=0.5).close()
            except OSError:
                pass
