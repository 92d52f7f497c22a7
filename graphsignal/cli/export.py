"""graphsignal-export SOURCE [--format speedscope|folded|chrome] [-o FILE]:
a /signals payload as a flame graph (speedscope JSON, folded stacks) or a
trace (Chrome trace event JSON for Perfetto and chrome://tracing); see
graphsignal.export for what each holds.

Defaults, as py-spy's: the format is taken from -o's name (`.folded` or
`.txt`: folded stacks; `.trace.json`: a Chrome trace), else a speedscope
flame graph; without -o the output goes to stdout when that is a pipe or
a file, and to SOURCE's name with the format's extension in the current
directory when it is a terminal (`after.json` -> `after.speedscope.json`;
a URL -> `signals.speedscope.json`), one line saying so.

SOURCE is a payload file (graphsignal-run --output, curl), '-' for stdin,
or an http:// URL of a live endpoint (its /signals; for --format chrome
the read asks for ?history=N, and asks again without it when the
endpoint has none). Reads are bounded as graphsignal-diff's are
(graphsignal.httpfetch), with the token graphsignal-diff sends
(GRAPHSIGNAL_SIGNALS_TOKEN).

Exit status: 0 with the file written, 1 when SOURCE cannot be read or
holds nothing to export (one line on stderr), 2 for a usage error (one
line)."""
import os
import sys
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from graphsignal import httpfetch, safefs
from graphsignal.cli import args
from graphsignal.cli.diff import SOURCES, LoadError, load
from graphsignal.textsafe import clean

PROG = "graphsignal-export"
FORMATS = ("speedscope", "folded", "chrome")
TIMEOUT = 10.0  # seconds for a live endpoint to connect or send the next bytes
DEADLINE = 30.0
HISTORY = 600  # seconds of history a live read asks for (the sidecar keeps 600)


@dataclass(frozen=True)
class ExportConfig:
    source: str
    format: str
    output: str
    window: bool = False
    history: int = HISTORY
    timeout: float = DEADLINE
    show_help: bool = False
    show_version: bool = False


_seconds = args.number(float, 0, 3600, low_open=True, unit="seconds")
_history = args.number(int, 1, 86400, unit="seconds")


def parser() -> args.Parser:
    p = args.Parser(PROG,
                usage="graphsignal-export SOURCE [--format {speedscope,folded,chrome}] [-o FILE] [options]",
                description="Write a /signals payload as a flame graph (speedscope JSON or folded stacks: GPU time "
                            "by device, kind, category and kernel; NVTX ranges by nesting path; probe profiles) "
                            "or a trace (Chrome trace JSON for Perfetto and chrome://tracing: counter tracks per "
                            "second from the payload's history block, errors as instant events).",
                epilog="SOURCE: a payload file (graphsignal-run --output), " + SOURCES)
    p.add_argument("source", metavar="SOURCE", nargs="?", help="payload file, '-', or http:// URL")
    p.add_argument("--format", "-f", choices=FORMATS,
                   help="the file to write (default: from -o's name, else speedscope)")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="where to write it ('-': stdout; default: stdout, or SOURCE's name with the format's "
                        "extension when stdout is a terminal)")
    p.add_argument("--window", action="store_true",
                   help="flame graphs over the payload's ?window=N section instead of since start")
    p.add_argument("--history", type=_history, default=HISTORY, metavar="SECONDS",
                   help="seconds of per-second history a live endpoint is asked for with --format chrome "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=_seconds, default=DEADLINE, metavar="SECONDS",
                   help="seconds a URL has to send its whole payload (default: %(default)g)")
    return p


def parse(argv: List[str], tty: bool = False) -> ExportConfig:
    """ExportConfig from the arguments (tty: stdout is a terminal); raises
    args.UsageError."""
    p = parser()
    ns = p.parse(argv)
    if ns.show_help or ns.show_version:
        return ExportConfig(source="", format="", output="", show_help=ns.show_help, show_version=ns.show_version)
    if ns.source is None:
        p.error("SOURCE is required")
    fmt = ns.format or format_of(ns.output)
    output = ns.output or default_output(ns.source, fmt, tty)
    return ExportConfig(source=ns.source, format=fmt, output=output, window=ns.window,
                        history=ns.history, timeout=ns.timeout)


