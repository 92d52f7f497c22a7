"""OTLP/HTTP metric export: with GRAPHSIGNAL_OTLP=1 (and only then:
workloads set OTEL_* for their own telemetry), every signal goes to an
OpenTelemetry endpoint as one protobuf ExportMetricsServiceRequest
(opentelemetry-proto's message types, `pip install 'graphsignal[otlp]'`)
every OTEL_METRIC_EXPORT_INTERVAL (default 60 s), and once more at exit.
graphsignal.otelenv reads the endpoint, headers, interval, compression
and resource attributes from the standard variables.

Mapping, from a /signals series, by graphsignal.naming.metrics (the one
table; otlp_family). The series are read from the snapshot's views
(graphsignal.signals_model.SeriesViewLike) directly: their states, a
histogram's bounds, a profile's frames(top), named by the view once for
/metrics and here alike; nothing of the sidecar's series classes.

  name      `graphsignal.` + the /signals name without its unit suffix
            and a counter's `_total`; a name that starts with
            `graphsignal_` is not prefixed twice; characters outside
            [A-Za-z0-9_.-] become `_` (an engine's `vllm:x` is `vllm.x`).
            The table overrides a name that would mislead (the host's CPU
            is `graphsignal.host_cpu_utilization`, bytes uploaded
            `graphsignal.upload_sent` beside the count
            `graphsignal.uploads`). The description is the /signals name.
  unit      OpenTelemetry's semantic conventions: durations in seconds
            `s`, fractions `1` (0-1), unprefixed `By`, `By/s`, `Hz`, and
            `W`, `J`, `Cel`; counts `{record}`-style annotations (`{count}`
            for a probe counter without a unit suffix); a gauge without
            one has "" (it need not be a fraction). Values are rescaled to
            that unit: /signals' nanoseconds are sent as seconds, percent
            as a fraction, MHz as Hz, KiB/s as By/s (a histogram's bounds,
            sum, min and max too, so its counts stay exact). /signals and
            /metrics keep their own units.
  gauge     Gauge, one point per tag set; null (not measured) is no point
  counter   Sum, monotonic, cumulative since the workload's start
  histogram Histogram, cumulative, with count, sum, exact min and max.
            Probe histograms: explicit bounds at BUCKETS_PER_OCTAVE (8)
            per power of two, from the octave of the smallest value to
            that of the largest. Every bound is an edge of the sidecar's
            own bins (32 linear sub-bins per octave), so each bucket's
            count is exact; a bucket spans at most 1/8 of its lower bound.
            An exponential histogram cannot be exact here: its buckets
            split an octave geometrically (base 2**(2**-scale)), ours
            linearly, so only octave edges would coincide. Engine
            histograms keep the engine's own bounds; one without buckets
            (an engine summary) is a Summary of count and sum.
  profile   two Sums (monotonic, cumulative) per frame, for the top N
            frames by value (N = GRAPHSIGNAL_METRICS_TOP_FRAMES, default
            50): the value (`<name>`, in the profile's unit) and the
            samples (`<name>.samples`), with attribute `frame` (and
            `kernel`, `category` where /signals names a kernel). The
            `(other)` of a profile cut in /signals (frames_folded) is
            left out: it gathers whichever frames fall below the cut at
            each export, so it is no sum that only grows
  tags      point attributes, as given; a tag named like an attribute the
            exporter sets itself gets a `tag.` prefix

Resource: host.name and service.instance.id (the run id), then
OTEL_RESOURCE_ATTRIBUTES, then GRAPHSIGNAL_TAGS (a tag wins over an
attribute of the same key), then service.name (GRAPHSIGNAL_SERVICE,
OTEL_SERVICE_NAME, or `unknown_service:<the workload's program>`). Scope:
`graphsignal` and its version. The engine's own series are left out
unless GRAPHSIGNAL_METRICS_ENGINE=1, as /metrics leaves them out.

Sending: POST, Content-Type application/x-protobuf, the configured headers
(their values never reach a line), gzip when asked, no redirects; a
failure follows graphsignal.sidecar.retry's policy, shared with the
uploader (full jitter up to 30 s but never past the export interval, a
Retry-After honoured, a 401/403 one line and a try every 4 to 5 minutes).
Metrics are cumulative, so a failed export loses nothing the next one does
not carry. The export at exit is the one exception: graphsignal-run waits
for it as it waits for the last upload (FINAL_DEADLINE, 2 s), and when it
fails one line says so and what did not arrive. The periodic driver
(graphsignal.sidecar.periodic) runs the exporter, as it runs the uploader.
The store counts it: graphsignal_otlp_exports_total (tag result: accepted
/ failed) and graphsignal_otlp_export_bytes_total.
"""
import gzip
import logging
import os
import random
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast

