"""Log-linear histogram bins for integer values, and quantile estimates.

Values below 32 get a bin each (exact). Above, every power of two is split
into 32 equal sub-bins, so a bin spans at most 1/32 of its lower bound and
a quantile reported as the bin's midpoint (clamped to the exact min/max) is
within 1/64 (1.6%) of a value that lies in that bin. count, sum, min and
max are always exact.
"""
import math
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from graphsignal.rings import layout as _L

# the bin layout is defined in probe.h (device probes bin values themselves)
SUB_BITS = _L.HIST_SUB_BITS
SUB = 1 << SUB_BITS
NBINS = _L.HIST_NBINS
assert NBINS == SUB + (64 - SUB_BITS) * SUB  # every uint64 has a bin


def bin_index(values: Any) -> "npt.NDArray[np.int64]":
    """Bin index per value (numpy array of non-negative integers)."""
    v = np.asarray(values).astype(np.uint64, copy=False)
    out = v.astype(np.int64)  # exact where v < SUB
    big = v >= SUB
    if big.any():
        vb = v[big]
        e = (np.frexp(vb.astype(np.float64))[1] - 1).astype(np.int64)
        # float64 rounding can overshoot the exponent by one for v >= 2**53
        e -= (np.right_shift(vb, e.astype(np.uint64)) == 0).astype(np.int64)
        shift = (e - SUB_BITS).astype(np.uint64)
        m = np.right_shift(vb, shift).astype(np.int64) - SUB
        out[big] = SUB + (e - SUB_BITS) * SUB + m
    return out


def bin_bounds(b: Any) -> Tuple[int, int]:
    """(lowest, highest) integer value of bin b."""
    b = int(b)
    if b < SUB:
        return b, b
    e = (b - SUB) // SUB + SUB_BITS
    m = (b - SUB) % SUB
    lo = (SUB + m) << (e - SUB_BITS)
    hi = ((SUB + m + 1) << (e - SUB_BITS)) - 1
    return lo, hi


# upper bound of every bin, for rendering many bins at once
BIN_UPPER = np.array([bin_bounds(b)[1] for b in range(NBINS)], dtype=np.uint64)


def quantiles_loglinear(bins: Any, counts: Any, qs: Sequence[float], vmin: Optional[float] = None,
                        vmax: Optional[float] = None) -> Sequence[Optional[float]]:
    """Quantiles from non-empty bins (ascending) and their counts."""
    if not len(counts):
        return [None for _ in qs]
    # an array's own methods: numpy's functions add a Python wrapper to each call, and a
    # payload renders hundreds of histograms
    cum = counts.cumsum() if isinstance(counts, np.ndarray) else np.cumsum(counts)
    total = int(cum[-1])
    if total == 0:
        return [None for _ in qs]
    at = cum.searchsorted([max(1, math.ceil(q * total)) for q in qs]).tolist()  # every rank in one search
    out: List[Optional[float]] = []
    for i in at:
        lo, hi = bin_bounds(bins[i])
        est = (lo + hi) / 2.0 if lo != hi else float(lo)
        if vmin is not None:
            est = max(est, vmin)
        if vmax is not None:
            est = min(est, vmax)
        out.append(est)
    return out


def quantiles_buckets(le: Sequence[float], counts: Sequence[Any], qs: Sequence[float]) -> Sequence[Optional[float]]:
    """Quantiles from Prometheus-style buckets (upper bounds `le`,
    ascending, per-bucket counts), interpolating linearly inside the
    bucket as histogram_quantile() does; a rank in the +Inf bucket reports
    the highest finite bound."""
    total = sum(counts)
    if not total:
        return [None for _ in qs]
    out = []
    for q in qs:
        rank = q * total
        acc = 0
        prev_le = 0.0
        val = None
        for b, c in zip(le, counts):
            if c and acc + c >= rank:
                if b == float("inf"):
                    val = prev_le
                else:
                    val = prev_le + (b - prev_le) * ((rank - acc) / c)
                break
            acc += c
            if b != float("inf"):
                prev_le = b
        out.append(prev_le if val is None else val)
    return out


def exact_sum(values: Any) -> int:
    """Exact sum of non-negative integers as a Python int (no uint64 wrap)."""
    v = np.asarray(values).astype(np.uint64, copy=False)
    if v.size == 0:
        return 0
    lo = np.sum(v & np.uint64(0xFFFFFFFF), dtype=np.uint64)
    hi = np.sum(v >> np.uint64(32), dtype=np.uint64)
    return (int(hi) << 32) + int(lo)