EXTENSIONS = {"speedscope": ".speedscope.json", "folded": ".folded", "chrome": ".trace.json"}


def format_of(output: Optional[str]) -> str:
    """The format an output name asks for; speedscope when it says none."""
    name = (output or "").lower()
    if name.endswith((".folded", ".txt")):
        return "folded"
    if name.endswith(".trace.json"):
        return "chrome"
    return "speedscope"


def default_output(source: str, fmt: str, tty: bool) -> str:
    """'-' (stdout) unless stdout is a terminal; then SOURCE's name with the
    format's extension, in the current directory."""
    if not tty:
        return "-"
    if source.startswith(("http://", "https://")) or source == "-":
        stem = "signals"
    else:
        stem = os.path.basename(source.rstrip("/")) or "signals"
        if stem.lower().endswith(".json"):
            stem = stem[:-5]
    return stem + EXTENSIONS[fmt]


def _with_history(url: str, seconds: int) -> Optional[str]:
    """The URL asking for ?history=seconds, or None when it asks already."""
    u = urllib.parse.urlsplit(url)
    path = u.path if u.path not in ("", "/") else "/signals"
    query = urllib.parse.parse_qsl(u.query, keep_blank_values=True)
    if any(k == "history" for k, _ in query):
        return None
    query.append(("history", str(seconds)))
    return urllib.parse.urlunsplit((u.scheme, u.netloc, path, urllib.parse.urlencode(query), ""))


def read(cfg: ExportConfig) -> Dict[str, Any]:
    """The payload; raises LoadError with the line to show."""
    if cfg.format == "chrome" and cfg.source.startswith(("http://", "https://")):
        try:
            url = _with_history(cfg.source, cfg.history)
        except ValueError as e:
            raise LoadError("%s: not a valid URL (%s)" % (clean(cfg.source), clean(e)))
        if url is not None:
            try:
                data = httpfetch.get(url, min(TIMEOUT, cfg.timeout), cfg.timeout)
                return httpfetch.parse_signals(data)  # type: ignore[no-any-return]
            except httpfetch.FetchError as e:
                if e.status != 400:  # 400: an endpoint without ?history: read it plain below
                    raise LoadError("%s: %s" % (clean(url), e))
    return load(cfg.source, timeout=cfg.timeout)  # type: ignore[no-any-return]


def render(cfg: ExportConfig, payload: Dict[str, Any]) -> bytes:
    from graphsignal.export import chrome, folded, speedscope

    if cfg.format == "speedscope":
        return speedscope.render(payload, cfg.window)
    if cfg.format == "folded":
        return folded.render(payload, cfg.window)
    return chrome.render(payload)


def main(argv: Optional[List[str]] = None) -> int:
    cfg, status = args.start(PROG, lambda a: parse(a, tty=sys.stdout.isatty()), lambda: parser().format_help(), argv)
    if cfg is None:
        return status
    try:
        payload = read(cfg)
        data = render(cfg, payload)
    except LoadError as e:
        sys.stderr.write("%s: %s\n" % (PROG, e))
        return 1
    except ValueError as e:
        sys.stderr.write("%s: %s: %s\n" % (PROG, clean(cfg.source), clean(str(e))))
        return 1
    except (TypeError, AttributeError, KeyError, IndexError, OverflowError) as e:
        # a payload of the right outline and the wrong insides (another tool's JSON, a hostile endpoint)
        sys.stderr.write("%s: %s: cannot export this payload: %s: %s\n"
                         % (PROG, clean(cfg.source), type(e).__name__, clean(str(e))[:200]))
        return 1
    if cfg.output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    try:
        safefs.write_atomic(cfg.output, data)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror and not isinstance(e, safefs.UnsafePath) else e
        sys.stderr.write("%s: cannot write %s: %s\n" % (PROG, clean(cfg.output), clean(str(why))))
        return 1
    if sys.stdout.isatty():
        sys.stderr.write("%s: wrote %s (%s)\n" % (PROG, clean(cfg.output), cfg.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
