"""The upload body, written down once: what the sidecar's uploader
(graphsignal.sidecar.upload) POSTs to /api/v1/ingest and what
graphsignal-server takes, as TypedDicts over the /signals document's own
(graphsignal.signals_model), with the bounds a server holds a body to
(BOUNDS). The server checks every body with the checker
graphsignal.typecheck generates from them (graphsignal.fleet.ingest);
nothing restates the shape or a limit.

    {"schema": 2,
     "instance_id": "...",            # context["instance.id"]
     "context": {...},                # /signals's context
     "profiler": {"version": ...},
     "start_ns": ..., "ended_ns": ..., "exit_status": ..., "payload_ns": ...,
     "seq": 7,                        # attempt number of this run, from 1
     "metrics": [...],                # the series whose value changed since the last accepted upload,
                                      # in /signals's shape, each with its `state` (schema 2)
     "errors": [...],                 # new errors, and errors whose count grew
     "resources": [...],              # only when they changed (last_seen_ts aside)
     "engine": {...},                 # the engine summary, when it changed
     "dropped_errors": 0}             # errors the sidecar's buffer dropped so far (cumulative)

Schema 2 (what this sidecar sends) adds to each series its `state`: its
cumulative state in graphsignal.windowmath's JSON form (a gauge's value,
a counter's total, a histogram's [count, sum, bins]), so the server keeps
and windows states as the sidecar's own history does. A profile's stats
already list its frames exactly up to the payload's cut, so beside them
its `state` is {frame: [value, samples]} of the frames they do not list
(those its "(other)" sums; {} for a profile under the cut): the listed
frames and these are every frame it keeps, joined once on the server
(windowmath.stored_state's rest). Schema 1 (older sidecars) has no
states; the server still takes it and converts its stats once.

Objects are open: a key a newer sender adds passes as it is (an
unknown key's value is bounded only by the body's size and nesting,
graphsignal.fleet.ingest). This module imports only the model, the
window maths and the histogram layout.
"""
from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

from graphsignal import histo
from graphsignal.signals_model import (Context, CounterMetric, ErrorEntry, GaugeMetric, HistogramMetric, Metric,
                                       Profiler, ProfileMetric, Resource)
from graphsignal.typecheck import Bound
from graphsignal.windowmath import MAX_FRAMES, MAX_FRAMES_KEPT

__all__ = ["SCHEMA", "SCHEMAS", "LogBins", "BucketBins", "HistogramState", "FrameState", "GaugeUpload",
           "CounterUpload", "HistogramUpload", "ProfileUpload", "UploadMetric", "Upload1", "Upload2", "Upload",
           "BOUNDS", "DEFAULTS", "MAX_SERIES", "MAX_ERRORS", "MAX_RESOURCES", "MAX_BINS", "MAX_TAGS", "MAX_NAME",
           "MAX_TEXT"]

SCHEMA = 2  # what the sidecar sends
SCHEMAS = (1, 2)  # what graphsignal-server takes

MAX_SERIES = 50_000  # series in one upload (a sidecar holds at most 5,000)
MAX_ERRORS = 2000  # errors in one upload (the sidecar's buffer holds 1,000)
MAX_RESOURCES = 10_000
MAX_BINS = 4096  # a histogram's bins (the log-linear layout has histo.NBINS, 1,920; an engine's its own)
MAX_TAGS = 64  # tags of a series, an error, a resource or the run
MAX_NAME = 512  # characters of a metric name, tag key, error level, resource kind or context key
MAX_TEXT = 1 << 18  # characters of any other string (a tag value, frame name, message)
MAX_CONTEXT = 1000  # keys of the context, a resource's attributes or the profiler
INT64_MAX = (1 << 63) - 1  # a bin's count: what the window maths hold in int64
U64_MAX = (1 << 64) - 1  # every other integer: graphsignal-server stores 0 to 2^64-1 exactly


# -- a series' state, in windowmath's JSON form ----------------------------------------------------------------
class LogBins(TypedDict):
    """Log-linear bins (graphsignal.histo's layout): the indices of the
    non-empty ones, ascending, and their cumulative counts."""

    idx: List[int]
    counts: List[int]


class BucketBins(TypedDict):
    """An engine's buckets: upper bounds (ascending; null: +Inf) and
    per-bucket counts (not cumulative)."""

    le: List[Optional[float]]
    counts: List[int]


