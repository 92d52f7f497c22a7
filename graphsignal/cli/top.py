"""graphsignal-top: a top-like terminal view of a profiler's /signals.

Two layers, as in nvitop: graphsignal.top (client, state, taxonomy,
render: no curses anywhere) and this front end, which owns the terminal.
A snapshot thread fetches /signals?window=N every second and builds the
view model; the curses loop only draws the latest model and handles keys,
so a slow or dead endpoint never freezes the screen.
"""
import argparse
import curses
import locale
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

from graphsignal import __version__
from graphsignal.top.client import DEFAULT_HOST, DEFAULT_PORT, SnapshotThread, fetch
from graphsignal.top.render import UI, render, to_text
from graphsignal.top.state import GRAPHS, KERNELS, MEMORY, SYNC, TABLES, TopState

MAX_WINDOW = 600  # the sidecar keeps ten minutes of per-second snapshots

_KEY_TABLES = {ord("k"): KERNELS, ord("g"): GRAPHS, ord("m"): MEMORY, ord("s"): SYNC}


@dataclass(frozen=True)
class TopConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    window: int = 5
    once: bool = False
    no_color: bool = False
    table: str = KERNELS
    interval: float = 1.0


def _port(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a port number: %r" % text)
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError("port must be 1..65535, got %d" % v)
    return v


def _window(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a whole number of seconds: %r" % text)
    if not 1 <= v <= MAX_WINDOW:
        raise argparse.ArgumentTypeError("window must be 1..%d seconds, got %d" % (MAX_WINDOW, v))
    return v


def _interval(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number of seconds: %r" % text)
    if not 0.2 <= v <= 60:
        raise argparse.ArgumentTypeError("interval must be 0.2..60 seconds, got %s" % text)
    return v


def parser():
    p = argparse.ArgumentParser(
        prog="graphsignal-top",
        description="A top-like view of a running graphsignal profiler's /signals endpoint: GPUs, engine, "
                    "kernels, CUDA graphs, memory transfers and synchronization.",
        epilog="keys: q quit, up/down select, Enter details, k kernels, g CUDA graphs, m memory transfers, "
               "s host synchronization. Colors follow NO_COLOR.")
    p.add_argument("--host", default=DEFAULT_HOST, help="profiler host (default: %(default)s); a remote "
                   "profiler must have been started with --listen-host")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help="profiler port (default: %(default)s)")
    p.add_argument("--window", type=_window, default=5, metavar="SECONDS",
                   help="seconds that rates and the ranking cover (default: %(default)s, at most 600)")
    p.add_argument("--once", action="store_true", help="print a single frame and exit (for scripts and agents)")
    p.add_argument("--no-color", action="store_true", help="no colors (also when NO_COLOR is set)")
    p.add_argument("--table", choices=TABLES, default=KERNELS,
                   help="the table to show first (default: %(default)s)")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="SECONDS", help=argparse.SUPPRESS)
    p.add_argument("-V", "--version", action="version", version="graphsignal-top " + __version__)
    return p


def parse(argv):
    a = parser().parse_args(argv)
    return TopConfig(host=a.host, port=a.port, window=a.window, once=a.once, no_color=a.no_color, table=a.table,
                     interval=a.interval)


def colors_wanted(cfg, environ, isatty):
    """NO_COLOR (any non-empty value) and --no-color win; --once colors
    only a terminal, never a pipe or file."""
    if cfg.no_color or environ.get("NO_COLOR"):
        return False
    return bool(isatty)


def _unicode_ok(encoding):
    return "utf" in (encoding or "").lower()


def endpoint(cfg):
    return "%s:%d" % (cfg.host, cfg.port)


# -- --once -------------------------------------------------------------------------------
def run_once(cfg, out=None, environ=None):
    out = out or sys.stdout
    environ = os.environ if environ is None else environ
    state = TopState(endpoint(cfg), cfg.window)
    payload, error, note = fetch(cfg.host, cfg.port, cfg.window)
    state.update(payload, error, note)
    tty = out.isatty() if hasattr(out, "isatty") else False
    width = shutil.get_terminal_size().columns if tty else None
    lines = render(state.model, UI(cfg.table), width=width, height=None,
                   unicode=_unicode_ok(getattr(out, "encoding", None)))
    out.write(to_text(lines, colors_wanted(cfg, environ, tty)))
    out.flush()
    return 0 if payload is not None else 1


# -- the interactive screen ----------------------------------------------------------------
class Terminated(Exception):
    """SIGTERM or SIGHUP arrived: leave through the context manager."""


class Screen:
    """Owns curses: sets the terminal up on enter and always restores it
    on exit, whether the loop ended by q, an exception or a signal."""

    def __init__(self, color):
        self.color = color
        self.stdscr = None
        self.attrs = {}
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._on_signal)
        try:
            # the terminal's own size, not LINES/COLUMNS from the environment:
            # an exported value (some shells and harnesses export them) would
            # pin the screen to it and make resizing impossible. (use_env(False)
            # is no cure: it trusts terminfo's 80x24 over the terminal.)
            for var in ("LINES", "COLUMNS"):
                os.environ.pop(var, None)
            self.stdscr = curses.initscr()
            curses.noecho()
            curses.cbreak()
            self.stdscr.keypad(True)
            try:
                curses.curs_set(0)
            except curses.error:
                pass  # terminals without an invisible cursor
            self.stdscr.timeout(100)  # ms: keys feel immediate, the loop still sees new data
            self.attrs = self._styles()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc):
        self._restore()
        return False

    @staticmethod
    def _on_signal(signum, frame):
        raise Terminated(signum)

    def _styles(self):
        a = {"title": curses.A_BOLD | curses.A_REVERSE, "head": curses.A_BOLD, "dim": curses.A_DIM,
             "sel": curses.A_REVERSE, "bad": curses.A_BOLD, "key": curses.A_BOLD}
        if self.color and curses.has_colors():
            try:
                curses.start_color()
                curses.use_default_colors()
                bg = -1
            except curses.error:
                bg = curses.COLOR_BLACK
            for n, (name, fg, extra) in enumerate((("ok", curses.COLOR_GREEN, 0), ("warn", curses.COLOR_YELLOW, 0),
                                                   ("bad", curses.COLOR_RED, curses.A_BOLD),
                                                   ("bar", curses.COLOR_CYAN, 0)), start=1):
                try:
                    curses.init_pair(n, fg, bg)
                    a[name] = curses.color_pair(n) | extra
                except curses.error:
                    pass
        return a

    def _restore(self):
        if self.stdscr is not None:
            try:
                self.stdscr.keypad(False)
                curses.nocbreak()
                curses.echo()
                try:
                    curses.curs_set(1)
                except curses.error:
                    pass
            except curses.error:
                pass
            finally:
                try:
                    curses.endwin()
                except curses.error:
                    pass
            self.stdscr = None
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}

    def size(self):
        h, w = self.stdscr.getmaxyx()
        return w, h

    def draw(self, lines):
        scr = self.stdscr
        scr.erase()
        h, w = scr.getmaxyx()
        for y, ln in enumerate(lines[:h]):
            x = 0
            for text, style in ln:
                room = w - x
                if room <= 0:
                    break
                try:
                    scr.addstr(y, x, text[:room], self.attrs.get(style, 0))
                except curses.error:
                    pass  # the bottom-right cell cannot be written without scrolling; nothing lost
                x += len(text)
        scr.refresh()


