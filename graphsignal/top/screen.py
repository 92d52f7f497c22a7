"""graphsignal-top's screen: the one frame of --once and the interactive
curses loop. The loop only draws the latest view model (a snapshot thread
fetches /signals?window=N every second and builds it) and handles keys, so
a slow or dead endpoint never freezes the screen. graphsignal.cli.top
parses the command line and calls in here.
"""
import curses
import locale
import os
import shutil
import signal
import sys
import time

from graphsignal.textsafe import clean
from graphsignal.top.client import SnapshotThread, fetch
from graphsignal.top.render import UI, render
from graphsignal.top.text import to_text
from graphsignal.top.state import TopState
from graphsignal.top.tables import GRAPHS, KERNELS, MEMORY, SYNC

_KEY_TABLES = {ord("k"): KERNELS, ord("g"): GRAPHS, ord("m"): MEMORY, ord("s"): SYNC}


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
def run_once(cfg, out=None, environ=None, source=None):
    """One frame. source: (label, fetch) where fetch() gives (payload,
    error, note) as client.fetch does: a saved file or a URL given on the
    command line instead of the profiler at --host/--port."""
    out = out or sys.stdout
    environ = os.environ if environ is None else environ
    label, get = source or (endpoint(cfg), lambda: fetch(cfg.host, cfg.port, cfg.window))
    state = TopState(label, cfg.window)
    payload, error, note = get()
    state.update(payload, error, note)
    tty = out.isatty() if hasattr(out, "isatty") else False
    width = shutil.get_terminal_size().columns if tty else None
    lines = render(state.model, UI(cfg.table), width=width, height=None,
                   unicode=_unicode_ok(getattr(out, "encoding", None)))
    out.write(to_text(lines, colors_wanted(cfg, environ, tty)))
    out.flush()
    if payload is None:
        # the page says it too; a script that keeps only stdout, or only
        # stderr, learns why the exit status is 1
        sys.stderr.write("graphsignal-top: %s: %s\n" % (clean(label), clean(error or "no payload")))
        return 1
    return 0


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
