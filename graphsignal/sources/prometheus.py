"""The engine's Prometheus endpoint, scraped into the store.

About once a second (`interval`) we GET the metrics URL with a short
timeout and parse the text with prometheus_client's parser:

  gauges, counters   keep their exposed names and labels (labels -> tags);
                     a counter keeps its `_total` suffix
  histograms         become store histograms: exact count and sum, bins from
                     the cumulative `le` buckets, p50/p95/p99 from those bins
  summaries          count and sum as a histogram (no bins); the quantile
                     samples stay gauges with their `quantile` tag
  untyped            gauges, like Prometheus itself treats them

`*_created` samples (prometheus_client's creation timestamps, epoch
seconds) are dropped: they are not measurements. A histogram with neither
`_count` nor a `+Inf` bucket (an exposition cut inside it) has no total,
which the payload's histograms cannot leave out: it is not imported, its
lines count in `prometheus_scrape_skipped_lines`, and one error names it. A malformed line costs
that line (a family that still makes no sense without it costs that
family): the rest is imported and one error says how many lines were
skipped (`prometheus_scrape_skipped_lines` has the count of the last
scrape). A body in which no line is an exposition is a failed scrape, and
the store keeps the previous scrape's values. Series that vanish from a
good scrape are removed, so a gauge never outlives its engine's report of it.

Bounds, because an endpoint can answer anything: a scrape has a total
deadline (SCRAPE_DEADLINE seconds, however the bytes trickle in; shutdown
interrupts it and gives the last scrape FINAL_DEADLINE), a size cap
(MAX_BODY bytes), and caps on what is parsed (MAX_LINES sample lines) and
imported (MAX_SERIES series); what is cut is said once, as an error.

While the engine starts (model loading can take minutes) connections are
refused, or its server is up but answers "not ready" (HTTP 503: llama-server
while it loads the model): we back off (1 s doubling to BACKOFF_MAX) without
logging, and say one line only if no metrics arrive within NEVER_UP_WARN
seconds. After the engine has answered once, failures back off the same way
and are reported (a log line, an `errors` entry) once per distinct reason;
a 503 then is a failure like any other.

An error entry reports a condition, not an event: when a later scrape
succeeds, every entry this scraper made is marked resolved
(`resolved_ns`, epoch ns; null while current), so an agent reading
`errors` sees that the endpoint failed and that it answers again. The same
failure coming back makes its entry current again (count + 1); its log
line repeats at most once per LOG_REPEAT seconds, so a flapping endpoint
cannot flood the log.

Scrape health, for agents, tagged with the scraped `url` (and `engine`
when the launcher recognized one): `prometheus_scrape_up` (gauge: 1 if the
last scrape succeeded, 0 if not), `prometheus_scrape_failures_total`
(counter) and `prometheus_scrape_timestamp_ns` (gauge: epoch ns of the last
good scrape; rates divide by differences of it, the times at which the
engine's counters were actually read).
"""
import logging
import math
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set

import requests
import urllib3

from graphsignal.report import Reporter
from graphsignal.signals_model import SeriesKey
from graphsignal.sources import Source, SourceContext
from graphsignal.sources.prometheus_text import MAX_LINES as MAX_LINES
from graphsignal.sources.prometheus_text import MAX_SERIES as MAX_SERIES
from graphsignal.sources.prometheus_text import ParseReport as ParseReport
from graphsignal.sources.prometheus_text import parse_exposition as parse_exposition
from graphsignal.sources.prometheus_text import Sample, quote
from graphsignal.textsafe import clean

logger = logging.getLogger("graphsignal")

CONNECT_TIMEOUT = 1.0  # seconds; the engine is on this host
READ_TIMEOUT = 3.0  # seconds; a busy engine's event loop answers /metrics late
BACKOFF_MAX = 8.0  # seconds between attempts while down
NEVER_UP_WARN = 300.0  # seconds without any answer before we say so
LOG_REPEAT = 60.0  # seconds before the same failure, recurring after a recovery, is logged again
NOT_READY = (503,)  # HTTP statuses of a server that is up while its engine still loads
MAX_BODY = 32 << 20  # bytes; an exposition larger than this is not read
SCRAPE_DEADLINE = 3.0  # seconds for a whole scrape, connect to last byte
FINAL_DEADLINE = 0.5  # seconds for the last scrape at shutdown
SKIPPED_METRIC = "prometheus_scrape_skipped_lines"
UP_METRIC = "prometheus_scrape_up"
FAILURES_METRIC = "prometheus_scrape_failures_total"
TIMESTAMP_METRIC = "prometheus_scrape_timestamp_ns"

_HINTS = {
    404: "is the engine's metrics endpoint enabled?",
    501: "llama-server serves /metrics only when started with --metrics",
}