def follow_selection(ui, model):
    """Keeps the selected row on the same kernel while the ranking moves."""
    rows = model.tables[ui.table].rows
    if ui.selected_key is not None:
        for i, r in enumerate(rows):
            if r.key == ui.selected_key:
                ui.selected = i
                break
    ui.clamp(len(rows))
    ui.selected_key = rows[ui.selected].key if rows else None


def handle_key(ch, ui, model, page=10):
    """Applies one key; returns False to quit."""
    rows = model.tables[ui.table].rows
    if ch in (ord("q"), ord("Q")):
        return False
    if ch in _KEY_TABLES:
        if ui.table != _KEY_TABLES[ch]:
            ui.table, ui.selected, ui.offset, ui.selected_key = _KEY_TABLES[ch], 0, 0, None
        ui.details = False
    elif ch in (curses.KEY_ENTER, 10, 13):
        ui.details = not ui.details and bool(rows)
    elif ch == 27:  # Esc
        ui.details = False
    elif ch == curses.KEY_UP:
        ui.selected -= 1
    elif ch == curses.KEY_DOWN:
        ui.selected += 1
    elif ch == curses.KEY_PPAGE:
        ui.selected -= page
    elif ch == curses.KEY_NPAGE:
        ui.selected += page
    elif ch == curses.KEY_HOME:
        ui.selected = 0
    elif ch == curses.KEY_END:
        ui.selected = len(rows) - 1
    else:
        return True
    ui.clamp(len(rows))
    ui.selected_key = rows[ui.selected].key if rows else None
    return True


def run_interactive(cfg, environ=None):
    environ = os.environ if environ is None else environ
    try:
        locale.setlocale(locale.LC_ALL, "")  # so curses draws UTF-8 sparklines
    except locale.Error:
        pass
    unicode = _unicode_ok(locale.getpreferredencoding(False))
    state = TopState(endpoint(cfg), cfg.window)
    snap = SnapshotThread(state, cfg.host, cfg.port, cfg.window, cfg.interval)
    snap.start()
    ui = UI(cfg.table)
    try:
        with Screen(colors_wanted(cfg, environ, True)) as scr:
            seen, last_draw = -1, 0.0
            dirty = True
            while True:
                model = state.model
                now = time.time()
                if dirty or snap.seq != seen or now - last_draw >= 1.0:
                    seen = snap.seq
                    follow_selection(ui, model)
                    w, h = scr.size()
                    scr.draw(render(model, ui, width=w, height=h, now=now, unicode=unicode))
                    last_draw, dirty = now, False
                ch = scr.stdscr.getch()
                if ch == -1:
                    continue
                if ch == curses.KEY_RESIZE:
                    curses.update_lines_cols()
                    dirty = True
                    continue
                w, h = scr.size()
                if not handle_key(ch, ui, model, page=max(1, h - 12)):
                    break
                dirty = True
    except KeyboardInterrupt:
        return 130
    except Terminated as t:
        return 128 + t.args[0]
    finally:
        snap.stop()
    return 0


def main(argv=None) -> int:
    cfg = parse(sys.argv[1:] if argv is None else argv)
    if cfg.once:
        return run_once(cfg)
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        sys.stderr.write("graphsignal-top: not a terminal; use --once to print a single frame "
                         "(e.g. graphsignal-top --once > frame.txt)\n")
        return 2
    return run_interactive(cfg)


if __name__ == "__main__":
    sys.exit(main())
