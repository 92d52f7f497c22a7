"""/metrics' histogram buckets: our log-linear bins (graphsignal.histo, 32
per octave) as Prometheus's cumulative `le` buckets.

The buckets are a grid of edges at `per_octave` equal parts of each
power of two (8, so histogram_quantile() interpolates within 1/8 of an
octave), from the edge of the smallest value seen to that of the largest.
Every grid edge is a bin edge, so each bucket's count is exact, never
interpolated. It guards against a page a scraper chokes on: a histogram
whose values span more than 20 octaves gets 4 edges per octave (2 beyond
40, 1 beyond 80), so one histogram has at most MAX_BUCKETS finite
buckets; and the `le` strings of a grid are rendered once per unit and
kept (at most 256 grids and units).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt
from prometheus_client.utils import floatToGoString

from graphsignal.sidecar.exposition.labels import Conv, conv

__all__ = ["PER_OCTAVE", "MAX_BUCKETS", "GRIDS", "sub_octave", "sub_octave_buckets", "grid_les"]

PER_OCTAVE = 8  # buckets per octave of a probe histogram
MAX_BUCKETS = 160  # finite buckets of one histogram at most


def _grid(per_octave: int) -> "npt.NDArray[np.uint64]":
    edges = [0]
    for e in range(64):
        lo = 1 << e
        n = min(lo, per_octave)
        step = lo // n
        edges.extend(lo + step * j - 1 for j in range(1, n + 1))
    return np.array(edges, dtype=np.uint64)


GRIDS = {d: _grid(d) for d in (8, 4, 2, 1)}


def sub_octave(bins: Sequence[Any], counts: Sequence[Any],
               per_octave: int = PER_OCTAVE) -> Optional[Tuple[int, int, List[int]]]:
    """(per octave, index of the first edge in its grid, cumulative counts)
    of sub_octave_buckets; None for no bins."""
    if len(bins) == 0:
        return None
    ub = np.asarray(bins, dtype=np.uint64)
    span = int(ub[-1]).bit_length() - int(ub[0]).bit_length() + 1
    d = per_octave
    while d > 1 and span * d > MAX_BUCKETS:
        d //= 2
    idx = np.searchsorted(GRIDS[d], ub, side="left")
    lo, hi = int(idx[0]), int(idx[-1])
    per = np.bincount(idx - lo, weights=np.asarray(counts, dtype=np.float64), minlength=hi - lo + 1)
    return d, lo, [int(c) for c in np.cumsum(per).tolist()]


def sub_octave_buckets(bins: Sequence[Any], counts: Sequence[Any],
                       per_octave: int = PER_OCTAVE) -> List[Tuple[int, int]]:
    """[(le, cumulative count)] from log-linear bin upper bounds (ascending
    integers) and their counts: le at every edge of `per_octave` equal
    parts of each power of two (each a bin edge, so counts are exact),
    from the edge of the smallest bin to that of the largest; fewer per
    octave where the bins span too many octaves (MAX_BUCKETS)."""
    got = sub_octave(bins, counts, per_octave)
    if got is None:
        return []
    d, lo, cum = got
    return list(zip(GRIDS[d][lo:lo + len(cum)].tolist(), cum))


_le_cache: Dict[Tuple[int, Conv], List[str]] = {}


def grid_les(d: int, c: Conv) -> List[str]:
    """The `le` strings of grid d's edges in the unit c gives."""
    key = (d, c)
    out = _le_cache.get(key)
    if out is None:
        out = [floatToGoString(conv(e, c)) for e in GRIDS[d].tolist()]
        if len(_le_cache) < 256:
            _le_cache[key] = out
    return out
