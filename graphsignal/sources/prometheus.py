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

import requests
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from graphsignal.report import Reporter
from graphsignal.sources import Source
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
MAX_LINES = 10000  # sample lines parsed per scrape (a real engine has a few thousand at most)
MAX_SERIES = 2000  # series imported per scrape (the store holds 5000 of everything)
SKIPPED_METRIC = "prometheus_scrape_skipped_lines"
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


class ParseReport:
    """What parse_exposition left out: malformed lines (skipped, with the
    first as an example), lines beyond MAX_LINES and series beyond
    MAX_SERIES (cut), and the lines of histograms without a total
    (cut_histogram_lines; cut_histograms names them: family, labels)."""

    __slots__ = ("skipped", "first_bad", "cut_lines", "cut_series", "cut_histogram_lines", "cut_histograms")

    def __init__(self):
        self.skipped, self.first_bad, self.cut_lines, self.cut_series = 0, None, 0, 0
        self.cut_histogram_lines, self.cut_histograms = 0, []

    @property
    def skipped_lines(self):
        """What prometheus_scrape_skipped_lines says: malformed lines and
        the lines of histograms without a total."""
        return self.skipped + self.cut_histogram_lines


def parse_exposition(text, report=None, max_lines=None, max_series=None, give_up=None):
    """Parses Prometheus text into a list of (kind, name, tags, value) with
    kind "gauge" / "counter" (value: a number) or "histogram" (value:
    (count, sum, le list, cumulative list)). A malformed line is skipped
    (counted in `report`, a ParseReport); raises ValueError only when the
    text has malformed lines and not one good sample (not an exposition).
    give_up: a callable checked between families; when it returns True the
    parse stops there (the caller then drops the partial result)."""
    report = report if report is not None else ParseReport()
    max_lines = MAX_LINES if max_lines is None else max_lines
    max_series = MAX_SERIES if max_series is None else max_series
    out = []
    for block in _blocks(text, max_lines, report):
        if give_up is not None and give_up():
            break
        out.extend(_parse_block(block, report))
    if report.skipped and not out:
        raise ValueError("no line is a Prometheus sample (first: %s)" % _quote(report.first_bad))
    if len(out) > max_series:
        report.cut_series = len(out) - max_series
        del out[max_series:]
    return out


CHUNK = 1000  # sample lines per parser call for families whose samples stand alone


def _blocks(text, max_lines, report):
    """The text as blocks of lines, one metric family each (a block starts
    at each # HELP / # TYPE of a new name; a gauge or counter family is cut
    into blocks of CHUNK samples, each with the family's # lines, so that a
    deadline is checked often), at most max_lines sample lines in all (the
    rest is counted in report.cut_lines)."""
    blocks, cur, head, family, kind, n, samples = [], [], [], None, None, 0, 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            parts = s.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] != family:
                if cur:
                    blocks.append(cur)
                cur, head, family, kind, n = [], [], parts[2], None, 0
            if len(parts) >= 4 and parts[1] == "TYPE":
                kind = parts[3].strip()
            cur.append(line)
            head.append(line)
            continue
        if samples >= max_lines:
            report.cut_lines = sum(1 for x in lines[i:] if x.strip() and not x.lstrip().startswith("#"))
            break
        if n >= CHUNK and kind in (None, "gauge", "counter", "untyped", "unknown"):
            blocks.append(cur)
            cur, n = list(head), 0
        samples += 1
        n += 1
        cur.append(line)
    if cur:
        blocks.append(cur)
    return blocks


def _parse_block(lines, report):
    try:
        return _convert("\n".join(lines) + "\n", report)
    except Exception:
        pass
    # Something in this family is malformed: keep the lines that parse on
    # their own (with the family's # lines), then parse those together.
    head = [x for x in lines if x.lstrip().startswith("#")]
    good = []
    for x in lines:
        if x.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families("\n".join(head + [x]) + "\n"))
        except Exception:
            report.skipped += 1
            if report.first_bad is None:
                report.first_bad = x
            continue
        good.append(x)
    if not good:
        return []
    try:
        return _convert("\n".join(head + good) + "\n", report)
    except Exception:
        report.skipped += len(good)
        if report.first_bad is None:
            report.first_bad = good[0]
        return []


def _convert(text, report=None):
    """The samples of `text`; histograms without a total go to `report`
    once the whole text has parsed (a text that fails counts nothing)."""
    out, cut = [], []
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "gaugehistogram"):
            out.extend(_histograms(fam, cut))
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
    if report is not None:
        for name, labels, lines in cut:
            report.cut_histogram_lines += lines
            if len(report.cut_histograms) < MAX_CUT_NAMED:
                report.cut_histograms.append((name, labels))
    return out


MAX_CUT_NAMED = 16  # histograms without a total named per scrape (all are counted)


def _quote(line):
    """A line of the exposition, safe and short enough for a log line."""
    if line is None:
        return "none"
    text = clean(line.strip())
    return repr(text[:120] + ("..." if len(text) > 120 else ""))


def _group(fam, drop_label):
    """Samples of a family grouped by their labels without `drop_label`."""
    groups = {}
    for s in fam.samples:
        labels = {k: v for k, v in s.labels.items() if k != drop_label}
        key = tuple(sorted(labels.items()))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"labels": labels, "buckets": [], "count": None, "sum": None, "quantiles": [],
                               "lines": 0}
        suffix = s.name[len(fam.name):]
        g["lines"] += 1
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