HistogramState = Tuple[int, Optional[float], Optional[Union[LogBins, BucketBins]]]  # count, sum, bins
FrameState = Tuple[float, float]  # a frame's cumulative value and samples


class GaugeUpload(GaugeMetric):
    state: Optional[float]  # the value


class CounterUpload(CounterMetric):
    state: Optional[float]  # the total


class HistogramUpload(HistogramMetric):
    state: HistogramState


class ProfileUpload(ProfileMetric):
    state: Dict[str, FrameState]  # the frames its stats do not list (see the module doc)


UploadMetric = Union[GaugeUpload, CounterUpload, HistogramUpload, ProfileUpload]


# -- the body ------------------------------------------------------------------------------------------------------
class _Head(TypedDict):
    instance_id: str
    context: Context
    payload_ns: int


class _Rest(_Head, total=False):
    profiler: Optional[Profiler]
    start_ns: Optional[int]
    ended_ns: Optional[int]
    exit_status: Optional[int]  # an exit code, or -N for a death by signal N
    seq: Optional[int]
    errors: List[ErrorEntry]
    resources: Optional[List[Resource]]
    engine: Optional[Dict[str, Any]]
    dropped_errors: Optional[int]


class _Metrics1(_Rest, total=False):
    metrics: List[Metric]


class _Metrics2(_Rest, total=False):
    metrics: List[UploadMetric]


class Upload1(_Metrics1):
    """An upload of schema 1: series without states."""

    schema: Literal[1]


class Upload2(_Metrics2):
    """An upload of schema 2: each series with its state."""

    schema: Literal[2]


Upload = Union[Upload1, Upload2]

_NAME = Bound(1, MAX_NAME)
_TAGS = Bound(0, MAX_TAGS, keys=_NAME)
_COUNT = Bound(0, INT64_MAX)

_BODY = {  # the body's own fields, in either schema
    "instance_id": Bound(1, 256),
    "context": Bound(0, MAX_CONTEXT, keys=Bound(1, MAX_NAME)),
    "profiler": Bound(0, MAX_CONTEXT),
    "exit_status": Bound(-128, 255),
    "errors": Bound(0, MAX_ERRORS),
    "resources": Bound(0, MAX_RESOURCES),
    "metrics": Bound(0, MAX_SERIES),
}

# graphsignal.typecheck's bounds, by "Type.field" (the TypedDict checked, its inherited keys too) or
# "field"; "[]": its items; where nothing here says otherwise, DEFAULTS.
DEFAULTS: Dict[Any, Bound] = {str: Bound(0, MAX_TEXT), int: Bound(0, U64_MAX)}
BOUNDS: Dict[str, Bound] = {
    **{"%s.%s" % (t.__name__, k): b for t in (Upload1, Upload2) for k, b in _BODY.items()},
    "tags": _TAGS,
    "Context.service.name": _NAME,
    "ErrorEntry.level": _NAME,
    "Resource.kind": _NAME,
    "Resource.attributes": Bound(0, MAX_CONTEXT, keys=Bound(0, MAX_NAME)),
    **{"%s.name" % t.__name__: _NAME for t in (GaugeMetric, CounterMetric, HistogramMetric, ProfileMetric,
                                               GaugeUpload, CounterUpload, HistogramUpload, ProfileUpload)},
    # a profile's frames: the sidecar lists at most MAX_FRAMES (room for other versions)
    "ProfileStats.frames": Bound(0, 4 * MAX_FRAMES),
    "HistogramStats.bins": Bound(0, MAX_BINS),
    "HistogramStats.counts": Bound(0, MAX_BINS, like="bins"),
    "HistogramStats.counts[]": _COUNT,
    "LogBins.idx": Bound(0, histo.NBINS),
    "LogBins.idx[]": Bound(0, histo.NBINS - 1),
    "LogBins.counts": Bound(0, histo.NBINS, like="idx"),
    "LogBins.counts[]": _COUNT,
    "BucketBins.le": Bound(0, MAX_BINS),
    "BucketBins.counts": Bound(0, MAX_BINS, like="le"),
    "BucketBins.counts[]": _COUNT,
    "ProfileUpload.state": Bound(0, MAX_FRAMES_KEPT + 1, keys=Bound(0, MAX_TEXT)),
}
