"""The /signals document's shape and the store snapshot it is rendered from.

The TypedDicts below are the payload as readers see it (SKILL.md
describes it for agents; units are in the names). graphsignal.signals_schema turns them
into the JSON Schema shipped with the package
(graphsignal/schema/signals.schema.json): a change here is a change of
the payload.

StoreSnapshot is the store at one moment (graphsignal.sidecar.store makes
it). Its series and history are read through the protocols below, so this
module, and every reader that needs only it (graphsignal.engine_summary,
which graphsignal-top and graphsignal-diff call too), imports nothing of
the sidecar. What a series is, is said here and in graphsignal.windowmath,
once: its view (SeriesViewLike: type, state, stats, frames, fingerprint),
the types of its state (SeriesState) and of its payload `stats`; the
forms of the states and the maths over them are windowmath's.

This module imports nothing of graphsignal.
"""
from typing import (TYPE_CHECKING, Any, Collection, Dict, Iterator, List, Literal, Mapping, Optional, Protocol,
                    Sequence, Tuple, TypedDict, Union)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Profiler", "Frame", "GaugeStats", "CounterStats", "HistogramStats", "ProfileStats", "GaugeMetric",
           "CounterMetric", "HistogramMetric", "ProfileMetric", "Metric", "ErrorEntry", "Resource", "Context",
           "HistorySeries", "HistoryBlock", "FindingEvidence", "FindingImpact", "FindingChange",
           "FindingConfirm", "Finding", "Signals",
           "SeriesKey", "Number", "GaugeState", "CounterState", "Buckets", "LogBins", "HistogramBins",
           "HistogramState", "ProfileState", "SeriesState", "Bounds", "SeriesStats", "SeriesViewLike",
           "HistoryPointLike", "HistoryViewLike", "StoreSnapshot", "SnapshotSource"]


# -- the document ----------------------------------------------------------------------
# JSON has one number type: `float` below is any JSON number (an integer too), `int`
# an integer. Integers beyond 64 bits are written as floats (graphsignal.sidecar.store's
# module doc), so a total or a sum is a float.
class Profiler(TypedDict):
    version: str


class _FrameBase(TypedDict):
    name: str
    value: float  # in the profile's unit (its name says it)
    samples: int


class Frame(_FrameBase, total=False):
    """A profile frame; kernel profiles add display_name and category
    (graphsignal.kernel_names)."""

    display_name: str
    category: str


class GaugeStats(TypedDict):
    value: Optional[float]  # None: not measured


class CounterStats(TypedDict):
    total: Optional[float]  # since start; None: not measured


class HistogramStats(TypedDict):
    """Since start. bins: upper bounds of the non-empty bins (probes: log-linear
    bins; engines: their `le` buckets, None for +Inf), counts: per bin.
    min and max are null for an engine's buckets (not measured)."""

    count: int
    sum: Optional[float]  # None: an engine that exports no _sum
    min: Optional[float]
    max: Optional[float]
    mean: Optional[float]
    p50: Optional[float]
    p95: Optional[float]
    p99: Optional[float]
    bins: List[Optional[float]]
    counts: List[int]


# the frame that holds what a cap folded: names past a writer's or the store's
# table, and in /signals the frames past the payload's cut (frames_folded)
OTHER_FRAME = "(other)"


class _ProfileStatsBase(TypedDict):
    frames: List[Frame]  # largest value first


class ProfileStats(_ProfileStatsBase, total=False):
    """frames_folded: present when the profile had more frames than the
    payload lists (graphsignal.windowmath.MAX_FRAMES): how many distinct
    names were summed into the one frame "(other)", whose value and samples
    are the rest of the profile's (frames still sum to the whole)."""

    frames_folded: int


class GaugeMetric(TypedDict):
    """A series (graphsignal.sidecar.series); updated_ns: its last change
    (epoch ns), None before its first."""

    name: str
    type: Literal["gauge"]
    tags: Dict[str, str]
    stats: GaugeStats
    updated_ns: Optional[int]


class CounterMetric(TypedDict):
    name: str
    type: Literal["counter"]
    tags: Dict[str, str]
    stats: CounterStats
    updated_ns: Optional[int]


