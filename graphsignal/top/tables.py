"""graphsignal-top's four tables (kernels, CUDA graphs, copies and memsets,
syncs): one row per kernel, graph, copy kind or sync kind, summed over
every process and device that ran it, with its window and its total, its
per-process split, and whose it is (the PID / RANK column).

It guards the tables against payloads that differ in how they were taken:
the CUPTI and ROCm profiles and --cuda-trace light's count profiles fill
the same rows (counts alone show no time: the table says it is untimed),
rows are matched across processes by their frame (copies by kind and host
memory), the sidecar's own names and categories win where it sent them,
and a missing stat or frame reads as nothing rather than failing the
frame.
"""
from typing import Any, Dict, Hashable, List, Mapping, Optional, Sequence, Set, Tuple

from graphsignal.naming import Names

KERNELS, GRAPHS, MEMORY, SYNC = "kernels", "graphs", "memory", "sync"
TABLES = (KERNELS, GRAPHS, MEMORY, SYNC)

# profile names per table; rocm_* twins where the ROCm library writes them
_TABLE_METRICS = {
    KERNELS: ("cuda_kernels_nanoseconds", "rocm_kernels_nanoseconds", "cuda_kernel_launches"),
    GRAPHS: ("cuda_graphs_nanoseconds",),
    MEMORY: ("cuda_memcpy_nanoseconds", "cuda_memset_nanoseconds", "rocm_memcpy_nanoseconds",
             "rocm_memset_nanoseconds", "cuda_memcpy_calls", "cuda_memset_calls"),
    SYNC: ("cuda_sync_nanoseconds", "rocm_sync_nanoseconds"),
}
_BYTES_FOR = {"cuda_memcpy_nanoseconds": "cuda_memcpy_bytes", "cuda_memset_nanoseconds": "cuda_memset_bytes",
              "rocm_memcpy_nanoseconds": "rocm_memcpy_bytes", "rocm_memset_nanoseconds": "rocm_memset_bytes",
              "cuda_memcpy_calls": "cuda_memcpy_bytes", "cuda_memset_calls": "cuda_memset_bytes"}
# --cuda-trace light's count profiles: calls per frame, no time (their rows show counts only)
COUNT_PROFILES = frozenset(("cuda_kernel_launches", "cuda_memcpy_calls", "cuda_memset_calls"))


Series = Dict[str, Any]  # a payload's series (name, type, tags, stats)
TKey = Tuple[Tuple[str, Any], ...]


def tkey(tags: Optional[Mapping[str, Any]]) -> TKey:
    return tuple(sorted((tags or {}).items()))


class Sums:
    """A value and its samples (calls, ranges) in the window and since
    start, summed over what a row gathers."""

    __slots__ = ("window_value", "window_samples", "total_value", "total_samples")

    def __init__(self) -> None:
        self.window_value: float = 0
        self.window_samples: float = 0
        self.total_value: float = 0
        self.total_samples: float = 0


class Row(Sums):
    """One line of a table: a kernel, graph, copy kind or sync kind,
    summed over every process and device that ran it."""

    __slots__ = ("key", "name", "short", "category", "full", "window_bytes", "total_bytes", "procs", "pids", "ranks")

    def __init__(self, key: Hashable, name: str) -> None:
        Sums.__init__(self)
        self.key = key
        self.name = name
        self.short = name
        self.category = ""
        self.full = name
        self.window_bytes: Optional[float] = None
        self.total_bytes: Optional[float] = None
        self.procs: List[ProcSplit] = []
        self.pids: Set[str] = set()  # processes that ran it
        self.ranks: Set[str] = set()  # their ranks, where they have one


