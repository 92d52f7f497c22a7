"""?window=N on the server: the same window document the sidecar's
/signals?window=N has (graphsignal.sidecar.windows), from the stored history
(one snapshot a minute, one an hour beyond 24 h) and the latest stored
states, through the same window maths (graphsignal.windowmath).
The window's start is the stored snapshot nearest to N seconds before the
latest upload, so `covered_seconds` says what was actually spanned and
`resolution_seconds` how far apart the snapshots are."""
from graphsignal import naming, windowmath
from graphsignal.fleet.rows import series_key
from graphsignal.fleet.storage import HOUR_NS, MINUTE_ROWS_NS, NS
from graphsignal.windowmath import GAUGE, HISTOGRAM, PROFILE

MIN_SECONDS = 60  # the history's resolution


def window(db, owner, iid, snap, states, seconds):
    """The window document over the last `seconds` of this instance; snap
    and states: its latest snapshot and stored states (db.snapshot_states)."""
    end_ns = snap["payload_ns"]
    meta, end = {}, {}
    for m in snap["metrics"]:
        k = series_key(m).decode()
        st = m["stats"]
        meta[k] = (m["name"], m["type"], m["tags"], st.get("min"), st.get("max"))
        end[k] = windowmath.load_state(m["type"], states.get(k))
    rows = [(ts, snap_) for ts, snap_ in db.history(owner, iid, end_ns - seconds * NS) if ts < end_ns]
    history = [(ts, {k: windowmath.load_state(meta[k][1], v) for k, v in states.items() if k in meta})
               for ts, states in rows]
    history.append((end_ns, end))
    si, ei = windowmath.pick([ts for ts, _ in history], seconds)
    start_ns, start = history[si]
    covered = (end_ns - start_ns) / NS
    inside = history[si:ei + 1]
    out = []
    for k in sorted(meta, key=lambda k: (meta[k][0], sorted(meta[k][2].items()), meta[k][1])):
        name, type_, tags, vmin, vmax = meta[k]
        cur, prev = history[ei][1].get(k), start.get(k)
        if type_ == HISTOGRAM and cur is None:
            continue
        # each stored snapshot is one sample of a gauge
        runs = [(snap_.get(k), 1) for _, snap_ in inside] if type_ == GAUGE else ()
        stats = windowmath.window(type_, prev, cur, covered, runs, vmin, vmax)
        if type_ == PROFILE:
            naming.annotate(name, stats["frames"])
        out.append({"name": name, "type": type_, "tags": tags, "new_in_window": k not in start, "stats": stats})
    partial = si == 0 and covered < seconds
    doc = {"seconds": seconds, "start_ns": start_ns, "end_ns": end_ns, "covered_seconds": round(covered, 6),
           "partial": partial, "snapshots": len(inside),
           "resolution_seconds": 60 if end_ns - start_ns <= MINUTE_ROWS_NS else HOUR_NS // NS, "metrics": out}
    if covered == 0:
        doc["note"] = "no stored snapshot before the latest yet (the server keeps one a minute)"
    elif partial:
        doc["note"] = "the stored history covers %.3f of the %d seconds asked for" % (covered, seconds)
    return doc
