"""graphsignal-diff BEFORE AFTER: what changed between two /signals
payloads (files saved with GRAPHSIGNAL_SIGNALS_FILE or curl, or http://
URLs of live endpoints), ranked by absolute change; see graphsignal.diff
for what is compared and how."""
import argparse
import sys
import urllib.error
import urllib.parse
from dataclasses import dataclass

import orjson

from graphsignal import __version__, diff
from graphsignal.top.client import _get, _reason

TIMEOUT = 10.0  # seconds for a live endpoint to answer


@dataclass(frozen=True)
class DiffConfig:
    before: str
    after: str
    json: bool = False
    top: int = 20
    window: object = None  # None: windows when both have one; True / False: asked for


def _top(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a whole number: %r" % text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be 0 (all) or more, got %d" % v)
    return v


def parser():
    p = argparse.ArgumentParser(
        prog="graphsignal-diff",
        description="Compare two /signals payloads (BEFORE and AFTER a change) and rank what changed: time per "
                    "kernel, CUDA graph, copy, sync and probe frame (total, per call, share), counters, "
                    "histograms and the engine summary, per second of covered time.",
        epilog="BEFORE/AFTER: a file (GRAPHSIGNAL_SIGNALS_FILE, or curl -s .../signals > before.json), '-' for "
               "stdin, or an http:// URL of a live endpoint (http://127.0.0.1:18259 means its /signals).")
    p.add_argument("before", metavar="BEFORE", help="the payload before the change")
    p.add_argument("after", metavar="AFTER", help="the payload after the change")
    p.add_argument("--json", action="store_true", help='print {"changes": [...], "warnings": [...]} as JSON')
    p.add_argument("--top", type=_top, default=20, metavar="N",
                   help="at most N changes of each kind (profiles, counters, histograms, engine); 0 lists all "
                        "(default: %(default)s)")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--window", dest="window", action="store_const", const=True,
                   help="compare the payloads' ?window=N sections (default when both have one)")
    w.add_argument("--cumulative", dest="window", action="store_const", const=False,
                   help="compare the totals since start even when both payloads have a window")
    p.add_argument("--version", action="version", version="graphsignal-diff " + __version__)
    return p


def parse(argv):
    ns = parser().parse_args(argv)
    return DiffConfig(before=ns.before, after=ns.after, json=ns.json, top=ns.top, window=ns.window)


class LoadError(Exception):
    pass


def load(src, stdin=None):
    """The payload at `src` (a path, '-', or an http(s):// URL) as a dict;
    raises LoadError with the one line to show."""
    if src.startswith(("http://", "https://")):
        u = urllib.parse.urlsplit(src)
        if u.path in ("", "/"):
            src = urllib.parse.urlunsplit((u.scheme, u.netloc, "/signals", u.query, ""))
        try:
            data = _get(src, TIMEOUT)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise LoadError("%s: %s" % (src, _reason(e)))
    elif src == "-":
        data = (stdin or sys.stdin.buffer).read()
    else:
        try:
            with open(src, "rb") as f:
                data = f.read()
        except OSError as e:
            raise LoadError("%s: %s" % (src, e.strerror or e))
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise LoadError("%s: not JSON (%s)" % (src, e))
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), list):
        raise LoadError("%s: not a /signals payload (no metrics list)" % src)
    return doc


def main(argv=None):
    cfg = parse(sys.argv[1:] if argv is None else argv)
    try:
        before, after = load(cfg.before), load(cfg.after)
    except LoadError as e:
        sys.stderr.write("graphsignal-diff: %s\n" % e)
        return 2
    doc = diff.top(diff.compare(before, after, cfg.before, cfg.after, cfg.window), cfg.top)
    if cfg.json:
        out = {"changes": doc["changes"], "warnings": doc["warnings"], "before": doc["before"],
               "after": doc["after"]}
        if doc.get("left_out"):
            out["left_out"] = doc["left_out"]
        sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(diff.to_text(doc))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
