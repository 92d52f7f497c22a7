"""/metrics' line cache: what one scrape leaves for the next, so a scrape
writes only the series that changed.

A State (one per engine flag) keeps the series views of the last scrape
in order, each with its layout and rows, and the plan (families and their
rows, each row with its rendered lines). update() brings it up to date
with a new snapshot's views in place: a view that is the same object is
the same series unchanged (the store hands out one view until the series
changes); a gauge or counter is compared and rewritten by its one number;
any other series by what it shows (parts()' fingerprint). replan() lays
everything out afresh, and keeps the lines of every row whose fingerprint
and spec did not change. render() writes the page from the plan.

It guards against a stale page: a series that came or went, a new
engine key set or context, a series whose slot now holds another series
(a view whose tags are not the old one's), an engine summary that grew
buckets (a histogram now), a series that could not be written and
changed (maybe it can now): each replans. And against a wrong one from a
stale line: -0.0 and 0.0 compare equal, so a float's sign is part of its
fingerprint (value_fp).
"""
from typing import Any, List, Literal, Optional, Sequence, Set, Tuple, Union, cast

from graphsignal.signals_model import SeriesKey, SeriesViewLike
from graphsignal.sidecar.exposition.labels import Context, conv
from graphsignal.sidecar.exposition.layout import Layout, Plan, Planner, Row, RowKey, parts, plain, read, row_key, \
    value_fp
from graphsignal.sidecar.exposition.lines import lines

__all__ = ["State", "update", "replan", "render"]

_Lines = List[bytes]
# per series: (row key, layout, rows); layout None: not exported, False: not writable
Entry = Tuple[Optional[RowKey], Union[Layout, None, Literal[False]], List[Row]]


class State:
    """What the last render for one engine flag left: the series views in
    order, each with its layout and rows, the plan, the context."""

    def __init__(self) -> None:
        self.views: List[SeriesViewLike] = []
        self.entries: List[Entry] = []
        self.plan: Plan = []
        self.engine_keys: Optional[Set[SeriesKey]] = None
        self.ctx: Optional[Context] = None


def _content(v: SeriesViewLike) -> Any:
    """What a view's rows are made of, cheaply: a histogram's count and sum
    (and an engine's buckets), not its log-linear bins (a cumulative count
    and sum that did not move is a histogram that did not: see parts()),
    else its state."""
    if v.type == "histogram":
        count, total, bins = v.state  # type: ignore[misc]  # a histogram's: HistogramState
        return count, total, bins if isinstance(bins, tuple) else None
    return v.state


def _same(a: Any, b: Any) -> bool:
    """Whether two contents are equal and of one type; False when they
    cannot be compared (then the view is read in full)."""
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays: their == is no bool
        return False


def update(st: State, views: Sequence[SeriesViewLike], top: int, keys: Set[SeriesKey], ctx: Context) -> bool:
    """Brings st's rows up to date with the views in place; False when
    the series or their layout changed (then everything is laid out
    anew)."""
    if len(views) != len(st.views) or keys != st.engine_keys or ctx != st.ctx:
        return False
    old = st.views
    for i, v in enumerate(views):
        o = old[i]
        if v is o:
            continue  # unchanged: the store hands out the same view until the series changes
        if v.tags is not o.tags and (v.name != o.name or v.type != o.type or v.tags != o.tags):
            return False  # another series (a series' views share its tags)
        _, layout, rows = st.entries[i]
        if layout is None:
            continue  # left out (the engine's, the table's, or a name clash) and still the same series
        if layout is not False and (layout.type == "gauge" or layout.type == "counter"):
            # one number: compared and written without reading the view
            try:
                val = plain(v.state)
            except (TypeError, ValueError, OverflowError):
                return False
            row = rows[0]
            fp = value_fp(val)
            if fp != row.fingerprint:
                spec = row.spec
                row.fingerprint, row.lines = fp, None
                row.spec = ("value", spec[1], spec[2], spec[3], None if val is None else conv(val, layout.conv))
            continue
        if _same(_content(v), _content(o)):
            continue  # touched (set again to what it held): nothing to render
        if layout is False:
            return False  # a series that could not be written changed: maybe it can now
        r = read(v, top)
        if r is None:
            return False
        if layout.type == "summary" and len(r.bins):
            return False  # an engine summary that grew buckets: a histogram now
        for row, (fp2, spec2) in zip(rows, parts(r, layout)):
            if fp2 != row.fingerprint:
                row.fingerprint, row.spec, row.lines = fp2, spec2, None
    st.views = list(views)
    return True


def replan(st: State, views: Sequence[SeriesViewLike], top: int, keys: Set[SeriesKey], engine: bool,
           ctx: Context) -> None:
    """Lays every series out afresh, keeping the lines of the rows that
    show what they showed."""
    old = {}
    for fam, rows in st.plan:
        for row in rows:
            if row.lines is not None:
                old[(fam.name, row.key)] = (row.fingerprint, row.spec, row.lines)
    planner = Planner(keys, engine, top, ctx)
    entries: List[Entry] = []
    for v in views:
        r = read(v, top)
        if r is None:
            entries.append((None, False, []))
            continue
        placed = planner.place(v, r)
        entries.append((row_key(v), None, []) if placed is None else (placed[1][0].key, placed[0], placed[1]))
    plan = planner.plan()
    for fam, rows in plan:
        for row in rows:
            hit = old.get((fam.name, row.key))
            # same numbers, same labels: the same lines
            if hit is not None and hit[0] == row.fingerprint and hit[1] == row.spec:
                row.lines = hit[2]
    st.views, st.entries, st.plan, st.engine_keys, st.ctx = list(views), entries, plan, set(keys), ctx


def render(st: State, views: Sequence[SeriesViewLike], top: int, keys: Set[SeriesKey], engine: bool, ctx: Context,
           om: bool) -> Tuple[bytes, bool, int]:
    """(the page, whether it was laid out afresh, sample lines written
    afresh) for these views, from st, which it brings up to date."""
    replanned = not update(st, views, top, keys, ctx)
    if replanned:
        replan(st, views, top, keys, engine, ctx)
    written = 0
    out: List[Optional[bytes]] = []
    for fam, rows in st.plan:
        out.append(fam.head(om))
        for row in rows:
            if row.lines is None:
                row.lines = lines(row.spec)
                written += row.lines.count(b"\n")
        out.extend([row.lines for row in rows])  # one pass in C: most rows kept their lines
    if om:
        out.append(b"# EOF\n")
    return b"".join(cast(_Lines, out)), replanned, written
