"""How many distinct series the store refused at its series cap
(graphsignal_dropped_series), in bounded memory.

It guards the sidecar's memory against a writer that makes up series
without end (another process can name as many as it likes): the first
MAX_REFUSED_KEPT distinct keys are remembered by hash and counted exactly,
the rest estimated from a bitmap of fixed size, so the count stays right
(within a fraction of a percent) and the memory stays put.
"""
import math
from typing import Hashable, Optional, Set

MAX_REFUSED_KEPT = 65536  # refused series remembered exactly (their keys' hashes: about 4 MB at most)
REFUSED_BITS = 1 << 20  # past them, a bitmap of this many bits (128 KiB) estimates the distinct rest


class RefusedSeries:
    """How many distinct series were refused, in bounded memory.

    The first MAX_REFUSED_KEPT distinct keys are remembered (by hash) and
    counted exactly: the same series refused on every record batch counts
    once. Past them, each new key sets one bit of a REFUSED_BITS bitmap and
    the count adds the linear-counting estimate of how many distinct keys
    set the bits (m * ln(m / zeros): within a fraction of a percent up to
    about a million more, and it only grows). Why not a plain set: another
    process can make up series names without end, and the sidecar's memory
    must not follow them."""

    __slots__ = ("_kept", "_bits", "_ones")

    def __init__(self) -> None:
        self._kept: Set[int] = set()
        self._bits: Optional[bytearray] = None  # made when the kept set is full
        self._ones = 0

    def add(self, key: Hashable) -> bool:
        """Counts key if it was not counted yet; returns whether it was new."""
        h = hash(key)
        kept = self._kept
        if h in kept:
            return False
        if len(kept) < MAX_REFUSED_KEPT:
            kept.add(h)
            return True
        if self._bits is None:
            self._bits = bytearray(REFUSED_BITS // 8)
        bit = (h ^ (h >> 29)) % REFUSED_BITS  # the hash's high bits too
        byte, mask = bit >> 3, 1 << (bit & 7)
        if self._bits[byte] & mask:
            return False
        self._bits[byte] |= mask
        self._ones += 1
        return True

    def __contains__(self, key: Hashable) -> bool:
        h = hash(key)
        if h in self._kept:
            return True
        bit = (h ^ (h >> 29)) % REFUSED_BITS
        return self._bits is not None and bool(self._bits[bit >> 3] & (1 << (bit & 7)))

    def __len__(self) -> int:
        n = len(self._kept)
        if self._ones:
            zeros = REFUSED_BITS - self._ones
            n += round(REFUSED_BITS * math.log(REFUSED_BITS / zeros)) if zeros else REFUSED_BITS * 14
        return n