class HistogramMetric(TypedDict):
    name: str
    type: Literal["histogram"]
    tags: Dict[str, str]
    stats: HistogramStats
    updated_ns: Optional[int]


class ProfileMetric(TypedDict):
    name: str
    type: Literal["profile"]
    tags: Dict[str, str]
    stats: ProfileStats
    updated_ns: Optional[int]


Metric = Union[GaugeMetric, CounterMetric, HistogramMetric, ProfileMetric]


class ErrorEntry(TypedDict):
    level: str  # "warning" | "error" | ...
    message: str
    exception: Optional[str]
    tags: Dict[str, str]
    timestamp_ns: int  # first seen
    last_ns: int  # last seen
    count: int
    resolved_ns: Optional[int]  # when its condition cleared (None: current)


class Resource(TypedDict):
    kind: str
    tags: Dict[str, str]
    attributes: Dict[str, Any]
    first_seen_ts: int  # epoch seconds
    last_seen_ts: int


_ContextKeys = TypedDict("_ContextKeys", {
    "instance.id": str,  # the run (one graphsignal-run)
    "host.name": str,
    "service.name": str,  # GRAPHSIGNAL_SERVICE or OTEL_SERVICE_NAME; absent when neither is set
    "tags": Dict[str, str],  # GRAPHSIGNAL_TAGS; absent when none
    # --cuda-trace off (GRAPHSIGNAL_CUDA_TRACE=0) or light (the driver interposer); absent when CUPTI traces CUDA
    "cuda.trace": Literal["off", "light"],
}, total=False)


class Context(_ContextKeys, total=False):
    """Who is reporting: instance.id (the run) and host.name always; service.name and tags when the
    run was given them (GRAPHSIGNAL_SERVICE or OTEL_SERVICE_NAME, GRAPHSIGNAL_TAGS); cuda.trace "off"
    when the run kept CUPTI out of the workload (--cuda-trace off): no cuda_* series were collected."""


class FindingEvidence(TypedDict):
    """One number a finding used: `value` of `stat` of `series` (a metric
    name, `engine.KEY` for the engine summary, `errors` for console
    entries), with the tags it was read under, compared by `op` with
    `threshold` (null: a fact, not a comparison). unit: its unit ("" for a
    plain number, "fraction" for 0-1 shares)."""

    series: str
    tags: Dict[str, str]
    stat: str
    value: Optional[float]
    op: Literal[">=", "<=", "==", ""]
    threshold: Optional[float]
    unit: str


class FindingImpact(TypedDict):
    """What is at stake: `share` (0-1) of `of` (the run's wall time, the
    GPU's time, the tokens per second, the requests, or the data the
    profiler collected), an estimate; text says how it was estimated."""

    of: Literal["wall_time", "gpu_time", "tokens_per_second", "requests", "data"]
    share: float
    text: str


class FindingChange(TypedDict):
    """What to try, for one target: an engine (llamacpp, vllm, sglang,
    trtllm), pytorch (a code pattern), cuda (any CUDA program) or
    graphsignal (how the run was profiled)."""

    target: str
    text: str


class FindingConfirm(TypedDict):
    """A series that should move in the next run after the change, and
    which way (down, up, or zero: gone)."""

    series: str
    tags: Dict[str, str]
    direction: Literal["down", "up", "zero"]


class Finding(TypedDict):
    """A cause the payload shows (graphsignal.findings): rules over the
    same document, never guesses without evidence. span: what it was
    read over (`run`: since the workload's launch; `window`: the ?window=N
    window) and span_seconds its length."""

    id: str
    family: str
    title: str
    span: Literal["run", "window"]
    span_seconds: float
    evidence: List[FindingEvidence]
    impact: FindingImpact
    confidence: Literal["high", "medium", "low"]
    change: List[FindingChange]
    confirm: List[FindingConfirm]


class _SignalsBase(TypedDict):
    profiler: Profiler
    payload_ns: int
    start_ns: int  # the workload's launch
    ended_ns: Optional[int]  # None while the workload runs
    exit_status: Optional[int]  # its exit code, or -N for a death by signal N
    context: Context
    metrics: List[Metric]  # in order of name, tags, type
    errors: List[ErrorEntry]  # oldest first
    resources: List[Resource]
    engine: Optional[Dict[str, Any]]  # graphsignal.engine_summary; None without an engine
    findings: List[Finding]  # graphsignal.findings: largest impact first; over the window with ?window=N