class ScrapeError(Exception):
    def __init__(self, message: str, status: Optional[int] = None) -> None:
        Exception.__init__(self, message)
        self.status = status  # the HTTP status, when the endpoint answered with one


def apply(store: Any, samples: Iterable[Sample], ts: Optional[int] = None) -> Set[SeriesKey]:
    """Writes parsed samples into the store; returns the set of series keys
    written, as (name, type, tags tuple)."""
    keys: Set[SeriesKey] = set()
    with store.batch():
        for kind, name, tags, value in samples:
            if kind == "gauge":
                store.set_gauge(name, tags, _finite(value), ts)
            elif kind == "counter":
                store.set_counter(name, tags, _finite(value), ts)
            else:
                count, total, le, cum = value
                # A missing _sum is NaN in the store: the payload shows it
                # (and the mean) as null, not measured, instead of a made-up 0.
                total = total if total is not None and math.isfinite(total) else math.nan
                store.set_histogram_buckets(name, tags, count, total, le, cum, ts)
            keys.add((name, kind, tuple(sorted(tags.items()))))
    return keys


def _finite(v: Optional[float]) -> Optional[float]:
    """NaN/Inf are "not measured" in the payload (null), not a number."""
    return v if v is None or math.isfinite(v) else None


class PrometheusSource(Source):
    name = "prometheus"
    interval = 1.0
    stop_wait = 0.25  # seconds SourceThread.stop waits for an interrupted scrape before leaving it

    def __init__(self, store: Any, url: str, engine: Optional[str] = None, clock: Callable[[], float] = time.monotonic,
                 session: Optional[requests.Session] = None, alive: Optional[Callable[[], bool]] = None) -> None:
        """alive: callable -> bool, whether the engine's process still runs
        (once it has exited, failing to reach it is no news)."""
        self.store, self.url, self.engine, self.session = store, url, engine, session
        self.alive, self.clock = alive, clock
        self.tags = {"url": url}
        if engine:
            self.tags["engine"] = engine
        self._next_try = 0.0
        self._backoff = 0.0
        self._ever_up = False
        self._lost = False  # the last scrape after a good one failed to connect (see _failed)
        self._started: Optional[float] = None
        self._said: Dict[str, float] = {}  # message -> clock() when last logged
        self._keys: Set[SeriesKey] = set()
        self.scrapes_ok = 0
        self.failures = 0
        self._error_tags = {"source": self.name, "url": url}
        self._reporter = Reporter(store, self._error_tags)
        self._unresolved = False  # an error entry of ours is current
        self._logged = False  # the current failure's line was logged (not only its entry)
        self._halting = False  # shutdown has begun: the next scrape is the last, with FINAL_DEADLINE
        self._interrupted = threading.Event()  # set by interrupt(): the scrape in flight gives up
        self._inflight: Optional[requests.Response] = None  # the response being read (interrupt() cuts its socket)
        self._conn: Any = None  # the connection of the request in flight (_session sets it)
        self._inflight_lock = threading.Lock()
        self._exposition = Reporter(store, dict(self._error_tags, problem="exposition"))

    def setup(self) -> None:
        if self.session is None:
            self.session = _session(self)
        self._started = self.clock()
        self.store.set_gauge(UP_METRIC, self.tags, 0)
        self.store.set_counter(FAILURES_METRIC, self.tags, 0)

    def poll(self) -> None:
        now = self.clock()
        if self._started is None:
            self._started = now
        if now < self._next_try:
            return
        report = ParseReport()
        if self._halting:
            self._interrupted.clear()  # the last scrape: FINAL_DEADLINE is its bound
        budget = FINAL_DEADLINE if self._halting else SCRAPE_DEADLINE
        t_end = time.monotonic() + budget

        def give_up() -> bool:
            return self._interrupted.is_set() or time.monotonic() >= t_end

        try:
            text = self._fetch(budget)
            samples = parse_exposition(text, report, give_up=give_up)
            if give_up():  # parsing ran past the deadline (or shutdown came): a partial scrape is no scrape
                raise ScrapeError("no complete answer within %.1f s" % budget)
        except (requests.RequestException, ScrapeError, ValueError, UnicodeError) as e:
            self._failed(now, e)
            return
        keys = apply(self.store, samples)
        self.store.set_gauge(SKIPPED_METRIC, self.tags, report.skipped_lines)
        self._report_parse(report)
        with self.store.batch():
            for name, kind, tags in self._keys - keys:
                self.store.remove(name, kind, dict(tags))
        self._keys = keys
        self.store.set_gauge(UP_METRIC, self.tags, 1)
        self.store.set_gauge(TIMESTAMP_METRIC, self.tags, self.store.clock())
        if not self._ever_up:
            logger.info("graphsignal: scraping %s (%d series)", self.url, len(keys))
        if self._unresolved:
            self.store.resolve_errors(self._error_tags)
            self._unresolved = False
            if self._logged:  # a failure's line was seen: so is its end
                logger.warning("graphsignal: engine metrics at %s: answering (%d series)", self.url, len(keys))
        self._logged = False
        self._ever_up = True
        self._backoff = 0.0
        self._next_try = 0.0
        self._lost = False
        self.scrapes_ok += 1

    def _fetch(self, budget: float) -> str:
        """The body, read within `budget` seconds: a watchdog cuts the
        connection when they pass (a read timeout alone is per read, and an
        engine that trickles a byte a second would hold us forever)."""
        t_end = time.monotonic() + budget
        expired = threading.Event()
        timer = threading.Timer(budget, self._deadline, (expired,))
        timer.daemon = True
        timer.start()
        try:
            assert self.session is not None  # setup() made one
            resp = self.session.get(self.url, timeout=(min(CONNECT_TIMEOUT, budget), min(READ_TIMEOUT, budget)),
                                    stream=True, headers={"Accept": "text/plain;version=0.0.4"})
            try:
                with self._inflight_lock:
                    self._inflight = resp
                if expired.is_set() or time.monotonic() >= t_end:
                    raise ScrapeError("no complete answer within %.1f s" % budget)
                if resp.status_code != 200:
                    hint = _HINTS.get(resp.status_code)
                    raise ScrapeError("HTTP %d%s" % (resp.status_code, "; " + hint if hint else ""),
                                      status=resp.status_code)
                parts: List[bytes] = []
                size = 0
                for part in resp.iter_content(chunk_size=1 << 16):
                    size += len(part)
                    if size > MAX_BODY:
                        raise ScrapeError("exposition larger than %d MiB; not read" % (MAX_BODY >> 20))
                    if expired.is_set() or time.monotonic() >= t_end:
                        raise ScrapeError("no complete answer within %.1f s" % budget)
                    parts.append(part)
                if expired.is_set():
                    raise ScrapeError("no complete answer within %.1f s" % budget)
            except requests.RequestException:
                if expired.is_set():  # our watchdog cut it
                    raise ScrapeError("no complete answer within %.1f s" % budget)
                raise
            finally:
                with self._inflight_lock:
                    self._inflight = None
                resp.close()
        except requests.RequestException:
            if expired.is_set():
                raise ScrapeError("no complete answer within %.1f s" % budget)
            raise
        finally:
            timer.cancel()
        return b"".join(parts).decode("utf-8", errors="replace")

    def _deadline(self, expired: threading.Event) -> None:
        expired.set()
        self._cut()

    def _cut(self) -> None:
        """Shuts down the socket of the response being read, if any: the
        blocked read returns at once."""
        with self._inflight_lock:
            resp = self._inflight
        sock = _socket_of(resp) or getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def interrupt(self) -> None:
        """Shutdown has begun: cut the scrape in flight; the last scrape
        (SourceThread.stop's final poll) gets FINAL_DEADLINE."""
        self._halting = True
        self._next_try = 0.0
        self._interrupted.set()
        self._cut()

    def _report_parse(self, report: ParseReport) -> None:
        """One error per kind of cut (and per first bad line), not per scrape.
        These describe the exposition, not a failed scrape: tagged
        problem=exposition, so a recovery of the endpoint leaves them be."""
        say = self._exposition.once
        if report.skipped:
            say(("skipped", report.first_bad), "scraping %s: %d malformed line%s skipped (first: %s); the rest of "
                "the exposition is imported" % (self.url, report.skipped, "" if report.skipped == 1 else "s",
                                                quote(report.first_bad)))
        for name, labels in report.cut_histograms:
            say(("histogram", name, tuple(sorted(labels.items()))),
                "scraping %s: histogram %s%s has neither _count nor a +Inf bucket (the exposition is cut inside "
                "it); its total is unknown, so it is not imported (its lines count in %s)"
                % (self.url, clean(name), _labels(labels), SKIPPED_METRIC))
        if report.cut_lines:
            say("lines", "scraping %s: the exposition has more than %d sample lines; %d were not read"
                % (self.url, MAX_LINES, report.cut_lines))
        if report.cut_series:
            say("series", "scraping %s: more than %d series; %d were not imported"
                % (self.url, MAX_SERIES, report.cut_series))

    def _failed(self, now: float, e: Exception) -> None:
        self.failures += 1
        self.store.set_gauge(UP_METRIC, self.tags, 0)
        self.store.add_counter(FAILURES_METRIC, self.tags, 1)
        self._backoff = min(BACKOFF_MAX, max(self.interval, self._backoff * 2))
        self._next_try = now + self._backoff
        refused = isinstance(e, requests.ConnectionError)
        status = e.status if isinstance(e, ScrapeError) else None
        not_ready = status in NOT_READY
        if refused and self.alive is not None and not self.alive():
            return  # the engine has exited (the supervisor records how): nothing to say
        if refused and self._ever_up and not self._lost:
            # An engine that is shutting down closes its server before its
            # process exits: one lost connection is not news yet; the next
            # attempt (after the backoff) tells a stopped engine from a stuck one.
            self._lost = True
            return
        if (refused or not_ready) and not self._ever_up:
            # Still starting (a vLLM server loads its model for minutes): one
            # line and one entry that say where we look and what we got, so a
            # wrong --metrics-port is seen at once; louder if it never comes up.
            # The entry is "info" (starting is no error); the line is seen at the default level.
            self._say("info", "no engine metrics yet: %s %s; trying again every few seconds (still "
                              "loading? another port: --metrics-port)"
                      % (self.url, "answers HTTP %s (not ready)" % status if not_ready
                         else "refuses connections"), now, logging.WARNING)
            if self._started is not None and now - self._started >= NEVER_UP_WARN:
                if not_ready:
                    self._say("warning", "%s has answered HTTP %s (not ready) for %d s; is the engine still "
                                         "loading?" % (self.url, status, NEVER_UP_WARN), now)
                else:
                    self._say("warning", "no answer from %s for %d s; is the engine up, and is this its "
                                         "metrics port? (set it with --metrics-port)" % (self.url, NEVER_UP_WARN),
                              now)
            return
        if isinstance(e, ValueError) and not isinstance(e, (requests.RequestException, UnicodeError)):
            reason = "malformed exposition (%s); this scrape was skipped" % _one_line(e)
        else:
            reason = _one_line(e) if isinstance(e, ScrapeError) else type(e).__name__
        self._say("warning", "scraping %s failed: %s" % (self.url, reason), now)

    def _say(self, level: str, message: str, now: float, log_level: Optional[int] = None) -> None:
        """One error entry per distinct message while it lasts; its log line
        once, and again after a recovery only if LOG_REPEAT has passed."""
        if self._unresolved and message in self._said:
            return  # still the current failure: already said
        last = self._said.get(message)
        if last is None or now - last >= LOG_REPEAT:
            self._said[message] = now
            self._logged = True  # the recovery gets its line too
            self._reporter.say(message, level, log_level=log_level)
        else:
            self._reporter.entry(message, level)
        self._unresolved = True

    def shutdown(self) -> None:
        if self.session is not None:
            self.session.close()


