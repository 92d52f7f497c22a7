"""GET /api/v1/history: the `history` block (graphsignal.timeline) of one
instance: over the last RECENT_SECONDS (15 minutes) or less, one point
per upload (a second apart) from the server's recent tier
(graphsignal.fleet.recent), where it has the instance; beyond that, from
the stored history: one point a minute for the last 24 hours, one an
hour before that (db.history's rows), and the latest upload as the last
point. The fleet page draws its charts from it."""
from graphsignal import timeline
from graphsignal.fleet.rows import series_key
from graphsignal.fleet.storage import MINUTE_ROWS_NS, NS

DEFAULT_SECONDS = 86400


def history(db, owner, iid, snap, states, seconds, recent=None):
    """The block over the last `seconds` before the instance's latest
    upload; snap and states: its latest snapshot and stored states
    (db.snapshot_states)."""
    end_ns = snap["payload_ns"]
    if recent is not None and seconds <= recent.seconds:
        times, metas_of, state_at = recent.points(owner, iid, end_ns - seconds * NS)
        if len(times) >= 2:
            metas = [(k, name, type_, tags) for k, (name, type_, tags) in metas_of.items()]
            return timeline.block(times, metas, state_at, seconds, 1)
    metas, last = [], {}
    for m in snap["metrics"]:
        if not timeline.selected(m["name"], m["type"], m["tags"]):
            continue
        k = series_key(m).decode()
        metas.append((k, m["name"], m["type"], m["tags"]))
        last[k] = states.get(k)
    wanted = set(last)
    rows = [(ts, {k: v for k, v in states.items() if k in wanted})
            for ts, states in db.history(owner, iid, end_ns - seconds * NS) if end_ns - seconds * NS <= ts < end_ns]
    rows.append((end_ns, last))
    doc = timeline.block([ts for ts, _ in rows], metas, lambda key, i: rows[i][1].get(key), seconds,
                         60 if seconds * NS <= MINUTE_ROWS_NS else 3600)
    return doc
