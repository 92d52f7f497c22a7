"""When to try again after a failed send: the one policy of the uploader
(graphsignal.sidecar.upload) and the OTLP exporter
(graphsignal.sidecar.otlp), and the lines they say about it.

  a failure        full jitter: a wait drawn uniformly between 0 and
                   min(cap, base * 2**(failures - 1)), so a fleet that
                   lost its server together does not come back in
                   lockstep (base 1 s, cap 30 s by default)
  Retry-After      a 429 or 503 that names seconds (at most
                   MAX_RETRY_AFTER) waits at least that long
  401 or 403       the credentials were refused: one line that says so,
                   then a try every AUTH_MIN to AUTH_MAX seconds (4 to 5
                   minutes, drawn uniformly), never faster and never
                   given up, so a key fixed or rotated on the server heals
                   a week-long run without a restart

Lines (and one error entry each in the store): one when sends start
failing, one when a failure turns into refused credentials (or back),
one when they recover. The clock and the random draw are passed in, so
tests pin every wait.
"""
import logging
import random
import re
from typing import Any, Callable, Optional, Tuple, Union

logger = logging.getLogger("graphsignal")

BASE, CAP = 1.0, 30.0  # seconds
AUTH_MIN, AUTH_MAX = 240.0, 300.0  # seconds between tries while the credentials are refused
MAX_RETRY_AFTER = 300.0  # seconds: a server's Retry-After is followed up to this
AUTH_STATUSES = (401, 403)


def full_jitter(failures: int, rand: Callable[[], float] = random.random, base: float = BASE,
                cap: float = CAP) -> float:
    """Seconds to wait after `failures` consecutive failures (>= 1): a
    draw between 0 and the capped exponential (rand() in [0, 1))."""
    return float(rand() * min(cap, base * 2.0 ** min(max(failures, 1) - 1, 32)))


def retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a Retry-After header in its seconds form (at most
    MAX_RETRY_AFTER); None for none, a date, or anything else."""
    text = (value or "").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return None
    return min(float(text), MAX_RETRY_AFTER)


class Retry:
    """The failure state of one sender. what: the words before "are
    failing" in its lines (e.g. "uploads to https://..."); auth_hint: what
    refused credentials mean for it (e.g. "the API key was not accepted
    (GRAPHSIGNAL_API_KEY)"); store: where the lines also go as warnings
    (tags {"source": source}); clock: monotonic seconds; rand: [0, 1)."""

    def __init__(self, what: str, auth_hint: str, store: Any = None, source: str = "",
                 clock: Optional[Callable[[], float]] = None, rand: Callable[[], float] = random.random,
                 base: float = BASE, cap: float = CAP) -> None:
        import time

        self.what = what
        self.auth_hint = auth_hint
        self.store = store
        self.source = source
        self.clock = clock or time.monotonic
        self.rand = rand
        self.base, self.cap = base, cap
        self.failures = 0  # consecutive
        self.failing_since: Optional[float] = None
        self.next_try = 0.0  # clock seconds; 0: now
        self.refused = False  # the last failure was a 401/403

    def due(self, now: Optional[float] = None) -> bool:
        """Whether a send may be tried now."""
        return (self.clock() if now is None else now) >= self.next_try

    def delay(self, status: Optional[int], after: Optional[float] = None) -> float:
        """Seconds until the next try after this failure (failures already
        counted)."""
        if status in AUTH_STATUSES:
            return AUTH_MIN + self.rand() * (AUTH_MAX - AUTH_MIN)
        wait = full_jitter(self.failures, self.rand, self.base, self.cap)
        if after is not None and status in (429, 503):
            wait = max(wait, after)
        return wait

    def failed(self, status: Optional[int], reason: str, now: Optional[float] = None,
               after: Optional[float] = None) -> float:
        """Counts a failure (status: the HTTP status, None when no answer;
        reason: it in a few words; after: the answer's Retry-After
        seconds) and says a line when one is due. Returns the wait."""
        now = self.clock() if now is None else now
        self.failures += 1
        refused = status in AUTH_STATUSES
        wait = self.delay(status, after)
        self.next_try = now + wait
        if self.failures == 1:
            self.failing_since = now
        if status is not None and refused and (self.failures == 1 or not self.refused):
            self._say("%s are failing: HTTP %d: %s; trying again every %d to %d minutes until it is accepted"
                      % (self.what, status, self.auth_hint, AUTH_MIN // 60, AUTH_MAX // 60))
        elif self.failures == 1 or (self.refused and not refused):
            self._say("%s are failing: %s; retrying with backoff up to %d s" % (self.what, reason, self.cap))
        self.refused = refused
        return wait

    def succeeded(self, now: Optional[float] = None) -> None:
        """A send was accepted: one line when it ends a run of failures."""
        now = self.clock() if now is None else now
        if self.failures:
            logger.warning("graphsignal: %s recovered after %d failed attempts in %.0f s", self.what, self.failures,
                           max(0.0, now - (now if self.failing_since is None else self.failing_since)))
        self.failures = 0
        self.failing_since = None
        self.next_try = 0.0
        self.refused = False

    def _say(self, msg: str) -> None:
        logger.warning("graphsignal: %s", msg)
        if self.store is not None:
            self.store.add_error("warning", msg, tags={"source": self.source})


def request_failure(e: Exception, timeout: Union[float, Tuple[float, float]]) -> str:
    """A request that got no answer, in a few words (requests nests the
    cause deep); timeout: what the request was given, (connect, read) or
    one number."""
    import requests

    # %.3g: the final send's timeout is what its deadline has left (1.99996 s), said as 2 s
    if isinstance(e, requests.ConnectTimeout):
        return "no connection within %.3g s" % (timeout[0] if isinstance(timeout, tuple) else timeout)
    if isinstance(e, requests.ReadTimeout):
        return "no answer within %.3g s" % (timeout[1] if isinstance(timeout, tuple) else timeout)
    text = str(e)
    m = re.search(r"Failed to resolve '([^']+)'", text) or re.search(r"Name or service not known", text)
    if m:
        return "cannot resolve %s" % (m.group(1) if m.groups() else "the host")
    m = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if m:
        return m.group(1).strip().lower()
    text = " ".join(text.split())
    return "%s: %s" % (type(e).__name__, text[:160] + ("..." if len(text) > 160 else ""))
