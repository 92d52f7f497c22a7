"""The per-second history of the store's series: their cumulative states,
kept as changes; windows over it take the one rule for "the last N
seconds" (graphsignal.windowmath.pick).

The store (graphsignal.sidecar.store) writes a History under its lock, once
a second by the sidecar's clock; readers get a HistoryView in every
StoreSnapshot and read it without the lock. States are the series types'
own (graphsignal.sidecar.series); nothing here decodes one.
"""
import bisect
import collections
from typing import Any, Deque, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, \
    overload

from graphsignal.signals_model import SeriesKey
from graphsignal.windowmath import NS, pick

__all__ = ["NS", "pick", "History", "HistoryView", "HistorySnapshot"]

Key = SeriesKey  # (name, type, tags_key)
Run = Tuple[Any, int]  # (state or None, snapshots it held for)


_MISSING = object()
_GONE = object()  # the series was removed at this snapshot


class _Track:
    """One series' changes: the snapshot numbers (ascending) at which its
    state changed, and those states. Appended in place (states first, so a
    reader that finds a number finds its state); replaced, never cut, when
    old changes are forgotten, so a view taken earlier keeps reading the
    lists it had."""

    __slots__ = ("kind", "seqs", "states")

    def __init__(self, kind: Optional[str], seqs: List[int], states: List[Any]) -> None:
        self.kind, self.seqs, self.states = kind, seqs, states

    def at(self, seq: int) -> Any:
        n = bisect.bisect_right(self.seqs, seq)
        if n == 0:
            return _MISSING
        st = self.states[n - 1]
        return _MISSING if st is _GONE else st


class History:
    """The per-second snapshots of every series' cumulative state, kept as
    changes: a snapshot stores a series' state only if it changed since the
    previous snapshot, so an idle series costs nothing per second (4,900
    idle histograms used to cost 75 MB a second). Written under the store's
    lock; read through view() (a HistoryView), which needs no lock: the
    dictionaries a view holds are copied before the next change to them
    (copy on write), and the lists it reads only grow past its end.

    Memory: one entry per (series, second in which it changed), for at
    most `maxlen` snapshots; histogram states keep only their non-empty
    bins (SparseBins)."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        # (seq, ts, mono): epoch ns to show, monotonic ns to measure spans with (a wall
        # clock that steps must not move a window's start)
        self._times: Deque[Tuple[int, int, int]] = collections.deque(maxlen=maxlen)
        self._tracks: Dict[Key, _Track] = {}
        self._by_name: Dict[str, FrozenSet[Key]] = {}
        self._shared = False  # a view holds _tracks and _by_name: copy them before changing them
        self._seq = 0
        self._trimmed_to = 0

    # -- writing (under the store's lock) ------------------------------------
    def _own(self) -> None:
        if self._shared:
            self._tracks = dict(self._tracks)
            self._by_name = dict(self._by_name)
            self._shared = False

    def begin(self) -> int:
        self._seq += 1
        return self._seq

    def record(self, key: Key, seq: int, state: Any, kind: Optional[str]) -> None:
        t = self._tracks.get(key)
        if t is None:
            self._own()
            self._tracks[key] = _Track(kind, [seq], [state])
            self._by_name[key[0]] = self._by_name.get(key[0], frozenset()) | {key}
        elif t.seqs[-1] == seq:
            t.states[-1] = state  # a snapshot no view can see yet (seq is not committed)
        else:
            t.kind = kind
            t.states.append(state)
            t.seqs.append(seq)

    def removed(self, key: Key) -> None:
        """The series is gone from the next snapshot on."""
        t = self._tracks.get(key)
        if t is not None:
            self.record(key, self._seq + 1, _GONE, t.kind)

    def commit(self, seq: int, ts: int, mono: Optional[int] = None) -> None:
        """ts: epoch ns of the snapshot; mono: monotonic ns, what windows
        are measured by (default ts: callers without a monotonic clock)."""
        self._times.append((seq, ts, ts if mono is None else mono))
        if self._times[0][0] - self._trimmed_to >= 16:
            self._trim(self._times[0][0])

    def _trim(self, oldest: int) -> None:
        """Forgets changes older than the oldest snapshot, keeping the last
        of them (the state at that snapshot)."""
        self._trimmed_to = oldest
        self._own()
        for key, t in list(self._tracks.items()):
            seqs = t.seqs
            if seqs[0] >= oldest:
                continue
            i = bisect.bisect_right(seqs, oldest) - 1  # the state at `oldest`
            if len(seqs) - i == 1 and t.states[-1] is _GONE:
                del self._tracks[key]
                names = self._by_name.get(key[0], frozenset()) - {key}
                if names:
                    self._by_name[key[0]] = names
                else:
                    self._by_name.pop(key[0], None)
            elif i > 0:
                self._tracks[key] = _Track(t.kind, seqs[i:], t.states[i:])

    # -- reading ---------------------------------------------------------------
    def view(self) -> "HistoryView":
        self._shared = True
        return HistoryView(tuple(self._times), self._tracks, self._by_name, self.maxlen)

    def entries(self, key: Optional[Key] = None) -> int:
        """Changes kept (of one series, or all): the history's memory."""
        if key is not None:
            t = self._tracks.get(key)
            return len(t.seqs) if t is not None else 0
        return sum(len(t.seqs) for t in self._tracks.values())

    def keys(self) -> List[Key]:
        return list(self._tracks)

    def states(self, key: Key) -> List[Any]:
        """The states kept of one series, oldest first."""
        t = self._tracks.get(key)
        return list(t.states) if t is not None else []

    def __len__(self) -> int:
        return len(self._times)

    def __iter__(self) -> Iterator[Tuple[int, "HistorySnapshot"]]:
        return iter(self.view())

    def __getitem__(self, i: Union[int, slice]) -> Union[Tuple[int, "HistorySnapshot"],
                                                          List[Tuple[int, "HistorySnapshot"]]]:
        """A view's item (HistoryView.__getitem__), of a view taken now."""
        return self.view()[i]

    def __reversed__(self) -> Iterator[Tuple[int, "HistorySnapshot"]]:
        return reversed(self.view())


