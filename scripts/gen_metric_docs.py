#!/usr/bin/env python3
"""Writes the metric table of graphsignal/reference/metrics.md
(graphsignal-run --explain metrics) anew from graphsignal/naming/metrics.py
(the table /metrics' names, units and HELP lines come from), between its
two marks. --check: exit 1 when the file's table differs (what the tests
run)."""
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
    if args.check:
        if new != text:
            print("graphsignal/reference/metrics.md: the metric table is out of date: run scripts/gen_metric_docs.py")
            return 1
        return 0
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
