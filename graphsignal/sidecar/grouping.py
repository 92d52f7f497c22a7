"""Records grouped with vectorized numpy, for the aggregator
(graphsignal.sidecar.aggregate): dense keys from two columns, unique keys
by bincount (or by sort when their range is wide), per-key sums, and a
batch's fields taken on demand, so no Python runs per record.

It guards the sums against numpy's floats and integers: a per-key sum is
exact, in uint64 while every sum provably fits in 53 bits (float64
bincount is exact there) and as Python ints beyond (a sum past 2**64 does
not wrap), whatever values a ring carries.
"""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

_EXACT_F64 = 1 << 53


def exact_bincount(idx: Array, values: Array, n: int) -> Array:
    """Per-bin sums of non-negative integer values, exact: a uint64 array
    while every sum provably fits in 53 bits (the common case), else an
    object array of Python ints (sums beyond 2**64 do not wrap)."""
    v = values.astype(np.uint64, copy=False)
    if v.size == 0:
        return np.zeros(n, dtype=np.uint64)
    if int(v.max()) * v.size < _EXACT_F64:
        return np.bincount(idx, weights=v.astype(np.float64), minlength=n).astype(np.uint64)
    lo_t = np.zeros(n, dtype=np.uint64)
    hi_t = np.zeros(n, dtype=np.uint64)
    step = 1 << 20  # chunk so each float64 partial stays exact (2**20 * 2**32 < 2**53)
    for s in range(0, v.size, step):
        vi, ii = v[s:s + step], idx[s:s + step]
        # each chunk's partials are below 2**52, so up to 4096 chunks add up in uint64 exactly
        lo_t += np.bincount(ii, weights=(vi & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=n).astype(np.uint64)
        hi_t += np.bincount(ii, weights=(vi >> np.uint64(32)).astype(np.float64), minlength=n).astype(np.uint64)
    out = np.empty(n, dtype=object)
    out[:] = [(h << 32) + lo for h, lo in zip(hi_t.tolist(), lo_t.tolist())]
    return out


def group(keys: Array) -> Tuple[Array, Array, Array]:
    """(unique keys, inverse index, counts) for non-negative int64 keys,
    by bincount when the key range is small, else by sort."""
    kmax = int(keys.max())
    if kmax < (1 << 22):
        counts = np.bincount(keys, minlength=kmax + 1)
        uniq = np.flatnonzero(counts)
        if uniq.size == kmax + 1:
            return uniq, keys, counts
        remap = np.zeros(kmax + 1, dtype=np.int64)
        remap[uniq] = np.arange(uniq.size)
        return uniq, remap[keys], counts[uniq]
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, inv.reshape(-1), np.bincount(inv.reshape(-1))


def group_sums(keys: Array, *value_arrays: Array) -> Tuple[Array, Array, List[Array]]:
    """(unique keys, counts, [sums per value array])."""
    uniq, inv, counts = group(keys)
    return uniq, counts, [exact_bincount(inv, v, uniq.size) for v in value_arrays]


def compose(a: Array, b: Array) -> Tuple[Array, int]:
    """Dense int64 key from two non-negative integer columns; returns
    (key, width of b) so a = key // width, b = key % width."""
    width = int(b.max()) + 1 if b.size else 1
    if width == 1:  # the common case (one device): no arithmetic
        return a.astype(np.int64), 1
    return a.astype(np.int64) * width + b.astype(np.int64), width


class Batch:
    """The records of one type in a drained batch. Fields are taken on
    demand, each as one contiguous copy of just that field, instead of
    copying whole records per type."""

    __slots__ = ("recs", "mask", "_cache", "size")

    def __init__(self, recs: Array, mask: Optional[Array] = None) -> None:
        self.recs, self.mask = recs, mask
        self._cache: Dict[str, Array] = {}
        self.size = int(recs.size if mask is None else np.count_nonzero(mask))

    def __getitem__(self, field: str) -> Array:
        v = self._cache.get(field)
        if v is None:
            v = self.recs[field] if self.mask is None else self.recs[field][self.mask]
            self._cache[field] = v
        return v
