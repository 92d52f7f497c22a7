"""graphsignal-diff BEFORE AFTER: what changed between two /signals
payloads (files saved with GRAPHSIGNAL_SIGNALS_FILE or curl, or http://
URLs of live endpoints), ranked by absolute change; see graphsignal.diff
for what is compared and how. graphsignal-diff B1 B2 B3 -- A1 A2 A3
compares several runs of each side: medians, with each change's
run-to-run spread.

Exit status: 0 with the comparison, 1 when a side cannot be read (one
line on stderr says why: missing, too large, not JSON, not a payload,
unreachable, too slow), 2 for a usage error. Every read is bounded
(graphsignal.httpfetch.MAX_BYTES; a URL also by TIMEOUT per read, and all
URLs together by --timeout, so that the command ends within it however
many endpoints trickle)."""
import argparse
import os
import stat
import sys
import time
import urllib.parse
from dataclasses import dataclass
from typing import Optional, Tuple

import orjson

from graphsignal import diff, httpfetch
from graphsignal.cli import args
from graphsignal.textsafe import clean

TIMEOUT = 10.0  # seconds for a live endpoint to connect or send the next bytes
# seconds for the whole answers of every live endpoint of a run together; with
# the start-up, the command ends within 30 s against endpoints that trickle
DEADLINE = 25.0


@dataclass(frozen=True)
class DiffConfig:
    before: Tuple[str, ...]  # one payload a run
    after: Tuple[str, ...]
    json: bool = False
    top: int = 20
    window: object = None  # None: windows when both have one; True / False: asked for
    timeout: float = DEADLINE
    per: Optional[str] = None  # normalize by this metric's count (--per)
    show_help: bool = False
    show_version: bool = False


PROG = "graphsignal-diff"
# what load() reads besides a file (graphsignal-export's SOURCE too)
SOURCES = "'-' for stdin, or an http:// URL of a live endpoint (http://127.0.0.1:18259 means its /signals)."
_top = args.number(int, 0, 1_000_000)
_seconds = args.number(float, 0, 3600, low_open=True, unit="seconds")


def parser():
    p = args.Parser(
        PROG, formatter_class=argparse.HelpFormatter,
        usage="graphsignal-diff [options] BEFORE AFTER\n       graphsignal-diff [options] BEFORE... -- AFTER...",
        description="Compare /signals payloads from BEFORE and AFTER a change and rank what changed: time per "
                    "kernel, CUDA graph, copy, sync and probe frame (total, per call, share), counters, "
                    "histograms and the engine summary; as totals of each run when the runs ended (a fixed "
                    "amount of work), per generated token for engines, per second of covered time for live "
                    "services, or per unit of --per NAME. With several runs a side (BEFORE... -- AFTER...) "
                    "each change carries its run-to-run spread, and changes inside it are marked and ranked "
                    "last.",
        epilog="BEFORE/AFTER: a file (graphsignal-run --output, or curl -s .../signals > before.json), " + SOURCES)
    p.add_argument("payloads", nargs="*", metavar="PAYLOAD", help="BEFORE AFTER, or BEFORE runs -- AFTER runs")
    p.add_argument("--per", metavar="NAME",
                   help="compare per unit of NAME: a probe counter of steps or requests, a histogram's count or a "
                        "profile's calls, in each run")
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
                   help="seconds the URLs have, all together, to send their whole payloads (default: "
                        "%(default)g)")
    return p


_SPLIT = "\0--"  # no file has this name


def parse(argv):
    """DiffConfig from the arguments; raises args.UsageError for anything
    else than BEFORE AFTER or BEFORE... -- AFTER... ."""
    argv = list(argv)
    p = parser()
    # "--" splits the runs (options may come anywhere): a marker argparse keeps as a payload
    split = "--" in argv
    if split:
        argv[argv.index("--")] = _SPLIT
    ns = p.parse(argv, intermixed=True)
    if ns.show_help or ns.show_version:
        return DiffConfig(before=(), after=(), show_help=ns.show_help, show_version=ns.show_version)
    if split:
        i = ns.payloads.index(_SPLIT)
        before, after = tuple(ns.payloads[:i]), tuple(ns.payloads[i + 1:])
        if not before or not after or _SPLIT in after:
            p.error("give BEFORE... -- AFTER...: one or more payloads on each side of one --")
    else:
        if len(ns.payloads) != 2:
            p.error("give BEFORE AFTER (one payload each), or BEFORE... -- AFTER... (several runs a side)")
        before, after = (ns.payloads[0],), (ns.payloads[1],)
    if sum(x == "-" for x in before + after) > 1:
        p.error("'-' (stdin) can be one payload only")
    return DiffConfig(before=before, after=after, json=ns.json, top=ns.top, window=ns.window, timeout=ns.timeout,
                      per=ns.per)


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


def load(src, stdin=None, timeout=DEADLINE, max_bytes=httpfetch.MAX_BYTES, since=None):
    """The payload at `src` (a path, '-', or an http(s):// URL) as a dict;
    raises LoadError with the one line to show (no control characters).
    A URL has `timeout` seconds counted from `since` (time.monotonic();
    default: now)."""
    where = clean(src)
    try:
        if src.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(src)
            if u.path in ("", "/"):
                src = urllib.parse.urlunsplit((u.scheme, u.netloc, "/signals", u.query, ""))
                where = clean(src)
            data = httpfetch.get(src, min(TIMEOUT, timeout), timeout, max_bytes, since=since)
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
    cfg, status = args.start(PROG, parse, lambda: parser().format_help(), argv)
    if cfg is None:
        return status
    since = time.monotonic()  # one deadline for every URL: N slow endpoints must not take N times it
    try:
        before = [load(src, timeout=cfg.timeout, since=since) for src in cfg.before]
        after = [load(src, timeout=cfg.timeout, since=since) for src in cfg.after]
    except LoadError as e:
        sys.stderr.write("graphsignal-diff: %s\n" % e)
        return 1
    try:
        doc = diff.compare(before, after, [clean(x) for x in cfg.before], [clean(x) for x in cfg.after],
                           cfg.window, cfg.per)
    except diff.CannotCompare as e:
        sys.stderr.write("graphsignal-diff: %s\n" % clean(str(e)))
        return 1
    doc = diff.top(doc, cfg.top)
    if cfg.json:
        out = {"changes": doc["changes"], "warnings": doc["warnings"], "before": doc["before"],
               "after": doc["after"], "normalized_by": doc["normalized_by"], "findings": doc["findings"]}
        if doc.get("left_out"):
            out["left_out"] = doc["left_out"]
        sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(diff.to_text(doc))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