import numpy as np
import requests

from graphsignal import __version__, config, histo
from graphsignal.naming.metrics import otlp_family
from graphsignal.report import Reporter
from graphsignal.sidecar import api, retry
from graphsignal.sidecar.periodic import FINAL_DEADLINE, PeriodicDriver, final_timeout
from graphsignal.signals_model import HistogramState, LogBins, SeriesViewLike, StoreSnapshot

__all__ = ["FINAL_DEADLINE", "Builder", "Exporter", "octave_bounds", "resource_attributes", "start", "unit_of"]

logger = logging.getLogger("graphsignal")

CONNECT_TIMEOUT, READ_TIMEOUT = 3.0, 10.0  # seconds
TICK = 1.0  # seconds between checks whether an export is due
BUCKETS_PER_OCTAVE = 8  # a power of two, at most 32 (the sidecar's sub-bins per octave)
PREFIX = "graphsignal."
INSTALL_HINT = "pip install 'graphsignal[otlp]'"
CONTENT_TYPE = "application/x-protobuf"

EXPORTS_METRIC = "graphsignal_otlp_exports_total"
BYTES_METRIC = "graphsignal_otlp_export_bytes_total"

_OWN_ATTRIBUTES = ("frame", "kernel", "category")
_INF = float("inf")


def unit_of(name: str, type_: str) -> Tuple[str, str]:
    """(OTLP metric name, unit) of a /signals metric name and type
    (graphsignal.naming.metrics.otlp_family, the module doc's rules)."""
    fam = otlp_family(name, type_)
    return fam.name, fam.unit


def octave_bounds(lowest: int, highest: int, per: int = BUCKETS_PER_OCTAVE) -> List[int]:
    """Explicit bounds (upper-inclusive, ascending) at `per` per power of
    two, covering the integers lowest..highest (>= 0): the octave of each
    and every one between, plus the bound just below the lowest octave.
    Each bound is the highest value of a bin of graphsignal.histo, so a
    bucket holds whole bins."""
    out: List[int] = []
    first = max(lowest, 1).bit_length() - 1
    if lowest == 0:
        out.append(0)
    elif first > 0:
        out.append((1 << first) - 1)
    for e in range(first, max(highest, 1).bit_length()):
        if (1 << e) <= per:  # fewer values than parts: every value is a bound
            out.extend(range(1 << e, 1 << (e + 1)))
        else:
            step = (1 << e) >> (per.bit_length() - 1)  # 2**e / per values a bucket
            out.extend(step * (per + k + 1) - 1 for k in range(per))
    return out


def _scaled(value: Any, scale: float) -> Any:
    """A stored value in the sent unit (an integer stays one when unscaled)."""
    return value if scale == 1 else float(value) * scale


def _int_or_none(x: Any) -> Optional[int]:
    return int(x) if isinstance(x, (int, float)) and x == x and abs(x) < 2 ** 64 else None


