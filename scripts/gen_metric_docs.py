#!/usr/bin/env python3
"""Writes the metric table of graphsignal/reference/metrics.md
(graphsignal-run --explain metrics) anew from graphsignal/naming/metrics.py
(the table /metrics' names, units and HELP lines come from), between its
two marks, and METRICS.md (every series' /signals, Prometheus and OTLP
name, unit and meaning). --check: exit 1 when either differs (what the
tests run)."""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from graphsignal.naming import metrics  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    ap.add_argument("--check", action="store_true", help="only say whether the table is up to date")
    args = ap.parse_args(argv)
    path = os.path.join(ROOT, "graphsignal", "reference", "metrics.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = metrics.replace_in(text)
    full = os.path.join(ROOT, "METRICS.md")
    try:
        with open(full, encoding="utf-8") as f:
            old_full = f.read()
    except FileNotFoundError:
        old_full = ""
    new_full = metrics.full_markdown()
    if args.check:
        stale = [n for n, a, b in (("graphsignal/reference/metrics.md's metric table", new, text),
                                   ("METRICS.md", new_full, old_full)) if a != b]
        for n in stale:
            print("%s is out of date: run scripts/gen_metric_docs.py" % n)
        return 1 if stale else 0
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    if new_full != old_full:
        with open(full, "w", encoding="utf-8") as f:
            f.write(new_full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
