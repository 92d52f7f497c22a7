"""The /signals client of graphsignal-top, and the snapshot thread that
polls it.

fetch() never raises for the failures a person can fix (nothing listening,
wrong host, timeout, a sidecar without windows) nor for a hostile or broken
endpoint (garbage, a body without end, one byte a second): it returns
(payload, error, note) so the screen can say what is wrong in one line and
try again. Reads are bounded by graphsignal.httpfetch: TIMEOUT per connect
or read, DEADLINE per fetch (both its requests, when a sidecar without
windows is asked again), httpfetch.MAX_BYTES per body.
"""
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from graphsignal import config, httpfetch
from graphsignal.textsafe import clean

DEFAULT_HOST = config.DEFAULT_LISTEN_HOST
DEFAULT_PORT = config.DEFAULT_LISTEN_PORT
TIMEOUT = 2.0  # seconds: a refresh a second must not hang on a dead host
DEADLINE = 5.0  # seconds for a whole answer, however slowly it trickles (graphsignal-top --timeout)


def signals_url(host: str, port: int, window: Optional[int] = None) -> str:
    h = "[%s]" % host if ":" in host and not host.startswith("[") else host
    url = "http://%s:%d/signals" % (h, port)
    return url + ("?window=%d" % window if window else "")


Fetched = Tuple[Optional[Dict[str, Any]], Optional[str], Optional[str]]  # (payload, error, note)


def fetch(host: str, port: int, window: Optional[int] = None, timeout: float = TIMEOUT,
          deadline: Optional[float] = None) -> Fetched:
    """(payload dict or None, error text or None, note or None). A sidecar
    that refuses ?window (older versions) is asked again without it.
    `deadline` (default: DEADLINE, read at each call) bounds the whole
    fetch, that second request included."""
    deadline = DEADLINE if deadline is None else deadline
    since = time.monotonic()
    try:
        data = httpfetch.get(signals_url(host, port, window), timeout, deadline, since=since)
    except httpfetch.FetchError as e:
        if e.status == 400 and window:
            try:
                data = httpfetch.get(signals_url(host, port), timeout, deadline, since=since)
            except httpfetch.FetchError as e2:
                return None, str(e2), None
            payload, err = _parse(data)
            return payload, err, "this endpoint has no windows (%s); rates are unavailable" % e
        return None, str(e), None
    payload, err = _parse(data)
    return payload, err, None


def cannot_show(e: Exception) -> str:
    """One line for an exception raised while reading a payload (a foreign
    or hostile endpoint's JSON of the right outline and the wrong insides)."""
    return "cannot show this payload: %s: %s" % (type(e).__name__, clean(str(e))[:200])


def _parse(data: Union[bytes, bytearray]) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    try:
        return httpfetch.parse_signals(data), None
    except httpfetch.FetchError as e:
        return None, str(e)


class SnapshotThread(threading.Thread):
    """Fetches every `interval` seconds and hands each result to
    state.update(); `seq` counts updates so the screen knows when to draw."""

    def __init__(self, state: Any, host: str, port: int, window: Optional[int], interval: float = 1.0,
                 fetcher: Callable[[str, int, Optional[int]], Fetched] = fetch) -> None:
        threading.Thread.__init__(self, name="graphsignal-top-snapshot", daemon=True)
        self.state = state
        self.host, self.port, self.window = host, port, window
        self.interval = interval
        self.fetcher = fetcher
        self.seq = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            t0 = time.monotonic()
            self.refresh()
            self._halt.wait(max(0.05, self.interval - (time.monotonic() - t0)))

    def refresh(self) -> None:
        payload, error, note = self.fetcher(self.host, self.port, self.window)
        try:
            self.state.update(payload, error, note)
        except Exception as e:  # a payload we cannot read must not end the screen
            self.state.update(None, cannot_show(e))
        self.seq += 1

    def stop(self) -> None:
        self._halt.set()
