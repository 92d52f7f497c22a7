"""GET /metrics: every signal in the Prometheus text format (OpenMetrics
when the scraper's Accept asks for it).

Mapping, from a /signals series to Prometheus families, by one table
(graphsignal.naming.metrics: names, units, HELP text; the metric list of
graphsignal/reference/metrics.md is made from the same table):

  name      the table's name for our own metrics (Prometheus's naming
            rules: the `graphsignal_` prefix, base units, `_ratio` for
            fractions, `_total` only on counters, the workload's process
            metrics under client_python's names); for others (probes) the
            name with the prefix, units converted by suffix (`_nanoseconds`
            to `_seconds`, `_percent` to `_ratio`, ...); the engine's own
            names only prefixed. Characters outside [a-zA-Z0-9_] as `_`.
  gauge     a gauge; null (not measured) is no sample
  counter   a counter: `<family>_total`
  histogram a histogram. Our log-linear bins (probes: 32 per octave)
            become cumulative buckets at sub-octave edges that are bin
            edges (8 per octave, so Prometheus's histogram_quantile()
            interpolates within 1/8 of an octave; counts exact), from the
            edge of the smallest value seen to that of the largest, plus
            +Inf; a histogram whose values span more than 20 octaves gets
            4 (2 beyond 40) per octave: at most 161 buckets. Engine
            histograms keep the engine's own `le` buckets; engine
            summaries (count and sum only) stay summaries.
  profile   two counters per frame: `<family>_total{frame="..."}` (value)
            and the table's count family (`graphsignal_cuda_kernel_launches_total`;
            `<stem>_samples_total` for probes), for the top N frames by
            value (N = GRAPHSIGNAL_METRICS_TOP_FRAMES, default 50). Kernel
            profiles also carry `kernel` (the display name) and `category`.
  tags      labels: the table's label for well-known tags (`process.pid`
            -> `pid`, `device.uuid` -> `UUID`, `device.index` -> `gpu`,
            `device.bus_id` -> `pci_bus_id`: DCGM exporter's labels),
            others with characters outside [a-zA-Z0-9_] as `_`; a tag that
            would clash with the family's own label (`frame`, `le`,
            `quantile`) or starts with `__` gets a `tag_` prefix. Series of
            a GPU also get `model_name` and `Hostname`; every series gets
            the run's identity labels (service, GRAPHSIGNAL_TAGS).
  gpu_info  `graphsignal_gpu_info` = 1 per GPU resource, labelled gpu, UUID,
            pci_bus_id, model_name, Hostname, driver_version,
            cuda_driver_version.

Engine metrics (what the sidecar scraped from the engine's own endpoint)
are left out unless GRAPHSIGNAL_METRICS_ENGINE=1 or the scrape asks with
`?engine=1`: the engine serves them itself. A name that two series would
both claim (a probe gauge `x_count` beside a histogram `x`, a gauge and a
counter of one name), or two series whose tags give the same labels, is
exported once, for the first in /signals order; the others are counted in
`graphsignal_metrics_conflicting_series`.

Source: the store's snapshot (MetricStore.snapshot(), without JSON), its
series views (graphsignal.signals_model.SeriesViewLike) read directly:
their states, and a profile's frames(top), which the view names. Every
number is what /signals writes and a JSON parser reads back (NaN and
infinities are null, integers beyond 64 bits floats), so /metrics says
what /signals says; a series with a value JSON cannot hold is left out,
as /signals leaves it out. A scrape of /metrics is no read of /signals:
it does not keep the store serializing JSON (MetricStore.prerender).

Cost: the text is written here, not by prometheus_client (whose metric
objects cost a few microseconds per sample): a series' labels are
rendered once, when it is laid out, and each series keeps its rendered
lines, keyed by what it showed (its value, total, count and sum, or its
top frames), so a scrape writes only the series that changed. Sample lines
are the same in both formats and shared; only the family headers differ.
prometheus_client remains the judge: Collector hands the same families to
its encoders, and the tests require both to write the same bytes (over a
store's views, and over a recorded /signals document's:
graphsignal.sidecar.recorded).

The rooms, each below the next:

  labels    the naming rules: labels of tags, context and identity,
            escaping, label templates, units
  buckets   the sub-octave grid of a probe histogram's buckets
  lines     what a row writes (both formats, and the judge's Samples),
            and the line heads it keeps
  layout    the planner: a view read as plain numbers, its families,
            labels and rows, name and label clashes
  cache     what one scrape keeps for the next: update in place, or
            replan keeping every unchanged row's lines
  here      Exposition (one store's /metrics), Collector (the judge),
            reference()
"""
import threading
from typing import Callable, Dict, Iterator, Mapping, Optional, Sequence, Set, Tuple

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from graphsignal import config
from graphsignal.signals_model import SeriesKey, SeriesViewLike, SnapshotSource
from graphsignal.sidecar.exposition import cache
from graphsignal.sidecar.exposition.buckets import MAX_BUCKETS, PER_OCTAVE, sub_octave_buckets
from graphsignal.sidecar.exposition.labels import EMPTY_CONTEXT, Context, context_of, labels_of
from graphsignal.sidecar.exposition.layout import CONFLICTS_METRIC, GPU_INFO_METRIC, Planner, read
from graphsignal.sidecar.exposition.lines import MAX_TOP_FRAMES, samples

