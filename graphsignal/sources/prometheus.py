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
seconds) are dropped: they are not measurements. A scrape is applied as a
whole: a malformed or partial exposition costs that scrape only, with one
log line, and the store keeps the previous scrape's values. Series that
vanish from a good scrape are removed, so a gauge never outlives its
engine's report of it.

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
import time

import requests
from prometheus_client.parser import text_string_to_metric_families

from graphsignal.sources import Source

logger = logging.getLogger("graphsignal")

CONNECT_TIMEOUT = 1.0  # seconds; the engine is on this host
READ_TIMEOUT = 3.0  # seconds; a busy engine's event loop answers /metrics late
BACKOFF_MAX = 8.0  # seconds between attempts while down
NEVER_UP_WARN = 300.0  # seconds without any answer before we say so
LOG_REPEAT = 60.0  # seconds before the same failure, recurring after a recovery, is logged again
NOT_READY = (503,)  # HTTP statuses of a server that is up while its engine still loads
MAX_BODY = 32 << 20  # bytes; an exposition larger than this is not read
UP_METRIC = "prometheus_scrape_up"
FAILURES_METRIC = "prometheus_scrape_failures_total"
TIMESTAMP_METRIC = "prometheus_scrape_timestamp_ns"

_HINTS = {
    404: "is the engine's metrics endpoint enabled?",
    501: "llama-server serves /metrics only when started with --metrics",
}


class ScrapeError(Exception):
    def __init__(self, message, status=None):
        Exception.__init__(self, message)
        self.status = status  # the HTTP status, when the endpoint answered with one


def parse_exposition(text):
    """Parses Prometheus text into a list of (kind, name, tags, value) with
    kind "gauge" / "counter" (value: float) or "histogram" (value: (count,
    sum, le list, cumulative list)). Raises ValueError on a malformed text,
    so that a bad scrape is dropped whole."""
    try:
        return _parse(text)
    except ValueError:
        raise
    except Exception as e:  # the parser's other complaints (IndexError, ...) mean the same
        raise ValueError("%s: %s" % (type(e).__name__, e))


def _parse(text):
    out = []
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "gaugehistogram"):
            out.extend(_histograms(fam))
        elif fam.type == "summary":
            out.extend(_summaries(fam))
        elif fam.type == "counter":
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                out.append(("counter", s.name, dict(s.labels), s.value))
        else:  # gauge, untyped ("unknown"), info, stateset
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                out.append(("gauge", s.name, dict(s.labels), s.value))
    return out


def _group(fam, drop_label):
    """Samples of a family grouped by their labels without `drop_label`."""
    groups = {}
    for s in fam.samples:
        labels = {k: v for k, v in s.labels.items() if k != drop_label}
        key = tuple(sorted(labels.items()))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"labels": labels, "buckets": [], "count": None, "sum": None, "quantiles": []}
        suffix = s.name[len(fam.name):]
        if suffix == "_bucket" and drop_label in s.labels:
            g["buckets"].append((_le(s.labels[drop_label]), s.value))
        elif suffix in ("_count", "_gcount"):
            g["count"] = s.value
        elif suffix in ("_sum", "_gsum"):
            g["sum"] = s.value
        elif suffix == "" and drop_label in s.labels:
            g["quantiles"].append((s.labels[drop_label], s.value))
    return groups.values()


def _le(raw):
    return float("inf") if raw in ("+Inf", "Inf", "inf") else float(raw)


def _histograms(fam):
    out = []
    for g in _group(fam, "le"):
        buckets = sorted(g["buckets"])
        count = g["count"]
        if count is None and buckets and buckets[-1][0] == math.inf:
            count = buckets[-1][1]
        if count is None:
            # Neither _count nor the +Inf bucket: the exposition was cut and
            # the total is unknown; better no histogram than a wrong one.
            continue
        le = [b for b, _ in buckets]
        cum = [_num(c) for _, c in buckets]
        out.append(("histogram", fam.name, g["labels"],
                    (_num(count), g["sum"], le, cum)))
    return out


def _summaries(fam):
    out = []
    for g in _group(fam, "quantile"):
        for q, v in g["quantiles"]:
            out.append(("gauge", fam.name, dict(g["labels"], quantile=q), v))
        if g["count"] is not None:
            out.append(("histogram", fam.name, g["labels"],
                        (_num(g["count"]), g["sum"], [], [])))
    return out


