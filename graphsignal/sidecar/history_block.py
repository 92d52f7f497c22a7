"""GET /signals?history=N and the payload --output writes: the `history`
block (graphsignal.timeline) over the store's per-second history
(graphsignal.sidecar.history), one point a second for the last N
seconds. Built only when asked for: the history it reads is kept for
windows anyway, so a /signals read without ?history costs nothing more."""
from typing import Any, Dict, List, Optional

from graphsignal import report, timeline
from graphsignal.signals_model import StoreSnapshot


def history_stats(store: Any, seconds: int) -> Dict[str, Any]:
    """The history block of the last `seconds` of a MetricStore."""
    return history_of(store.snapshot(), seconds)


def history_of(snap: StoreSnapshot, seconds: int) -> Dict[str, Any]:
    """The history block of the last `seconds` of a StoreSnapshot."""
    history = snap.history
    span = history.span(seconds)
    if span is None:
        return timeline.block([], [], lambda key, i: None, seconds, 1)
    si, ei = span
    points = [history[i] for i in range(si, ei + 1)]
    end = points[-1][1]
    names = [n for n in timeline.SELECTED]
    metas: List[timeline.Meta] = [(key, key[0], key[1], dict(key[2])) for key, _ in end.items_named(names)]
    # and the workload's own series (probes), whatever their names
    metas += [(key, key[0], key[1], dict(key[2])) for key in end
              if key[0] not in timeline.SELECTED and timeline.own(key[0], key[1], dict(key[2]))]
    return timeline.block([ts for ts, _ in points], metas, lambda key, i: points[i][1].get(key), seconds, 1)


def final_history(store: Any) -> Optional[Dict[str, Any]]:
    """The history block of the final payload (--output): all the store
    keeps, up to a snapshot taken now (what the final drain brought in);
    None when that fails (one log line, once): the payload is written
    without it rather than not at all."""
    try:
        store.take_history()
        return history_stats(store, store.history_seconds)
    except Exception as e:
        report.once(("history_block", type(e).__name__), "history block failed: %s: %s" % (type(e).__name__, e))
        return None
