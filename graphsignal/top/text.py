"""Numbers and styled text as graphsignal-top prints them: durations,
bytes, counts, percentages and ages in their units, sparklines, and lines
of (text, style) segments clipped to the terminal's width; to_text() for
--once (plain, or with ANSI colors).

It guards the frame's layout against its data: a missing value shows as
"-", a value of any size fits its unit (ns to minutes, B to TiB, k, M, G),
a name longer than its column is cut with an ellipsis, and no line is
wider than the terminal (fit()), so nothing a workload names can push the
columns apart or wrap the screen.
"""
from typing import Iterable, List, Optional, Sequence, Tuple, Union

Segment = Tuple[str, Optional[str]]  # (text, style name or None)
Line = List[Segment]


class Glyphs:
    """The characters a frame is drawn with: Unicode, or ASCII (--ascii, a
    terminal that cannot show it)."""

    def __init__(self, unicode: bool = True) -> None:
        self.unicode = unicode
        self.spark = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588" if unicode else "_.-:=+*#"
        self.ellipsis = "\u2026" if unicode else "~"
        self.sep = "\u2502" if unicode else "|"
        self.up_down = "\u2191\u2193" if unicode else "up/down"


# -- number formatting ----------------------------------------------------------------
def fmt_ns(value: Optional[float]) -> str:
    if value is None:
        return "-"
    ns = float(value)
    a = abs(ns)
    if a >= 60e9:
        return "%.1f min" % (ns / 60e9)
    if a >= 1e9:
        return "%.2f s" % (ns / 1e9)
    if a >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    if a >= 1e3:
        return "%.1f us" % (ns / 1e3)
    return "%d ns" % ns


def fmt_s(s: Optional[float]) -> str:
    return "-" if s is None else fmt_ns(s * 1e9)


def fmt_bytes(value: Optional[float]) -> str:
    if value is None:
        return "-"
    b = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return ("%d %s" % (b, unit)) if unit == "B" else ("%.1f %s" % (b, unit))
        b /= 1024.0
    return "%.1f TiB" % b


def fmt_count(value: Optional[float]) -> str:
    if value is None:
        return "-"
    n = float(value)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div * 10:
            return "%.1f%s" % (n / div, suffix)
    return ("%d" % n) if n == int(n) else ("%.1f" % n)


def fmt_pct(p: Optional[float], digits: int = 0) -> str:
    return "-" if p is None else ("%.*f%%" % (digits, p))


def fmt_num(v: Optional[float], digits: int = 0) -> str:
    if v is None:
        return "-"
    return ("%.*f" % (digits, v)) if isinstance(v, float) else str(v)


def fmt_age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, (s % 3600) // 60)


def sparkline(values: Iterable[Optional[float]], width: int, glyphs: Glyphs, vmax: Optional[float] = None) -> str:
    """The last `width` values as bars; unmeasured samples are blank."""
    vals = list(values)[-width:] if width > 0 else []
    nums = [v for v in vals if v is not None]
    if not nums:
        return " " * len(vals)
    top = vmax if vmax else max(nums)
    top = top or 1.0
    out: List[str] = []
    for v in vals:
        if v is None:
            out.append(" ")
        else:
            i = int(round(max(0.0, min(1.0, v / top)) * (len(glyphs.spark) - 1)))
            out.append(glyphs.spark[i])
    return "".join(out)


def clip(text: str, width: int, glyphs: Glyphs) -> str:
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[:max(0, width - 1)] + glyphs.ellipsis


# -- lines of styled segments -----------------------------------------------------------------------
def line(*segs: Union[str, Segment, None]) -> Line:
    """One line of segments; a plain string is unstyled, an empty one left out."""
    return [s if isinstance(s, tuple) else (s, None) for s in segs if s]


def line_text(segments: Line) -> str:
    return "".join(t for t, _ in segments)


def fit(segments: Line, width: int, glyphs: Glyphs) -> Line:
    """Clips a line's segments to width (keeping styles)."""
    out: Line = []
    used = 0
    for text, style in segments:
        if used >= width:
            break
        room = width - used
        if len(text) > room:
            text = clip(text, room, glyphs)
        out.append((text, style))
        used += len(text)
    return out


def to_text(lines: Sequence[Line], color: bool = False) -> str:
    """Lines as one string: plain, or with ANSI SGR colors."""
    sgr = {"title": "1;7", "head": "1", "dim": "2", "ok": "32", "warn": "33", "bad": "1;31", "sel": "7",
           "bar": "36", "key": "34"}
    out: List[str] = []
    for ln in lines:
        if color:
            out.append("".join(("\x1b[%sm%s\x1b[0m" % (sgr[s], t)) if s in sgr else t for t, s in ln))
        else:
            out.append("".join(t for t, _ in ln))
    return "\n".join(s.rstrip() for s in out) + "\n"
