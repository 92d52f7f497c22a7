"""Findings between two runs, for graphsignal-diff: which disappeared
("what the change fixed"), which appeared, which shrank or grew.

Each side is one payload or several runs; a finding belongs to a side
when it is in most of its runs, with the median of its impact share. With
several runs a side, a share counts as changed only when the sides' ranges
are apart (the diff's noise rule); with one, when it moved by more than
CHANGE (relative).
"""
from typing import Any, Dict, List, Sequence, Tuple, cast

from graphsignal.findings import compute
from graphsignal.signals_model import Signals

CHANGE = 0.2  # a share that moves less than this (relative) is the same finding, unchanged


def _side(payloads: Sequence[Any]) -> Dict[str, Tuple[float, float, float, str]]:
    """{id: (median share, min, max, title)} of the findings in most runs."""
    seen: Dict[str, List[Tuple[float, str]]] = {}
    for p in payloads:
        got = p.get("findings") if isinstance(p, dict) else None
        found = got if isinstance(got, list) else compute(cast(Signals, p)) if isinstance(p, dict) else []
        for f in found:
            if isinstance(f, dict) and isinstance(f.get("id"), str):
                share = (f.get("impact") or {}).get("share") or 0.0
                seen.setdefault(f["id"], []).append((float(share), str(f.get("title") or "")))
    out = {}
    for fid, vals in seen.items():
        if 2 * len(vals) > len(payloads):
            shares = sorted(v[0] for v in vals)
            out[fid] = (shares[len(shares) // 2], shares[0], shares[-1], vals[-1][1])
    return out


def between(before: Sequence[Any], after: Sequence[Any]) -> Dict[str, List[Dict[str, Any]]]:
    """{"disappeared", "appeared", "shrank", "grew", "unchanged"}: lists of
    {id, title, before, after} (impact shares; null on the side without it),
    largest first."""
    b, a = _side(before), _side(after)
    several = len(before) > 1 and len(after) > 1
    out: Dict[str, List[Dict[str, Any]]] = {k: [] for k in ("disappeared", "appeared", "shrank", "grew",
                                                            "unchanged")}
    for fid in sorted(set(b) | set(a)):
        row = {"id": fid, "title": (a.get(fid) or b[fid])[3], "before": b[fid][0] if fid in b else None,
               "after": a[fid][0] if fid in a else None}
        if fid not in a:
            out["disappeared"].append(row)
        elif fid not in b:
            out["appeared"].append(row)
        else:
            (bs, bmin, bmax, _), (as_, amin, amax, _) = b[fid], a[fid]
            apart = amax < bmin or amin > bmax if several else abs(as_ - bs) > CHANGE * max(bs, 1e-9)
            out["shrank" if apart and as_ < bs else "grew" if apart else "unchanged"].append(row)
    for rows in out.values():
        rows.sort(key=lambda r: -max(r["before"] or 0, r["after"] or 0))
    return out


def lines(doc: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """The comparison for people, one line a finding that moved."""
    out = []
    for key, verb in (("disappeared", "gone (fixed)"), ("shrank", "shrank"), ("appeared", "new"), ("grew", "grew")):
        for r in doc.get(key) or []:
            shares = "%s -> %s" % ("-" if r["before"] is None else "%.0f%%" % (100 * r["before"]),
                                   "-" if r["after"] is None else "%.0f%%" % (100 * r["after"]))
            out.append("finding %-12s %s (%s at stake): %s" % (verb, r["id"], shares, r["title"]))
    return out
