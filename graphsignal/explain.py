"""The reference texts shipped in the package (graphsignal/reference/*.md),
printed offline by `graphsignal-run --explain TOPIC|METRIC`.

SKILL.md is what an agent holds for the loop; everything else it names is
here, one topic a file, each starting with "# TOPIC: what it covers". A
metric name (`cuda_kernels_nanoseconds`, `gpu_busy_time_nanoseconds`, a
window or engine key) is explained by its row of the metric table
(graphsignal.naming.metrics, the same table /metrics and OTLP use) and
every paragraph of the reference that names it.
"""
import os
import re
from typing import List, Optional, Tuple

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")


def topics() -> List[Tuple[str, str]]:
    """[(topic, one line)] in name order."""
    out = []
    for f in sorted(os.listdir(DIR)):
        if f.endswith(".md"):
            with open(os.path.join(DIR, f), encoding="utf-8") as fh:
                head = fh.readline().strip().lstrip("# ")
            out.append((f[:-3], head.split(": ", 1)[1] if ": " in head else head))
    return out


def text(topic: str) -> Optional[str]:
    """A topic's whole text, or None."""
    if not re.fullmatch(r"[a-z0-9_]+", topic):
        return None
    path = os.path.join(DIR, topic + ".md")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def listing() -> str:
    rows = topics()
    width = max(len(t) for t, _ in rows)
    return "topics (graphsignal-run --explain TOPIC), or a metric name:\n" + "".join(
        "  %-*s  %s\n" % (width, t, line) for t, line in rows)


def metric(name: str) -> Optional[str]:
    """What the reference says of one metric (its table row and every
    paragraph naming it), or None when it names nothing."""
    if not re.fullmatch(r"[A-Za-z0-9_.:]+", name):
        return None
    from graphsignal.naming import metrics as table

    out = []
    for m in table.table():
        if name in (m.name, m.prom, m.samples):
            out.append("%s (%s, tags %s; /metrics %s, %s): %s" % (
                m.name, m.type, m.tags or "-", m.prom or "-", m.unit or "-", m.help))
    pat = re.compile(r"(?<![\w.:])%s(?![\w:])" % re.escape(name))
    for topic, _ in topics():
        body = text(topic) or ""
        for para in re.split(r"\n\s*\n", body):
            if pat.search(para) and not para.lstrip().startswith("|"):  # the table row is said above
                out.append("[%s] %s" % (topic, para.strip()))
    return "\n\n".join(out) + "\n" if out else None


def explain(what: str) -> Tuple[int, str]:
    """(exit status, text) for --explain WHAT ("" lists the topics)."""
    if not what:
        return 0, listing()
    got = text(what) or metric(what)
    if got is None:
        return 2, "nothing is explained as %r\n%s" % (what[:80], listing())
    return 0, got
