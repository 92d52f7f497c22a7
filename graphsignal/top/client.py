"""The /signals client of graphsignal-top, and the snapshot thread that
polls it.

fetch() never raises for the failures a person can fix (nothing listening,
wrong host, timeout, a sidecar without windows): it returns (payload,
error, note) so the screen can say what is wrong and try again.
"""
import socket
import threading
import time
import urllib.error
import urllib.request

import orjson

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 18259
TIMEOUT = 2.0  # seconds: a refresh a second must not hang on a dead host


def signals_url(host, port, window=None):
    h = "[%s]" % host if ":" in host and not host.startswith("[") else host
    url = "http://%s:%d/signals" % (h, port)
    return url + ("?window=%d" % window if window else "")


def _get(url, timeout):
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    # no proxies: the endpoint is local or on the operator's own network
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as resp:
        return resp.read()


def _reason(e):
    if isinstance(e, urllib.error.HTTPError):
        try:
            detail = orjson.loads(e.read()).get("error")
        except Exception:  # the body is whatever the server sent; the status is enough
            detail = None
        return "HTTP %d%s" % (e.code, (": " + detail) if detail else "")
    if isinstance(e, urllib.error.URLError):
        r = e.reason
        if isinstance(r, ConnectionRefusedError):
            return "connection refused (is graphsignal-run running with this --listen-port?)"
        if isinstance(r, socket.gaierror):
            return "unknown host (%s)" % (r.strerror or r)
        if isinstance(r, (socket.timeout, TimeoutError)):
            return "timed out"
        return str(r)
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, ConnectionError):
        return "connection lost (%s)" % type(e).__name__
    return "%s: %s" % (type(e).__name__, e)


def fetch(host, port, window=None, timeout=TIMEOUT):
    """(payload dict or None, error text or None, note or None). A sidecar
    that refuses ?window (older versions) is asked again without it."""
    try:
        data = _get(signals_url(host, port, window), timeout)
    except urllib.error.HTTPError as e:
        if e.code == 400 and window:
            try:
                data = _get(signals_url(host, port), timeout)
            except (urllib.error.URLError, OSError, ValueError) as e2:
                return None, _reason(e2), None
            payload, err = _parse(data)
            return payload, err, "this endpoint has no windows (%s); rates are unavailable" % _reason(e)
        return None, _reason(e), None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, _reason(e), None
    payload, err = _parse(data)
    return payload, err, None


def _parse(data):
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return None, "not a /signals payload (%s)" % e
    if not isinstance(payload, dict) or "metrics" not in payload:
        return None, "not a /signals payload (no metrics)"
    return payload, None


class SnapshotThread(threading.Thread):
    """Fetches every `interval` seconds and hands each result to
    state.update(); `seq` counts updates so the screen knows when to draw."""

    def __init__(self, state, host, port, window, interval=1.0, fetcher=fetch):
        threading.Thread.__init__(self, name="graphsignal-top-snapshot", daemon=True)
        self.state = state
        self.host, self.port, self.window = host, port, window
        self.interval = interval
        self.fetcher = fetcher
        self.seq = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            t0 = time.monotonic()
            self.refresh()
            self._halt.wait(max(0.05, self.interval - (time.monotonic() - t0)))

    def refresh(self):
        payload, error, note = self.fetcher(self.host, self.port, self.window)
        try:
            self.state.update(payload, error, note)
        except Exception as e:  # a payload we cannot read must not end the screen
            self.state.update(None, "cannot show this payload: %s: %s" % (type(e).__name__, e))
        self.seq += 1

    def stop(self):
        self._halt.set()