def _labels(labels: Mapping[str, str]) -> str:
    """{a="x",b="y"} for a line, short and safe; "" for none."""
    if not labels:
        return ""
    text = clean(",".join('%s="%s"' % (k, v) for k, v in sorted(labels.items())))
    return "{%s}" % (text[:200] + "..." if len(text) > 200 else text)


def _one_line(e: Exception) -> str:
    text = clean(" ".join(str(e).split()))
    return text[:300] + "..." if len(text) > 300 else text


def _session(source: PrometheusSource) -> requests.Session:
    """A requests session that tells `source` which connection each request
    uses (source._conn), so a scrape stuck even before its headers can be
    cut (see PrometheusSource._cut)."""
    session = requests.Session()
    # The engine is local: a proxy from the environment must not see it.
    session.trust_env = False

    class _Pool(urllib3.HTTPConnectionPool):
        def _get_conn(self, timeout: Optional[float] = None) -> Any:
            conn = urllib3.HTTPConnectionPool._get_conn(self, timeout)
            source._conn = conn
            return conn

    adapter = requests.adapters.HTTPAdapter()
    classes = dict(adapter.poolmanager.pool_classes_by_scheme)
    classes["http"] = _Pool
    adapter.poolmanager.pool_classes_by_scheme = classes
    session.mount("http://", adapter)
    return session


def _socket_of(resp: Any) -> Any:
    """The socket under a requests response (urllib3 1.26 and 2.x), or None."""
    raw: Any = getattr(resp, "raw", None)
    for conn in (getattr(raw, "connection", None), getattr(raw, "_connection", None)):
        sock = getattr(conn, "sock", None)
        if sock is not None:
            return sock
    try:
        return raw._fp.fp.raw._sock
    except AttributeError:
        return None


def make_source(ctx: SourceContext) -> Optional[PrometheusSource]:
    """A PrometheusSource for a run (a graphsignal.sources.SourceContext),
    or None when there is nothing to scrape (no engine recognized and no
    --metrics-port)."""
    if not ctx.metrics_url:
        return None
    return PrometheusSource(ctx.store, ctx.metrics_url, ctx.engine, alive=ctx.alive)
