"""Series views of a recorded /signals document: its `metrics`, decoded
(a payload file, a fixture in tests/data, what /signals answered), read
through the same view as the store's series (graphsignal.signals_model.
SeriesViewLike), so /metrics' judge (graphsignal.sidecar.exposition.
Collector) and OTLP's Builder take either.

A view's state is the one its `stats` give (graphsignal.windowmath.
state_of); a profile's frames(top) are the document's, without the cut's
"(other)" (frames_folded), named by this process's namer as the store
names its own (graphsignal.naming.annotate; a name the document carries
is not trusted to be this version's). Its stats() are the document's as
they are; encoded() and fingerprint its JSON.

Guards: a document's frame dicts are never changed (frames(top) copies
them), and a series of a type the model has no state for is refused with
a ValueError naming it.
"""
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, cast

from graphsignal import naming, windowmath
from graphsignal.jsonsafe import dumps
from graphsignal.signals_model import (OTHER_FRAME, Bounds, Frame, SeriesKey, SeriesState, SeriesStats,
                                       SeriesViewLike)

__all__ = ["RecordedView", "views_of"]

_TYPES = (windowmath.GAUGE, windowmath.COUNTER, windowmath.HISTOGRAM, windowmath.PROFILE)
Annotate = Callable[[Optional[str], List[Frame]], Any]


class RecordedView:
    """One series of a /signals document (a metric dict: name, type, tags,
    stats, updated_ns), as a view. created: its place in the document."""

    __slots__ = ("name", "type", "tags", "updated_ns", "created", "state", "bounds", "_metric", "_annotate",
                 "_shown", "_json")

    def __init__(self, metric: Mapping[str, Any], created: int = 0,
                 annotate: Optional[Annotate] = naming.annotate) -> None:
        type_ = metric.get("type")
        if type_ not in _TYPES:
            raise ValueError("series %r: type %r is none of %s" % (metric.get("name"), type_, ", ".join(_TYPES)))
        stats = metric.get("stats") or {}
        self.name: str = metric["name"]
        self.type: str = type_
        self.tags: Mapping[str, str] = metric.get("tags") or {}
        self.updated_ns: Optional[int] = metric.get("updated_ns")
        self.created = created
        self.state: SeriesState = windowmath.state_of(type_, stats)
        self.bounds: Bounds = (stats.get("min"), stats.get("max")) if type_ == windowmath.HISTOGRAM else (None, None)
        self._metric = metric
        self._annotate = annotate
        self._shown: Optional[Tuple[int, List[Frame]]] = None
        self._json: Optional[bytes] = None

    @property
    def key(self) -> SeriesKey:
        return (self.name, self.type, tuple(sorted(self.tags.items())))

    def stats(self) -> SeriesStats:
        return cast(SeriesStats, self._metric.get("stats") or {})

    def frames(self, top: int) -> List[Frame]:
        if self.type != windowmath.PROFILE:
            return []
        shown = self._shown
        if shown is not None and shown[0] == top:
            return shown[1]
        stats = self._metric.get("stats") or {}
        listed: Sequence[Mapping[str, Any]] = stats.get("frames") or ()
        if "frames_folded" in stats:  # the cut's (other): not a sum that only grows
            listed = [f for f in listed if f["name"] != OTHER_FRAME]
        frames: List[Frame] = [{"name": f["name"], "value": f["value"], "samples": f["samples"]} for f in listed[:top]]
        if self._annotate is not None and frames:
            self._annotate(self.name, frames)
        self._shown = (top, frames)
        return frames

    @property
    def fingerprint(self) -> bytes:
        # as a store's view makes it: the series' JSON up to its updated_ns (its closing brace not yet written)
        return dumps({"name": self.name, "type": self.type, "tags": self.tags, "stats": self.stats()})[:-1]

    def encoded(self) -> bytes:
        j = self._json
        if j is None:
            j = self._json = dumps({"name": self.name, "type": self.type, "tags": self.tags, "stats": self.stats(),
                                    "updated_ns": self.updated_ns})
        return j


def views_of(metrics: Sequence[Mapping[str, Any]], annotate: Optional[Annotate] = naming.annotate
             ) -> List[SeriesViewLike]:
    """Views of a /signals document's `metrics`, in its order."""
    return [RecordedView(m, i, annotate) for i, m in enumerate(metrics)]