class _HistorySeriesBase(TypedDict):
    name: str
    type: Literal["gauge", "counter", "profile"]
    tags: Dict[str, str]


class HistorySeries(_HistorySeriesBase, total=False):
    """One series of a history block, one entry per point of times_ns
    (null: not measured then). values: a gauge's reading at each point, or
    a counter's increase per second over the interval ending there (the
    first is null). frames: a profile's increase per second by group;
    group says how its frames were grouped (category, frame, total)."""

    values: List[Optional[float]]
    group: Literal["category", "frame", "total"]
    frames: Dict[str, List[Optional[float]]]


class HistoryBlock(TypedDict):
    """The recent values of selected series (graphsignal.timeline): with
    ?history=N, in the payload --output writes, and from graphsignal-server's
    /api/v1/history (one point a minute there)."""

    seconds: float  # asked for
    interval_seconds: float  # the nominal spacing of the points
    start_ns: Optional[int]
    end_ns: Optional[int]
    times_ns: List[int]
    series: List[HistorySeries]
    series_omitted: int


class Signals(_SignalsBase, total=False):
    """GET /signals: every key but `window` and `history` is always there."""

    window: Dict[str, Any]  # with ?window=N (graphsignal.sidecar.windows)
    history: HistoryBlock  # with ?history=N, and in the final payload (graphsignal.timeline)


# -- what a snapshot holds ---------------------------------------------------------------
SeriesKey = Tuple[str, str, Tuple[Tuple[str, str], ...]]  # (name, type, sorted tags)

# A series' state: what it holds since it began, at one moment (immutable). The forms, by
# the series' type, are graphsignal.windowmath's (its module doc says them; its maths read
# them); the types below name them, for every reader. Numbers may be numpy scalars too.
Number = Union[int, float]
GaugeState = Optional[Number]  # value; None: not measured
CounterState = Optional[Number]  # total; None: not measured
Buckets = Tuple[Tuple[float, ...], Tuple[int, ...]]  # an engine's (le upper bounds, per-bucket counts)


class LogBins(Protocol):
    """A histogram's cumulative log-linear bin counts (graphsignal.windowmath's
    SparseBins and DeltaBins), over graphsignal.histo's bins."""

    def dense(self) -> "npt.NDArray[np.int64]":
        """Every bin's count (histo.NBINS of them)."""
        ...

    def nonzero(self) -> "Tuple[npt.NDArray[Any], npt.NDArray[Any]]":
        """(bin indices, counts) of the bins that are not empty, ascending."""
        ...


HistogramBins = Union[None, LogBins, Buckets]  # None: no bins
HistogramState = Tuple[int, Optional[Number], HistogramBins]  # (count, sum (None: not known), bins)
ProfileState = Mapping[str, Sequence[Any]]  # {frame: (value, samples)}, both cumulative
SeriesState = Union[GaugeState, HistogramState, ProfileState]
Bounds = Tuple[Optional[Number], Optional[Number]]  # (min, max) ever observed; None: not measured
SeriesStats = Union[GaugeStats, CounterStats, HistogramStats, ProfileStats]