def _histograms(fam, cut):
    """The histograms of a family; cut gets (name, labels, lines) of each
    without a total."""
    out = []
    for g in _group(fam, "le"):
        buckets = sorted(g["buckets"])
        count = g["count"]
        if count is None and buckets and buckets[-1][0] == math.inf:
            count = buckets[-1][1]
        if count is None:
            # Neither _count nor the +Inf bucket: the exposition was cut and
            # the total is unknown; better no histogram than a wrong one, and
            # said (the payload's histograms always carry their count).
            cut.append((fam.name, g["labels"], g["lines"]))
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


def _finite(v):
    """NaN/Inf are "not measured" in the payload (null), not a number."""
    return v if v is None or math.isfinite(v) else None


class PrometheusSource(Source):
    name = "prometheus"
    interval = 1.0
    stop_wait = 0.25  # seconds SourceThread.stop waits for an interrupted scrape before leaving it

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
        self._reporter = Reporter(store, self._error_tags)
        self._unresolved = False  # an error entry of ours is current
        self._logged = False  # the current failure's line was logged (not only its entry)
        self._halting = False  # shutdown has begun: the next scrape is the last, with FINAL_DEADLINE
        self._interrupted = threading.Event()  # set by interrupt(): the scrape in flight gives up
        self._inflight = None  # the response being read (interrupt() cuts its socket)
        self._conn = None  # the connection of the request in flight (_session sets it)
        self._inflight_lock = threading.Lock()
        self._exposition = Reporter(store, dict(self._error_tags, problem="exposition"))

    def setup(self):
        if self.session is None:
            self.session = _session(self)
        self._started = self.clock()
        self.store.set_gauge(UP_METRIC, self.tags, 0)
        self.store.set_counter(FAILURES_METRIC, self.tags, 0)

    def poll(self):
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

        def give_up():
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

    def _fetch(self, budget):
        """The body, read within `budget` seconds: a watchdog cuts the
        connection when they pass (a read timeout alone is per read, and an
        engine that trickles a byte a second would hold us forever)."""
        t_end = time.monotonic() + budget
        expired = threading.Event()
        timer = threading.Timer(budget, self._deadline, (expired,))
        timer.daemon = True
        timer.start()
        try:
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
                parts, size = [], 0
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

    def _deadline(self, expired):
        expired.set()
        self._cut()

    def _cut(self):
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

    def interrupt(self):
        """Shutdown has begun: cut the scrape in flight; the last scrape
        (SourceThread.stop's final poll) gets FINAL_DEADLINE."""
        self._halting = True
        self._next_try = 0.0
        self._interrupted.set()
        self._cut()

    def _report_parse(self, report):
        """One error per kind of cut (and per first bad line), not per scrape.
        These describe the exposition, not a failed scrape: tagged
        problem=exposition, so a recovery of the endpoint leaves them be."""
        say = self._exposition.once
        if report.skipped:
            say(("skipped", report.first_bad), "scraping %s: %d malformed line%s skipped (first: %s); the rest of "
                "the exposition is imported" % (self.url, report.skipped, "" if report.skipped == 1 else "s",
                                                _quote(report.first_bad)))
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
            # Still starting (a vLLM server loads its model for minutes): one
            # line and one entry that say where we look and what we got, so a
            # wrong --metrics-port is seen at once; louder if it never comes up.
            # The entry is "info" (starting is no error); the line is seen at the default level.
            self._say("info", "no engine metrics yet: %s %s; trying again every few seconds (still "
                              "loading? another port: --metrics-port)"
                      % (self.url, "answers HTTP %d (not ready)" % e.status if not_ready
                         else "refuses connections"), now, logging.WARNING)
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

    def _say(self, level, message, now, log_level=None):
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

    def shutdown(self):
        if self.session is not None:
            self.session.close()


def _labels(labels):
    """{a="x",b="y"} for a line, short and safe; "" for none."""
    if not labels:
        return ""
    text = clean(",".join('%s="%s"' % (k, v) for k, v in sorted(labels.items())))
    return "{%s}" % (text[:200] + "..." if len(text) > 200 else text)


def _one_line(e):
    text = clean(" ".join(str(e).split()))
    return text[:300] + "..." if len(text) > 300 else text


def _session(source):
    """A requests session that tells `source` which connection each request
    uses (source._conn), so a scrape stuck even before its headers can be
    cut (see PrometheusSource._cut)."""
    session = requests.Session()
    # The engine is local: a proxy from the environment must not see it.
    session.trust_env = False

    class _Pool(urllib3.HTTPConnectionPool):
        def _get_conn(self, timeout=None):
            conn = urllib3.HTTPConnectionPool._get_conn(self, timeout)
            source._conn = conn
            return conn

    adapter = requests.adapters.HTTPAdapter()
    classes = dict(adapter.poolmanager.pool_classes_by_scheme)
    classes["http"] = _Pool
    adapter.poolmanager.pool_classes_by_scheme = classes
    session.mount("http://", adapter)
    return session


def _socket_of(resp):
    """The socket under a requests response (urllib3 1.26 and 2.x), or None."""
    raw = getattr(resp, "raw", None)
    for conn in (getattr(raw, "connection", None), getattr(raw, "_connection", None)):
        sock = getattr(conn, "sock", None)
        if sock is not None:
            return sock
    try:
        return raw._fp.fp.raw._sock
    except AttributeError:
        return None


def make_source(ctx):
    """A PrometheusSource for a run (a graphsignal.sources.SourceContext),
    or None when there is nothing to scrape (no engine recognized and no
    --metrics-port)."""
    if not ctx.metrics_url:
        return None
    return PrometheusSource(ctx.store, ctx.metrics_url, ctx.engine, alive=ctx.alive)