def _num(v):
    """Counts arrive as floats ("27.0"); integral ones become ints."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    return v


def apply(store, samples, ts=None):
    """Writes parsed samples into the store; returns the set of series keys
    written, as (name, type, tags tuple)."""
    keys = set()
    with store.lock:
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


def _finite(v):
    """NaN/Inf are "not measured" in the payload (null), not a number."""
    return v if v is None or math.isfinite(v) else None


class PrometheusSource(Source):
    name = "prometheus"
    interval = 1.0

    def __init__(self, store, url, engine=None, clock=time.monotonic, session=None, alive=None):
        """alive: callable -> bool, whether the engine's process still runs
        (once it has exited, failing to reach it is no news)."""
        self.store = store
        self.alive = alive
        self.url = url
        self.engine = engine
        self.clock = clock
        self.session = session
        self.tags = {"url": url}
        if engine:
            self.tags["engine"] = engine
        self._next_try = 0.0
        self._backoff = 0.0
        self._ever_up = False
        self._lost = False  # the last scrape after a good one failed to connect (see _failed)
        self._started = None
        self._said = {}  # message -> clock() when last logged
        self._keys = set()
        self.scrapes_ok = 0
        self.failures = 0
        self._error_tags = {"source": self.name, "url": url}
        self._unresolved = False  # an error entry of ours is current

    def setup(self):
        if self.session is None:
            self.session = requests.Session()
            # The engine is local: a proxy from the environment must not see it.
            self.session.trust_env = False
        self._started = self.clock()
        self.store.set_gauge(UP_METRIC, self.tags, 0)
        self.store.set_counter(FAILURES_METRIC, self.tags, 0)

    def poll(self):
        now = self.clock()
        if self._started is None:
            self._started = now
        if now < self._next_try:
            return
        try:
            text = self._fetch()
            samples = parse_exposition(text)
        except (requests.RequestException, ScrapeError, ValueError, UnicodeError) as e:
            self._failed(now, e)
            return
        keys = apply(self.store, samples)
        with self.store.lock:
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
        self._ever_up = True
        self._backoff = 0.0
        self._next_try = 0.0
        self._lost = False
        self.scrapes_ok += 1

    def _fetch(self):
        resp = self.session.get(self.url, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), stream=True,
                                headers={"Accept": "text/plain;version=0.0.4"})
        try:
            if resp.status_code != 200:
                hint = _HINTS.get(resp.status_code)
                raise ScrapeError("HTTP %d%s" % (resp.status_code, "; " + hint if hint else ""),
                                  status=resp.status_code)
            parts, size = [], 0
            for part in resp.iter_content(chunk_size=1 << 16):
                size += len(part)
                if size > MAX_BODY:
                    raise ScrapeError("exposition larger than %d MiB; not read" % (MAX_BODY >> 20))
                parts.append(part)
        finally:
            resp.close()
        return b"".join(parts).decode("utf-8", errors="replace")

    def _failed(self, now, e):
        self.failures += 1
        self.store.set_gauge(UP_METRIC, self.tags, 0)
        self.store.add_counter(FAILURES_METRIC, self.tags, 1)
        self._backoff = min(BACKOFF_MAX, max(self.interval, self._backoff * 2))
        self._next_try = now + self._backoff
        refused = isinstance(e, requests.ConnectionError)
        not_ready = isinstance(e, ScrapeError) and e.status in NOT_READY
        if refused and self.alive is not None and not self.alive():
            return  # the engine has exited (the supervisor records how): nothing to say
        if refused and self._ever_up and not self._lost:
            # An engine that is shutting down closes its server before its
            # process exits: one lost connection is not news yet; the next
            # attempt (after the backoff) tells a stopped engine from a stuck one.
            self._lost = True
            return
        if (refused or not_ready) and not self._ever_up:
            # Still starting: quiet, unless it never comes up at all.
            if now - self._started >= NEVER_UP_WARN:
                if not_ready:
                    self._say("warning", "%s has answered HTTP %d (not ready) for %d s; is the engine still "
                                         "loading?" % (self.url, e.status, NEVER_UP_WARN), now)
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

    def _say(self, level, message, now):
        """One error entry per distinct message while it lasts; its log line
        once, and again after a recovery only if LOG_REPEAT has passed."""
        if self._unresolved and message in self._said:
            return  # still the current failure: already said
        last = self._said.get(message)
        if last is None or now - last >= LOG_REPEAT:
            self._said[message] = now
            logger.warning("graphsignal: %s", message)
        self.store.add_error(level, message, tags=self._error_tags)
        self._unresolved = True

    def shutdown(self):
        if self.session is not None:
            self.session.close()


def _one_line(e):
    text = " ".join(str(e).split())
    return text[:300] + "..." if len(text) > 300 else text


def make_source(sup):
    """A PrometheusSource for the Supervisor `sup`, or None when there is
    nothing to scrape (no engine recognized and no --metrics-port)."""
    url = getattr(sup, "metrics_url", None)
    if not url:
        return None
    prepared = getattr(sup, "engine", None)

    def alive():
        child = getattr(sup, "child", None)
        return child is None or child.poll() is None

    return PrometheusSource(sup.store, url, getattr(prepared, "engine", None), alive=alive)
