"""Text from untrusted sources (a workload's console, an engine's
/metrics, ring names) made safe to print on a terminal and to keep in the
payload: control characters (ESC, BEL, NUL, ...) are shown as \\xNN
instead of reaching the terminal as commands."""
import logging
import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all C0/C1 controls but \t and \n
_CONTROL_NL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # the same, \t and \n included


def _esc(m: "re.Match[str]") -> str:
    return "\\x%02x" % ord(m.group(0))


def clean(text: object, multiline: bool = False) -> str:
    """text with control characters escaped; multiline keeps \\n and \\t."""
    return (_CONTROL if multiline else _CONTROL_NL).sub(_esc, text if isinstance(text, str) else str(text))


def utf8(text: str, errors: str = "replace") -> str:
    """text that UTF-8 can carry: the lone surrogates that stand for bytes
    that were not UTF-8 (a command line, a path, through surrogateescape)
    decoded with `errors` ("replace": U+FFFD; "backslashreplace": \\xNN)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", errors)
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return text.encode("utf-8", errors).decode("utf-8")


class SafeFormatter(logging.Formatter):
    """A Formatter whose lines carry no control characters (one line per
    record: a newline inside a message is shown as \\x0a)."""

    def format(self, record: logging.LogRecord) -> str:
        return clean(logging.Formatter.format(self, record))