class ProcSplit(Sums):
    """A row's share of one process (and device)."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        Sums.__init__(self)
        self.label = label


class Table:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.rows: List[Row] = []
        self.measured = False  # any series of this table exists
        self.window_value: float = 0  # sum of the rows' window values (for shares)
        self.untimed = False  # counted without time (--cuda-trace light): time columns show "-"
        self.pids: Set[str] = set()  # processes with a frame in this table
        self.ranked = False  # every one of them has a rank tag
        # "PID" or "RANK" when more than one process contributes: rows
        # then say whose they are
        self.who: Optional[str] = None


def stat(m: Optional[Series], field: str) -> Any:
    if not m:
        return None
    return (m.get("stats") or {}).get(field)


def proc_label(tags: Mapping[str, str]) -> str:
    parts = []
    if "process.pid" in tags:
        parts.append("pid " + tags["process.pid"])
    if "rank" in tags:
        parts.append("rank " + tags["rank"])
    if "device.cuda_index" in tags:
        parts.append("cuda:" + tags["device.cuda_index"])
    elif "device.index" in tags:
        parts.append("gpu " + tags["device.index"])
    extra = sorted((k, v) for k, v in tags.items()
                   if k not in ("process.pid", "rank", "local_rank", "world_size", "device.index", "device.uuid",
                                "device.cuda_index", "kind"))
    parts.extend("%s=%s" % kv for kv in extra)
    return " ".join(parts) or "-"


def build_table(kind: str, by_name: Mapping[str, List[Series]], by_key: Mapping[Tuple[str, TKey], Series],
                w_by_key: Mapping[Tuple[str, TKey], Series], names: Names) -> Table:
    """The table of `kind` from the payload's series (by name, by key) and
    its window's (by key); kernel names made readable by `names`."""
    t = Table(kind)
    rows: Dict[Hashable, Row] = {}
    labels: Dict[Hashable, Tuple[Any, Any]] = {}  # key -> (display name, category) the sidecar gave its frames
    ranks: Dict[str, Optional[str]] = {}  # pid -> rank tag or None
    for metric in _TABLE_METRICS[kind]:
        for s in by_name.get(metric, ()):
            if s.get("type") != "profile":
                continue
            t.measured = True
            counts_only = metric in COUNT_PROFILES
            t.untimed = t.untimed or counts_only
            tags = s.get("tags") or {}
            w = w_by_key.get((metric, tkey(tags)))
            wframes = {f["name"]: f for f in (stat(w, "frames") or ())}
            frames = {f["name"]: f for f in (stat(s, "frames") or ())}
            label = proc_label(tags)
            pid, rank = tags.get("process.pid"), tags.get("rank")
            if pid is not None and (frames or wframes):
                t.pids.add(pid)
                ranks[pid] = rank if ranks.get(pid) is None else ranks[pid]
            for fname in list(frames) + [n for n in wframes if n not in frames]:
                f = frames.get(fname) or {}
                wf = wframes.get(fname) or {}
                key, display = _row_key(kind, metric, fname, tags)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = Row(key, display)
                if key not in labels and (f.get("display_name") or wf.get("display_name")):
                    labels[key] = (f.get("display_name") or wf.get("display_name"),
                                   f.get("category") or wf.get("category"))
                if pid is not None:
                    row.pids.add(pid)
                    if rank is not None:
                        row.ranks.add(rank)
                fv, wv = (0, 0) if counts_only else (f.get("value") or 0, wf.get("value") or 0)
                row.total_value += fv
                row.total_samples += f.get("samples") or 0
                row.window_value += wv
                row.window_samples += wf.get("samples") or 0
                p = ProcSplit(label)
                p.total_value, p.total_samples = fv, f.get("samples") or 0
                p.window_value, p.window_samples = wv, wf.get("samples") or 0
                row.procs.append(p)
                bytes_metric = _BYTES_FOR.get(metric)
                if bytes_metric:
                    btags = tkey(dict(tags, kind=fname))
                    c = by_key.get((bytes_metric, btags))
                    if c is not None and stat(c, "total") is not None:
                        row.total_bytes = (row.total_bytes or 0) + stat(c, "total")
                    wc = w_by_key.get((bytes_metric, btags))
                    if wc is not None and stat(wc, "delta") is not None:
                        row.window_bytes = (row.window_bytes or 0) + stat(wc, "delta")
    if kind == KERNELS and rows:
        # the same names the payload carries (graphsignal.naming);
        # the sidecar's own labels win where it sent them
        for r, n in zip(rows.values(), names.describe_all([r.name for r in rows.values()])):
            r.short, r.category = labels.get(r.key) or (n.display_name, n.category)
            r.full = n.demangled
    elif kind == GRAPHS:
        for r in rows.values():
            r.category = "graph"
    for r in rows.values():
        r.procs.sort(key=lambda p: (-p.window_value, -p.total_value, p.label))
    t.rows = sorted(rows.values(), key=lambda r: (-r.window_value, -r.total_value, -r.window_samples,
                                                  -r.total_samples, r.short))
    t.window_value = sum(r.window_value for r in t.rows)
    t.ranked = bool(ranks) and all(v is not None for v in ranks.values())
    if len(t.pids) > 1:
        t.who = "RANK" if t.ranked else "PID"
    return t


def who_cell(row: Row, who: Optional[str], width: int = 8) -> str:
    """Whose a row is, for the PID / RANK column: one process or rank,
    else the ranks as ranges (`0-3,6`) or a count."""
    if who == "RANK":
        vals = sorted(row.ranks, key=lambda r: (0, int(r)) if str(r).isdigit() else (1, str(r)))
        if len(vals) == 1:
            return str(vals[0])
        text = _ranges(vals)
        return text if text is not None and len(text) <= width else "%d ranks" % len(vals)
    vals = sorted(row.pids, key=lambda p: (0, int(p)) if str(p).isdigit() else (1, str(p)))
    if len(vals) == 1:
        return str(vals[0])
    return "%d pids" % len(vals)


def _ranges(vals: Sequence[Any]) -> Optional[str]:
    """'0-3,6' for [0, 1, 2, 3, 6]; None when a rank is not a number."""
    if not all(str(v).isdigit() for v in vals):
        return None
    nums = sorted(int(v) for v in vals)
    out, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if n is not None:
            start = prev = n
    return ",".join(out)


def _row_key(kind: str, metric: str, frame: str, tags: Mapping[str, str]) -> Tuple[Hashable, str]:
    if kind != MEMORY:
        return frame, frame
    op = "memset" if "memset" in metric else "memcpy"
    hm = tags.get("host_memory")
    display = "%s %s" % (op, frame) + (" (%s)" % hm if hm else "")
    return (op, frame, hm), display