class HistoryView(Sequence[Tuple[int, "HistorySnapshot"]]):
    """The history as of one store snapshot: a sequence of (ts_ns,
    HistorySnapshot), oldest first. Immutable."""

    __slots__ = ("_times", "_tracks", "_by_name", "max_snapshots", "times", "mono")

    def __init__(self, times: Tuple[Tuple[int, int, int], ...], tracks: Dict[Key, _Track],
                 by_name: Dict[str, FrozenSet[Key]], max_snapshots: int) -> None:
        self._times = times  # ((seq, ts, mono), ...)
        self._tracks = tracks
        self._by_name = by_name
        self.max_snapshots = max_snapshots
        self.times = tuple(t[1] for t in times)  # epoch ns
        self.mono = tuple(t[2] for t in times)  # monotonic ns: spans and their seconds

    @property
    def max_seconds(self) -> int:
        """The longest window it can ever span."""
        return self.max_snapshots - 1

    def __len__(self) -> int:
        return len(self._times)

    @overload
    def __getitem__(self, i: int) -> Tuple[int, "HistorySnapshot"]: ...

    @overload
    def __getitem__(self, i: slice) -> List[Tuple[int, "HistorySnapshot"]]: ...

    def __getitem__(self, i: Union[int, slice]) -> Union[Tuple[int, "HistorySnapshot"],
                                                          List[Tuple[int, "HistorySnapshot"]]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._times)))]
        seq, ts, _ = self._times[i]
        return ts, HistorySnapshot(self, seq)

    def __iter__(self) -> Iterator[Tuple[int, "HistorySnapshot"]]:
        return iter([(ts, HistorySnapshot(self, seq)) for seq, ts, _ in self._times])

    def __reversed__(self) -> Iterator[Tuple[int, "HistorySnapshot"]]:
        return iter([(ts, HistorySnapshot(self, seq)) for seq, ts, _ in reversed(self._times)])

    def span(self, seconds: float) -> Optional[Tuple[int, int]]:
        """(start, end) indices of the last `seconds` (see pick) by the
        monotonic clock, or None. The wall clock may step (NTP, a user):
        a day back must not keep a window's start from before the step."""
        return pick(self.mono, seconds)

    def seconds_between(self, start: int, end: int) -> float:
        """Seconds from snapshot `start` to `end` (indices), by the monotonic clock."""
        return (self.mono[end] - self.mono[start]) / NS

    def kind(self, key: Key) -> Optional[str]:
        """The type of key's series (the payload's: its states are windowmath's
        form of it), or None."""
        t = self._tracks.get(key)
        return t.kind if t is not None else None

    def runs(self, key: Key, start: int, end: int) -> List[Run]:
        """[(state, snapshots it held for)] of key between snapshots start
        and end (indices, both included); a state of None: not there."""
        lo, hi = self._times[start][0], self._times[end][0]
        t = self._tracks.get(key)
        if t is None:
            return [(None, hi - lo + 1)]
        st = t.at(lo)
        seq, v = lo, (None if st is _MISSING else st)
        runs = []
        seqs, states = t.seqs, t.states
        for k in range(bisect.bisect_right(seqs, lo), bisect.bisect_right(seqs, hi)):
            runs.append((v, seqs[k] - seq))
            seq, v = seqs[k], (None if states[k] is _GONE else states[k])
        runs.append((v, hi - seq + 1))
        return runs

    def _state_at(self, key: Key, seq: int) -> Any:
        t = self._tracks.get(key)
        return _MISSING if t is None else t.at(seq)

    def _keys_named(self, name: str) -> Iterable[Key]:
        return self._by_name.get(name, ())


class HistorySnapshot(Mapping[Key, Any]):
    """{series key: cumulative state} as of one history snapshot."""

    __slots__ = ("view", "seq")

    def __init__(self, view: HistoryView, seq: int) -> None:
        self.view, self.seq = view, seq

    def __getitem__(self, key: Key) -> Any:
        st = self.view._state_at(key, self.seq)
        if st is _MISSING:
            raise KeyError(key)
        return st

    def get(self, key: Key, default: Any = None) -> Any:
        st = self.view._state_at(key, self.seq)
        return default if st is _MISSING else st

    def __contains__(self, key: object) -> bool:
        return self.view._state_at(key, self.seq) is not _MISSING  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Key]:
        seq = self.seq
        return iter([k for k, t in self.view._tracks.items() if t.at(seq) is not _MISSING])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items_named(self, names: Iterable[str]) -> List[Tuple[Key, Any]]:
        """[(key, state)] of the series with one of these names."""
        out = []
        for name in names:
            for key in self.view._keys_named(name):
                st = self.view._state_at(key, self.seq)
                if st is not _MISSING:
                    out.append((key, st))
        return out

    def has_name(self, name: str) -> bool:
        return any(self.view._state_at(k, self.seq) is not _MISSING for k in self.view._keys_named(name))