class _Proto:
    """opentelemetry-proto's message modules, imported once (on first use:
    the sidecar without GRAPHSIGNAL_OTLP never loads protobuf)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.metrics.v1 import metrics_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2

        self.service, self.common, self.metrics, self.resource = (metrics_service_pb2, common_pb2, metrics_pb2,
                                                                  resource_pb2)
        self.CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE


def resource_attributes(settings: config.Settings, context: Dict[str, Any]) -> Dict[str, str]:
    """The resource's attributes, in the module doc's order of precedence."""
    out: Dict[str, str] = {}
    if context.get("host.name"):
        out["host.name"] = str(context["host.name"])
    if context.get("instance.id"):
        out["service.instance.id"] = str(context["instance.id"])
    out.update(settings.otlp_resource)
    out.update(settings.tags)
    program = os.path.basename(settings.command[0]) if settings.command else ""
    out["service.name"] = settings.service or ("unknown_service:" + program if program else "unknown_service")
    return out


class Builder:
    """Turns a store snapshot into an ExportMetricsServiceRequest.
    engine_keys: callable -> the keys of the engine's series; top_frames:
    frames exported per profile; engine: export the engine's series."""

    def __init__(self, settings: config.Settings, engine_keys: Optional[Callable[[], Set[Any]]] = None,
                 proto: Optional[_Proto] = None) -> None:
        self.settings = settings
        self.engine_keys = engine_keys
        self.pb = proto or _Proto()
        self.skipped = Reporter()  # said once per name

    def request(self, snap: StoreSnapshot) -> Any:
        """The request of a snapshot: its series views read directly (no
        payload stats: no quantiles; a profile's top frames as the view
        names them)."""
        pb = self.pb
        keys = self.engine_keys() if (self.engine_keys is not None and not self.settings.metrics_engine) else set()
        req = pb.service.ExportMetricsServiceRequest()
        rm = req.resource_metrics.add()
        for k, a in resource_attributes(self.settings, dict(snap.context)).items():
            self._attr(rm.resource.attributes, k, a)
        sm = rm.scope_metrics.add()
        sm.scope.name = "graphsignal"
        sm.scope.version = __version__
        metrics: Dict[Tuple[str, str], Any] = {}  # (otlp name, kind) -> Metric
        kinds: Dict[str, str] = {}  # otlp name -> kind
        start, now = int(snap.start_ns or 0), int(snap.taken_ns)
        for v in snap.series:
            if keys and v.key in keys:
                continue
            try:
                self._series(v, sm, metrics, kinds, start, now)
            except (TypeError, ValueError, OverflowError) as e:  # a value protobuf cannot hold: that series only
                self.skipped.once(("value", v.name), "OTLP: %s left out: %s" % (v.name, e), entry=False)
        return req

    # -- one series --------------------------------------------------------------
    def _metric(self, sm: Any, metrics: Dict[Tuple[str, str], Any], kinds: Dict[str, str], name: str, unit: str,
                kind: str, source: str) -> Any:
        """The Metric of this name and kind (made on first use); None when
        the name is taken by another kind."""
        if kinds.setdefault(name, kind) != kind:
            self.skipped.once(("kind", name), "OTLP: %s (%s) left out: %s is already a %s" % (
                source, kind, name, kinds[name]), entry=False)
            return None
        m = metrics.get((name, kind))
        if m is None:
            m = metrics[(name, kind)] = sm.metrics.add()
            m.name, m.unit, m.description = name, unit, source
            if kind == "gauge":
                m.gauge.SetInParent()
            elif kind == "sum":
                m.sum.aggregation_temporality = self.pb.CUMULATIVE
                m.sum.is_monotonic = True
            elif kind == "histogram":
                m.histogram.aggregation_temporality = self.pb.CUMULATIVE
            else:
                m.summary.SetInParent()
        return m

    def _series(self, v: SeriesViewLike, sm: Any, metrics: Dict[Tuple[str, str], Any], kinds: Dict[str, str],
                start: int, now: int) -> None:
        fam = otlp_family(v.name, v.type)
        name, unit, scale = fam.name, fam.unit, fam.scale
        tags = {("tag." + k if k in _OWN_ATTRIBUTES else k): str(x) for k, x in v.tags.items()}
        if v.type in ("gauge", "counter"):
            value: Any = v.state
            if value is None or value != value:
                return
            m = self._metric(sm, metrics, kinds, name, unit, "gauge" if v.type == "gauge" else "sum", v.name)
            if m is not None:
                pt = (m.gauge if v.type == "gauge" else m.sum).data_points.add()
                self._number(pt, _scaled(value, scale), tags, start if v.type == "counter" else 0, now)
        elif v.type == "histogram":
            self._histogram(v, sm, metrics, kinds, fam, tags, start, now)
        elif v.type == "profile":
            # the view's top frames, named once for /metrics and here alike; the (other) of a cut
            # profile is left out (see the module doc)
            frames = v.frames(self.settings.metrics_top_frames)
            m = self._metric(sm, metrics, kinds, name, unit, "sum", v.name)
            ms = self._metric(sm, metrics, kinds, fam.samples, fam.samples_unit, "sum", v.name + " (samples)")
            for f in frames:
                ft = dict(tags, frame=str(f["name"]))
                for k in ("display_name", "category"):
                    if f.get(k):
                        ft["kernel" if k == "display_name" else k] = str(f[k])
                if m is not None:
                    self._number(m.sum.data_points.add(), _scaled(f["value"], scale), ft, start, now)
                if ms is not None:
                    self._number(ms.sum.data_points.add(), f["samples"], ft, start, now)

    def _histogram(self, v: SeriesViewLike, sm: Any, metrics: Dict[Tuple[str, str], Any], kinds: Dict[str, str],
                   fam: Any, tags: Dict[str, str], start: int, now: int) -> None:
        raw_count, total, b = cast(HistogramState, v.state)
        count = _int_or_none(raw_count)
        if count is None:
            return
        name, unit, scale = fam.name, fam.unit, fam.scale
        bins: Any = ()  # upper bounds, ascending
        counts: Any = ()
        if isinstance(b, tuple):  # the engine's own bounds (inf: +Inf)
            bins, counts = b
        elif b is not None:  # our log-linear bins: their upper bounds
            idx, counts = cast(LogBins, b).nonzero()
            bins = histo.BIN_UPPER[idx]
        if not len(bins):  # count and sum only
            m = self._metric(sm, metrics, kinds, name, unit, "summary", v.name)
            if m is not None and total is not None:
                pt = m.summary.data_points.add()
                pt.start_time_unix_nano, pt.time_unix_nano = start, now
                pt.count, pt.sum = count, float(total) * scale
                self._attrs(pt.attributes, tags)
            return
        m = self._metric(sm, metrics, kinds, name, unit, "histogram", v.name)
        if m is None:
            return
        pt = m.histogram.data_points.add()
        pt.start_time_unix_nano, pt.time_unix_nano = start, now
        if isinstance(b, tuple):
            bounds = [float(x) * scale for x in bins if x != _INF]
            buckets = [int(c) for x, c in zip(bins, counts) if x != _INF]
            buckets.append(max(0, count - sum(buckets)))
        else:
            edges = octave_bounds(int(bins[0]), int(bins[-1]))
            # each bin's bucket: the first bound at or above its highest value
            where = np.searchsorted(np.asarray(edges, dtype=np.uint64), np.asarray(bins, dtype=np.uint64), "left")
            acc = np.zeros(len(edges) + 1, dtype=np.int64)
            np.add.at(acc, where, np.asarray(counts, dtype=np.int64))  # integers: exact
            buckets = acc.tolist()
            # the bounds in the sent unit (seconds for a _nanoseconds probe): the buckets
            # hold the same values, so their counts stay exact
            bounds = [float(e) * scale for e in edges]
            vmin, vmax = v.bounds
            if vmin is not None and vmax is not None:
                pt.min, pt.max = float(vmin) * scale, float(vmax) * scale
        pt.explicit_bounds.extend(bounds)
        pt.bucket_counts.extend(buckets)
        pt.count = sum(buckets)
        if total is not None:
            pt.sum = float(total) * scale
        self._attrs(pt.attributes, tags)

    def _number(self, pt: Any, value: Any, tags: Dict[str, str], start: int, now: int) -> None:
        if start:
            pt.start_time_unix_nano = start
        pt.time_unix_nano = now
        if isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
            pt.as_int = value
        else:
            pt.as_double = float(value)
        self._attrs(pt.attributes, tags)

    def _attrs(self, into: Any, tags: Dict[str, str]) -> None:
        for k, x in tags.items():
            self._attr(into, k, x)

    @staticmethod
    def _attr(into: Any, key: str, value: str) -> None:
        kv = into.add()
        kv.key = key
        kv.value.string_value = value


