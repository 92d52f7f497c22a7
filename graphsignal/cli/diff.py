"""graphsignal-diff BEFORE AFTER: what changed between two /signals
payloads (files saved with GRAPHSIGNAL_SIGNALS_FILE or curl, or http://
URLs of live endpoints), ranked by absolute change; see graphsignal.diff
for what is compared and how.

Exit status: 0 with the comparison, 1 when a side cannot be read (one
line on stderr says why: missing, too large, not JSON, not a payload,
unreachable, too slow), 2 for a usage error. Every read is bounded
(graphsignal.httpfetch.MAX_BYTES; a URL also by TIMEOUT per read and
--timeout in all)."""
import argparse
import os
import stat
import sys
import urllib.parse
from dataclasses import dataclass

import orjson

from graphsignal import __version__, diff, httpfetch
from graphsignal.textsafe import clean

TIMEOUT = 10.0  # seconds for a live endpoint to connect or send the next bytes
DEADLINE = 30.0  # seconds for a live endpoint's whole answer


@dataclass(frozen=True)
class DiffConfig:
    before: str
    after: str
    json: bool = False
    top: int = 20
    window: object = None  # None: windows when both have one; True / False: asked for
    timeout: float = DEADLINE


def _top(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a whole number: %r" % text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be 0 (all) or more, got %d" % v)
    return v


def _seconds(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number of seconds: %r" % text)
    if not 0 < v <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds, got %s" % text)
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
    p.add_argument("--timeout", type=_seconds, default=DEADLINE, metavar="SECONDS",
                   help="seconds a URL has to send its whole payload (default: %(default)g)")
    p.add_argument("--version", action="version", version="graphsignal-diff " + __version__)
    return p


def parse(argv):
    ns = parser().parse_args(argv)
    return DiffConfig(before=ns.before, after=ns.after, json=ns.json, top=ns.top, window=ns.window,
                      timeout=ns.timeout)


class LoadError(Exception):
    pass


def _read_bounded(f, limit):
    """At most `limit` bytes of a file, a pipe or /dev/zero: a regular file
    is judged by its size before anything is read."""
    try:
        st = os.fstat(f.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    except (OSError, AttributeError, ValueError):  # a stand-in for stdin without a descriptor
        size = 0
    if size <= limit:
        data = f.read(limit + 1)
        size = len(data)
    if size > limit:
        raise httpfetch.FetchError("larger than %d MB (a /signals payload is a few MB)" % (limit >> 20))
    return data


def load(src, stdin=None, timeout=DEADLINE, max_bytes=httpfetch.MAX_BYTES):
    """The payload at `src` (a path, '-', or an http(s):// URL) as a dict;
    raises LoadError with the one line to show (no control characters)."""
    where = clean(src)
    try:
        if src.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(src)
            if u.path in ("", "/"):
                src = urllib.parse.urlunsplit((u.scheme, u.netloc, "/signals", u.query, ""))
                where = clean(src)
            data = httpfetch.get(src, min(TIMEOUT, timeout), timeout, max_bytes)
        elif src == "-":
            data = _read_bounded(stdin or sys.stdin.buffer, max_bytes)
        else:
            try:
                with open(src, "rb") as f:
                    data = _read_bounded(f, max_bytes)
            except OSError as e:
                raise LoadError("%s: %s" % (where, clean(e.strerror or e)))
        return httpfetch.parse_signals(data)
    except httpfetch.FetchError as e:
        raise LoadError("%s: %s" % (where, e))
    except ValueError as e:  # a URL urllib cannot split (a bad port, brackets)
        raise LoadError("%s: not a valid URL (%s)" % (where, clean(e)))
    except MemoryError:
        raise LoadError("%s: out of memory reading it" % where)


def main(argv=None):
    cfg = parse(sys.argv[1:] if argv is None else argv)
    try:
        before, after = load(cfg.before, timeout=cfg.timeout), load(cfg.after, timeout=cfg.timeout)
    except LoadError as e:
        sys.stderr.write("graphsignal-diff: %s\n" % e)
        return 1
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
