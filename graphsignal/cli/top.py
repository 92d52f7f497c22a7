"""graphsignal-top: a top-like terminal view of a profiler's /signals.

Two layers, as in nvitop: graphsignal.top (client, state, render: no
curses anywhere; screen: the terminal) and this entry point, which
parses the command line.
"""
import argparse
import sys
from dataclasses import dataclass

from graphsignal import config
from graphsignal.cli import args
from graphsignal.textsafe import clean
from graphsignal.top import client
from graphsignal.top.client import DEFAULT_HOST, DEFAULT_PORT, cannot_show
from graphsignal.top.screen import run_interactive, run_once
from graphsignal.top.tables import KERNELS, TABLES

MAX_WINDOW = 600  # the sidecar keeps ten minutes of per-second snapshots


@dataclass(frozen=True)
class TopConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    window: int = 5
    once: bool = False
    no_color: bool = False
    table: str = KERNELS
    interval: float = 1.0
    timeout: float = client.DEADLINE
    show_help: bool = False
    show_version: bool = False
    source: str = ""  # with --once: a saved payload file, '-' or a URL instead of --host/--port


PROG = "graphsignal-top"
_window = args.number(int, 1, MAX_WINDOW, unit="seconds")
_interval = args.number(float, 0.2, 60, unit="seconds")
_timeout = args.number(float, 0, 600, low_open=True, unit="seconds")


def parser():
    p = args.Parser(
        PROG, formatter_class=argparse.HelpFormatter,
        description="A top-like view of a running graphsignal profiler's /signals endpoint: GPUs, engine, "
                    "kernels, CUDA graphs, memory transfers and synchronization.",
        epilog="keys: q quit, up/down select, Enter details, k kernels, g CUDA graphs, m memory transfers, "
               "s host synchronization. Colors follow NO_COLOR.")
    p.add_argument("--host", default=DEFAULT_HOST, help="profiler host (default: %(default)s); a remote "
                   "profiler must have been started with --listen-host")
    p.add_argument("--port", type=args.port(config.CONNECT_PORT), default=DEFAULT_PORT,
                   help="profiler port (default: %(default)s)")
    p.add_argument("--window", type=_window, default=5, metavar="SECONDS",
                   help="seconds that rates and the ranking cover (default: %(default)s, at most 600)")
    p.add_argument("--once", action="store_true", help="print a single frame and exit (for scripts and agents)")
    p.add_argument("--no-color", action="store_true", help="no colors (also when NO_COLOR is set)")
    p.add_argument("--table", type=args.choice(TABLES), default=KERNELS, metavar="{%s}" % ",".join(TABLES),
                   help="the table to show first (default: %(default)s)")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS", help=argparse.SUPPRESS)
    p.add_argument("source", nargs="?", default="", metavar="FILE|URL",
                   help="with --once: a saved /signals payload (a file, - for stdin) or an endpoint's URL instead "
                        "of --host/--port; findings are computed from it when it has none")
    p.add_argument("--timeout", type=_timeout, default=client.DEADLINE, metavar="SECONDS",
                   help="seconds the profiler has to send a whole payload (default: %(default)g)")
    return p


def parse(argv):
    """TopConfig from the arguments; raises args.UsageError."""
    a = parser().parse(list(argv))
    if a.source and not a.once and not (a.show_help or a.show_version):
        raise args.UsageError("a FILE or URL is read with --once (one frame): graphsignal-top --once %s" % a.source)
    return TopConfig(host=a.host, port=a.port, window=a.window, once=a.once, no_color=a.no_color, table=a.table,
                     interval=a.interval, timeout=a.timeout, show_help=a.show_help, show_version=a.show_version,
                     source=a.source)


def _source(cfg):
    """(label, fetch) of a FILE or URL given with --once (graphsignal.top.screen.run_once)."""
    from graphsignal.cli.diff import LoadError, load

    src = cfg.source
    if src.startswith(("http://", "https://")) and "?" not in src:
        src += ("/signals" if src.rstrip("/").count("/") == 2 else "") + "?window=%d" % cfg.window
        src = src.replace("//signals", "/signals")

    def get():
        try:
            return load(src, timeout=cfg.timeout), None, None
        except LoadError as e:  # its line starts with the source, which the frame and stderr name already
            msg, head = str(e), clean(src) + ": "
            return None, msg[len(head):] if msg.startswith(head) else msg, None
    return clean(cfg.source), get


def main(argv=None) -> int:
    cfg, status = args.start(PROG, parse, lambda: parser().format_help(), argv)
    if cfg is None:
        return status
    client.DEADLINE = cfg.timeout  # the screen fetches with the client's defaults
    if cfg.once:
        try:
            return run_once(cfg, source=_source(cfg) if cfg.source else None)
        except OSError:
            raise
        except Exception as e:  # as the interactive screen does: one line, never a traceback
            where = clean(cfg.source) if cfg.source else "%s:%d" % (clean(cfg.host), cfg.port)
            sys.stderr.write("graphsignal-top: %s: %s\n" % (where, cannot_show(e)))
            return 1
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        sys.stderr.write("graphsignal-top: not a terminal; use --once to print a single frame "
                         "(e.g. graphsignal-top --once > frame.txt)\n")
        return 2
    return run_interactive(cfg)


if __name__ == "__main__":
    sys.exit(main())