__all__ = ["Collector", "Context", "Exposition", "context_of", "labels_of", "reference", "sub_octave_buckets",
           "DEFAULT_TOP_FRAMES", "MAX_TOP_FRAMES", "MAX_BUCKETS", "PER_OCTAVE", "CONFLICTS_METRIC",
           "GPU_INFO_METRIC"]

DEFAULT_TOP_FRAMES = config.DEFAULT_TOP_FRAMES


class Collector:
    """prometheus_client's collector protocol over series views: collect()
    yields the Metric families of the module doc (the judge of what
    Exposition writes)."""

    def __init__(self, series: Sequence[SeriesViewLike], top_frames: int = DEFAULT_TOP_FRAMES,
                 engine_keys: Optional[Set[SeriesKey]] = None, engine: bool = False,
                 ctx: Context = EMPTY_CONTEXT) -> None:
        """series: series views in /signals order (a snapshot's, or a
        /signals document's: graphsignal.sidecar.recorded.views_of);
        engine_keys: the set of (name, type, tags tuple) that came from the
        engine's endpoint; engine: export those too; ctx: context_of()."""
        self.series = series
        self.top_frames = top_frames
        self.engine_keys = engine_keys
        self.engine = engine
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        planner = Planner(self.engine_keys, self.engine, self.top_frames, self.ctx)
        for v in self.series:
            r = read(v, self.top_frames)
            if r is not None:
                planner.place(v, r)
        for fam, rows in planner.plan():
            m = fam.metric()
            for row in rows:
                m.samples.extend(samples(row.spec))
            yield m


class Exposition:
    """Renders /metrics for one store. engine_keys: callable -> set of
    series keys that came from the engine's endpoint (empty when there is
    none); top_frames: frames exported per profile (1..MAX_TOP_FRAMES);
    engine: re-export the engine's series (a scrape's ?engine= overrides
    it); identity: labels every series gets (service, tags). Settings come
    as these values (from_settings(): config.Settings')."""

    def __init__(self, store: SnapshotSource, engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None,
                 top_frames: int = DEFAULT_TOP_FRAMES, engine: bool = False,
                 identity: Optional[Mapping[str, str]] = None) -> None:
        if not 1 <= top_frames <= MAX_TOP_FRAMES:
            raise ValueError("top_frames must be between 1 and %d, not %r" % (MAX_TOP_FRAMES, top_frames))
        self.store = store
        self.engine_keys = engine_keys
        self.top_frames = top_frames
        self.engine = engine
        self.identity = dict(identity or {})
        self._lock = threading.Lock()
        self._states: Dict[bool, cache.State] = {}  # engine -> cache.State
        self.rendered_samples = 0  # sample lines written afresh in the last render
        self.replanned = False  # the last render laid out every series afresh

    @classmethod
    def from_settings(cls, store: SnapshotSource, settings: config.Settings,
                      engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None) -> "Exposition":
        """An Exposition as the run's settings configure it
        (GRAPHSIGNAL_METRICS_TOP_FRAMES, GRAPHSIGNAL_METRICS_ENGINE, the
        run's identity labels)."""
        return cls(store, engine_keys, settings.metrics_top_frames, settings.metrics_engine,
                   config.identity_labels(settings))

    def _keys(self) -> Set[SeriesKey]:
        return self.engine_keys() if self.engine_keys is not None else set()

    def collector(self, engine: Optional[bool] = None) -> Collector:
        """The plain collector over the store as it is now (no cache)."""
        snap = self.store.snapshot()
        return Collector(snap.series, self.top_frames, self._keys(), self.engine if engine is None else engine,
                         context_of(snap, self.identity))

    def render(self, accept: Optional[str] = None, engine: Optional[bool] = None) -> Tuple[bytes, str]:
        """(body bytes, content type) for a scrape with this Accept header.
        engine: re-export engine metrics (None: as configured)."""
        _, content_type = choose_encoder(accept or "")
        om = content_type.startswith("application/openmetrics-text")
        engine = self.engine if engine is None else engine
        snap = self.store.snapshot()
        keys = self._keys()
        ctx = context_of(snap, self.identity)
        with self._lock:
            st = self._states.get(engine)
            if st is None:
                st = self._states[engine] = cache.State()
            body, self.replanned, self.rendered_samples = cache.render(st, snap.series, self.top_frames, keys,
                                                                       engine, ctx, om)
            return body, content_type


def reference(collector: Collector, om: bool = False) -> bytes:
    """What prometheus_client's own encoder writes for a collector (the
    judge Exposition.render is held to)."""
    if om:
        from prometheus_client.openmetrics.exposition import generate_latest as om_latest
        body: bytes = om_latest(collector)
        return body
    from prometheus_client.exposition import generate_latest
    text: bytes = generate_latest(collector)  # a collector stands in for a registry
    return text