class SeriesViewLike(Protocol):
    """One series as of a snapshot, immutable: how every reader (the
    payload, windows, the engine summary, /metrics, OTLP, the uploader)
    reads a series. graphsignal.sidecar.series.SeriesView is the store's;
    graphsignal.sidecar.recorded makes them from a recorded /signals
    document.

    type: the payload's (gauge, counter, histogram, profile); state: its
    state in the form of its type (SeriesState, above); bounds: a
    histogram's exact (min, max) since start where measured (they bound a
    window's quantiles too), else (None, None); created: the order series
    were made in."""

    name: str
    type: str
    tags: Mapping[str, str]
    updated_ns: Optional[int]
    created: int

    @property
    def state(self) -> SeriesState: ...

    @property
    def bounds(self) -> Bounds: ...

    @property
    def key(self) -> SeriesKey: ...

    def stats(self) -> SeriesStats:
        """The payload's `stats` (since start), kernel frames named."""
        ...

    def frames(self, top: int) -> List[Frame]:
        """A profile's largest frames as the payload lists them, at most
        `top`, without the "(other)" of the payload's cut (what it holds
        changes with the cut: no sum that only grows); a kernel frame has
        its display_name and category. Named once per view and kept (a
        second call with the same top costs nothing); shared: readers
        never change them. Others: []."""
        ...

    @property
    def fingerprint(self) -> bytes:
        """The series' value identity: its payload JSON up to updated_ns
        ({name, type, tags, stats}, its closing brace left off), so equal
        for a series that was only touched (set again to what it held),
        different for any change the payload would show (a profile's
        frames past the cut move its "(other)"'s sums), and never equal
        for two series. Stable across views and processes (bytes:
        hashable, comparable, storable); costs a slice of encoded(), which
        the payload and the uploader share. Raises what encoded()
        raises."""
        ...

    def encoded(self) -> bytes:
        """{name, type, tags, stats, updated_ns} as the payload's JSON
        bytes: the same object on every call."""
        ...


class HistoryPointLike(Protocol):
    """{series key: cumulative state} as of one history snapshot
    (graphsignal.sidecar.history.HistorySnapshot)."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def __getitem__(self, key: Any) -> Any: ...

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[Any]: ...

    def items_named(self, names: Collection[str]) -> List[Tuple[Any, Any]]: ...

    def has_name(self, name: str) -> bool: ...


class HistoryViewLike(Protocol):
    """The per-second history as of one snapshot, a sequence of (ts_ns,
    HistoryPointLike), oldest first (graphsignal.sidecar.history.HistoryView)."""

    times: Tuple[int, ...]
    max_snapshots: int

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Tuple[int, HistoryPointLike]: ...

    def __iter__(self) -> Iterator[Tuple[int, HistoryPointLike]]: ...

    def __reversed__(self) -> Iterator[Tuple[int, HistoryPointLike]]: ...

    def span(self, seconds: float) -> Optional[Tuple[int, int]]: ...

    def seconds_between(self, start: int, end: int) -> float: ...

    def kind(self, key: Any) -> Optional[str]:
        """The series' type (None: not kept)."""
        ...

    def runs(self, key: Any, start: int, end: int) -> List[Tuple[Any, int]]: ...


class StoreSnapshot:
    """The store at one moment, immutable, read without the store's lock.

    taken_ns: when (epoch ns); start_ns: when the workload was launched (or
    the store began); ended_ns, exit_status: the workload's end and exit
    status (None while it runs); context:
    {key: value}; errors: the kept error entries (dicts), oldest first;
    errors_total: entries ever added; resources: resource dicts in payload
    order; series: SeriesViews in payload order (name, tags, type);
    encoded: their JSON (bytes) when taken with encode=True, without any
    that could not be serialized; history: the HistoryView; max_frames:
    the frames a profile lists in the payload, the largest first."""

    __slots__ = ("taken_ns", "start_ns", "ended_ns", "exit_status", "context", "errors", "errors_total",
                 "resources", "series", "encoded", "history", "max_frames")
    taken_ns: int
    start_ns: int
    ended_ns: Optional[int]
    exit_status: Optional[int]
    context: Mapping[str, Any]
    errors: Tuple[ErrorEntry, ...]
    errors_total: int
    resources: Tuple[Resource, ...]
    series: Tuple[SeriesViewLike, ...]
    encoded: Optional[Tuple[bytes, ...]]
    history: HistoryViewLike
    max_frames: int

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a StoreSnapshot is immutable")

    def named(self, names: Collection[str]) -> List[SeriesViewLike]:
        """The series with one of these names, in the order they were made."""
        return sorted((v for v in self.series if v.name in names), key=lambda v: v.created)


class SnapshotSource(Protocol):
    """What hands out StoreSnapshots (graphsignal.sidecar.store.MetricStore),
    for readers that need nothing else of the store."""

    def snapshot(self, encode: bool = False) -> StoreSnapshot: ...