class Exporter:
    """Builds and posts export requests; an exporter of the periodic
    driver (graphsignal.sidecar.periodic), which looks every TICK whether
    one is due; step() is one look, so tests drive it with their own
    clock."""

    name = "graphsignal-otlp"
    what = "OTLP export"

    def __init__(self, store: Any, settings: config.Settings, engine_keys: Optional[Callable[[], Set[Any]]] = None,
                 clock: Callable[[], float] = time.monotonic, rand: Callable[[], float] = random.random,
                 http: Any = None) -> None:
        if not settings.otlp_endpoint:
            raise ValueError("no OTLP endpoint")
        self.store = store
        self.settings = settings
        self.url = settings.otlp_endpoint
        self.shown_url = config.shown_url(self.url)
        self.builder = Builder(settings, engine_keys)
        self.clock = clock
        self.http = http
        self.interval = settings.otlp_interval
        self.retry = retry.Retry("OTLP exports to %s" % self.shown_url,
                                 "the endpoint refused the credentials (check the headers in %s)"
                                 % "OTEL_EXPORTER_OTLP_[METRICS_]HEADERS", store, "otlp", clock, rand)
        self.tick = min(TICK, self.interval)
        self.next_export = clock() + self.interval  # the first after one interval, as OpenTelemetry's readers do
        self.exported = 0

    # -- the periodic driver's exporter ----------------------------------------------------
    def due(self) -> bool:
        return self.clock() >= self.next_export

    def snapshot(self) -> StoreSnapshot:
        snap: StoreSnapshot = self.store.snapshot()
        return snap

    def shutdown(self, deadline: float) -> bool:
        """The final export, its request ending by `deadline` (time.monotonic())."""
        return self.export(self.snapshot(), final_timeout(deadline, CONNECT_TIMEOUT), final=True)

    def step(self, timeout: Any = (CONNECT_TIMEOUT, READ_TIMEOUT), force: bool = False, final: bool = False) -> bool:
        """Exports when due (force: now; final: now, and the last one, at
        exit). Returns True when the endpoint accepted it."""
        if not (force or final) and not self.due():
            return False
        return self.export(self.snapshot(), timeout, final)

    def export(self, snapshot: StoreSnapshot, timeout: Any = (CONNECT_TIMEOUT, READ_TIMEOUT),
               final: bool = False) -> bool:
        """Sends one request of this snapshot (final: the last one, at
        exit). Returns True when the endpoint accepted it."""
        body = self.builder.request(snapshot).SerializeToString()
        headers = dict(self.settings.otlp_headers)
        headers.update({"Content-Type": CONTENT_TYPE, "User-Agent": "graphsignal/%s" % __version__})
        if self.settings.otlp_gzip:
            body = gzip.compress(body, 3)
            headers["Content-Encoding"] = "gzip"
        if self.http is None:
            self.http = api.session(self.url)
        status, reason, after = None, "", None
        try:
            resp = self.http.post(self.url, data=body, headers=headers, timeout=timeout, allow_redirects=False,
                                  stream=True)
            try:
                status = resp.status_code
                after = retry.retry_after(resp.headers.get("Retry-After"))
                reason = _reason_of(status, resp)
            finally:
                resp.close()
        except requests.RequestException as e:
            reason = retry.request_failure(e, timeout)
        self.store.add_counter(BYTES_METRIC, {}, len(body))
        now = self.clock()
        if status is not None and 200 <= status < 300:
            self.exported += 1
            self.store.add_counter(EXPORTS_METRIC, {"result": "accepted"}, 1)
            self.retry.succeeded(now)
            self.next_export = now + self.interval
            return True
        self.store.add_counter(EXPORTS_METRIC, {"result": "failed"}, 1)
        if final:
            # No next try will carry what this one held, and a run shorter
            # than the interval has no other export: say so, whatever the
            # retry policy has said before (its lines promise a retry).
            self._final_failed(status, reason)
            return False
        wait = self.retry.failed(status, reason, now, after)
        # a transient failure is tried again sooner, never later than the normal pace;
        # refused credentials and a Retry-After wait as the policy says
        self.next_export = now + (wait if (status in retry.AUTH_STATUSES or after) else min(wait, self.interval))
        return False

    def _final_failed(self, status: Optional[int], reason: str) -> None:
        if status in retry.AUTH_STATUSES:
            reason = "%s: %s" % (reason, self.retry.auth_hint)
        lost = ("nothing of this run reached it" if not self.exported else
                "what changed since its last accepted export did not reach it")
        msg = "the final OTLP export to %s, at exit, failed: %s; %s" % (self.shown_url, reason, lost)
        logger.warning("graphsignal: %s", msg)
        self.store.add_error("warning", msg, tags={"source": "otlp"})


