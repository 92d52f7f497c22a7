"""graphsignal-top's FINDINGS section: the payload's findings
(graphsignal.findings), largest impact first, as styled lines (the
render module's segments). A payload without `findings` (a file saved
before they existed, an older sidecar) gets them computed here from the
same document, and the section says so.
"""
from typing import Any, Callable, Dict, List, Mapping, Tuple, cast

from graphsignal import findings
from graphsignal.signals_model import Signals
from graphsignal.top.text import Line

ONCE_FINDINGS = 5  # findings --once lists, each with its first change and what to confirm
LIVE_FINDINGS = 2
IMPACT_OF = {"wall_time": "of the time", "gpu_time": "of GPU time", "tokens_per_second": "of tokens/s",
             "requests": "of requests", "data": "of the data"}


def of_payload(payload: Mapping[str, Any]) -> Tuple[List[Dict[str, Any]], bool]:
    """(findings, computed here?) of a payload."""
    got = payload.get("findings")
    if isinstance(got, list):
        return [f for f in got if isinstance(f, dict)], False
    return cast(List[Dict[str, Any]], findings.compute(cast(Signals, payload))), True


def section(model: Any, once: bool, line: Callable[..., Line]) -> List[Line]:
    """The section's lines; line(*segments) makes one (graphsignal.top.text.line)."""
    found = model.findings or []
    how = " (computed from this payload)" if model.findings_computed else ""
    if not found and model.fetched_at is None:
        return [line((" FINDINGS ", "head"), ("no payload", "dim"))]
    if not found:
        return [line((" FINDINGS ", "head"), ("none%s" % how, "dim"))]
    lines = [line((" FINDINGS ", "head"), ("%d, largest impact first%s; graphsignal-run --explain findings"
                                           % (len(found), how), "dim"))]
    for i, f in enumerate(found[:ONCE_FINDINGS if once else LIVE_FINDINGS]):
        impact = f.get("impact") or {}
        share = impact.get("share") or 0.0
        of = IMPACT_OF.get(str(impact.get("of")), "")
        lines.append(line("   %d. " % (i + 1), ("%3.0f%% %-13s" % (100 * share, of),
                                                 "bad" if share >= 0.2 else "warn"),
                          " %s " % f.get("id"), (str(f.get("title") or ""), None),
                          (" [%s]" % f.get("confidence"), "dim")))
        if not once:
            continue
        for c in (f.get("change") or [])[:2]:
            lines.append(line(("      change (%s): " % c.get("target"), "key"), str(c.get("text") or "")))
        confirm = ", ".join("%s%s %s" % (c.get("series"), _tags(c.get("tags")), c.get("direction"))
                            for c in (f.get("confirm") or [])[:3])
        if confirm:
            lines.append(line(("      confirm: ", "dim"), (confirm, "dim")))
    if len(found) > (ONCE_FINDINGS if once else LIVE_FINDINGS):
        lines.append(line(("   ... %d more in the payload's findings" % (len(found) - (ONCE_FINDINGS if once
                                                                                        else LIVE_FINDINGS)), "dim")))
    return lines


def _tags(tags: Any) -> str:
    if not isinstance(tags, dict) or not tags:
        return ""
    return "{%s}" % ",".join("%s=%s" % kv for kv in sorted(tags.items()))