def _reason_of(status: int, resp: Any) -> str:
    """A failed answer in a few words: the status, and the message of an
    OTLP error body (a google.rpc.Status) or the start of a text one."""
    if 300 <= status < 400:
        return "HTTP %d (redirects are not followed; give the final URL)" % status
    if status < 300:
        return ""
    try:
        raw = resp.raw.read(1024, decode_content=True) or b""
    except Exception:  # a body that cannot be read: the status says enough
        raw = b""
    if "protobuf" in (resp.headers.get("Content-Type") or ""):
        text = _status_message(raw)
    else:
        text = raw.decode("utf-8", "replace")
    # whitespace (a body's trailing newline) folded before control characters are escaped: never "\x0a"
    text = config.printable(" ".join(text.split()))[:200]
    return "HTTP %d%s" % (status, " (%s)" % text if text else "")


def _status_message(raw: bytes) -> str:
    """Field 2 (message) of a google.rpc.Status, read by hand (its module
    is in another package); '' when the bytes are not one."""
    i = 0
    while i < len(raw):
        key, i = _varint(raw, i)
        wire = key & 7
        if wire == 2:
            n, i = _varint(raw, i)
            if key >> 3 == 2:
                return raw[i:i + n].decode("utf-8", "replace")
            i += n
        elif wire == 0:
            _, i = _varint(raw, i)
        else:
            return ""
    return ""


def _varint(raw: bytes, i: int) -> Tuple[int, int]:
    out = shift = 0
    while i < len(raw) and shift < 64:
        b = raw[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7
    return 0, len(raw) + 1  # truncated: the caller's loop ends


def start(store: Any, settings: config.Settings,
          engine_keys: Optional[Callable[[], Set[Any]]] = None) -> Optional[PeriodicDriver]:
    """The running exporter's driver, or None: without GRAPHSIGNAL_OTLP=1,
    without a usable endpoint, or without opentelemetry-proto (one line
    and an error entry each)."""
    if not settings.otlp:
        return None
    problem = None
    if not settings.otlp_endpoint:
        problem = "GRAPHSIGNAL_OTLP=1 but the OTLP endpoint is not an http(s) URL; no OTLP export"
    else:
        try:
            exporter = Exporter(store, settings, engine_keys)
        except ImportError as e:
            problem = "GRAPHSIGNAL_OTLP=1 needs opentelemetry-proto (%s); no OTLP export (%s)" % (INSTALL_HINT, e)
    if problem is not None:
        logger.warning("graphsignal: %s", problem)
        store.add_error("warning", problem, tags={"source": "otlp"})
        return None
    t = PeriodicDriver(exporter)
    t.start()
    return t

