"""One option's raw text made into its value, for graphsignal.config (which
names the options and resolves them all into Settings) and the commands'
parsers: ports in their two ranges, a choice, a yes/no word, a host name
of --allow-host, and text made safe to print (a URL without its
credentials, control characters and bytes that are not UTF-8 escaped).

It guards against a bad value turning into a bad run: a flag's bad value
raises ValueError with the reason (the parser makes it a usage error), a
variable's gets one line and its default (a workload's environment is
not ours to refuse), and nothing read here is printed as it came.

Standard library only: the supervisor imports this before the workload
starts.
"""
import logging
import re
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

logger = logging.getLogger("graphsignal")

# where a value came from (Settings.origins; --print-config)
FLAG, ENVIRONMENT, DEFAULT = "flag", "environment", "default"
TRUE_WORDS = ("1", "true", "yes", "on")  # what a yes/no variable accepts as yes (any case)
FALSE_WORDS = ("0", "false", "no", "off")


# -- ports ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PortRange:
    """The ports one kind of option accepts (every port option of every
    command is checked by one of the two below)."""

    what: str
    low: int
    high: int

    def parse(self, raw: str) -> int:
        """The port in `raw`; raises ValueError with the reason."""
        text = raw.strip()
        if not (text.isascii() and text.isdigit()):
            raise ValueError("expects a port number, got %r" % raw)
        port = int(text) if len(text) <= 6 else self.high + 1  # (int() refuses thousands of digits)
        if not self.low <= port <= self.high:
            shown = text if len(text) <= 12 else text[:12] + "..."
            raise ValueError("expects %s, between %d and %d, got %s" % (self.what, self.low, self.high, shown))
        return port


BIND_PORT = PortRange("a port to bind (0 picks a free one)", 0, 65535)
CONNECT_PORT = PortRange("a port to connect to", 1, 65535)


# -- one value per option --------------------------------------------------------------
def choice(flag_value: Optional[str], environ: Mapping[str, str], env_name: str, choices: Sequence[str],
           default: str, shown: Optional[str] = None) -> Tuple[str, str]:
    """(value, origin): the flag wins; an env value outside `choices` warns
    (naming `shown`, else the choices) and falls back to the default."""
    if flag_value is not None:
        return flag_value, FLAG
    raw = environ.get(env_name)
    if raw is None or raw == "":
        return default, DEFAULT
    val = raw.strip().lower()
    if val not in choices:
        logger.warning("graphsignal: %s=%r is not one of %s; using %s", env_name, raw, shown or "|".join(choices),
                       default)
        return default, DEFAULT
    return val, ENVIRONMENT


def switch(flag_value: Optional[str], environ: Mapping[str, str], env_name: str, choices: Sequence[str],
           default: str) -> Tuple[str, str]:
    """choice() for a setting whose variable also takes the yes/no words
    (1, true, yes; 0, false, no) as on and off, as the native library reads
    them (GRAPHSIGNAL_NVTX, GRAPHSIGNAL_CUDA_TRACE)."""
    raw = environ.get(env_name)
    word = (raw or "").strip().lower()
    value = "on" if word in TRUE_WORDS else "off" if word in FALSE_WORDS else raw
    env = {env_name: value} if value is not None else {}
    return choice(flag_value, env, env_name, choices, default, "|".join(choices) + "|1|0|true|false|yes|no")


def yes(environ: Mapping[str, str], name: str) -> Tuple[bool, str]:
    """(whether the variable says yes, origin)."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return False, DEFAULT
    return raw.strip().lower() in TRUE_WORDS, ENVIRONMENT


def text(environ: Mapping[str, str], name: str, strip: bool = True) -> Tuple[Optional[str], str]:
    """(the variable's text, origin); empty is unset."""
    raw = environ.get(name)
    value = (raw or "").strip() if strip else raw
    return (value, ENVIRONMENT) if value else (None, DEFAULT)


def printable(text: str) -> str:
    """text safe to print anywhere: bytes that were not UTF-8 as \\xNN,
    control characters as \\xNN."""
    from graphsignal.textsafe import clean, utf8

    return clean(utf8(text, "backslashreplace"))


def shown_url(url: str) -> str:
    """A URL as it may be logged, stored or printed: credentials in it
    (user:password@, a query string) replaced by ***."""
    url = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1***@", url)
    return re.sub(r"[?#].*$", "?***", url, flags=re.S)


# -- names the endpoint answers besides its own (--allow-host) -------------------------
ANY_HOST = "*"  # turns the Host check off
MAX_ALLOW_HOSTS = 64
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


def allowed_host(raw: str) -> str:
    """A name of --allow-host / GRAPHSIGNAL_ALLOW_HOSTS as the endpoint's
    Host check compares it (lowercase, without a trailing dot, an IPv6
    address without brackets), or ANY_HOST; raises ValueError with the
    reason for anything else (a port, a path, a pattern, spaces)."""
    import ipaddress

    text = raw.strip().lower()
    if text == ANY_HOST:
        return text
    if "*" in text:
        raise ValueError("%r: only * alone is accepted (it turns the Host check off)" % raw)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name, colon, port = text.partition(":")
    name = name[:-1] if name.endswith(".") else name
    good = bool(name) and len(name) <= 253 and name.isascii() and all(_LABEL.match(x) for x in name.split("."))
    if good and colon and port.isascii() and port.isdigit():
        raise ValueError("%r: give the name without a port (the check compares names; any port passes)" % raw)
    if not good or colon:
        raise ValueError("%r is not a host name or an IP address" % printable(raw[:300]))
    return name


def host_list(raw: str, name: str) -> Tuple[Tuple[str, ...], str]:
    """(names, origin) of a comma list of host names (variable `name`); a
    name that is none gets one line and is left out, the others are kept."""
    names: List[str] = []
    bad: List[str] = []
    for part in raw.split(","):
        if not part.strip():
            continue
        try:
            names.append(allowed_host(part))
        except ValueError as e:
            bad.append(str(e))
    if bad:
        logger.warning("graphsignal: %s: %s; left out", name, "; ".join(bad[:3]) + (
            "; and %d more" % (len(bad) - 3) if len(bad) > 3 else ""))
    names = list(dict.fromkeys(names))
    if len(names) > MAX_ALLOW_HOSTS:
        logger.warning("graphsignal: %s names %d hosts; the first %d are used", name, len(names), MAX_ALLOW_HOSTS)
        del names[MAX_ALLOW_HOSTS:]
    return (tuple(names), ENVIRONMENT) if names else ((), DEFAULT)


# -- log levels and tables ------------------------------------------------------------
def log_level(environ: Mapping[str, str], name: str, default: str, warn: bool = True) -> Tuple[str, str]:
    """(a log level's name, origin) of variable `name`; a name that is no
    level gets one line (with warn) and the default."""
    raw = (environ.get(name) or "").strip().upper()
    if not raw:
        return default, DEFAULT
    if isinstance(logging.getLevelName(raw), int):
        return raw, ENVIRONMENT
    if warn:
        logger.warning("graphsignal: %s=%r is not a log level (debug, info, warning, error); using %s", name,
                       environ.get(name), default.lower())
    return default, DEFAULT


def level_number(name: str) -> int:
    """A level's name (Settings.log_level) as a logging level; WARNING for
    a name that is none."""
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.WARNING


def table(rows: Sequence[Tuple[str, str, str]]) -> str:
    """Rows of three columns as aligned text (the second at most 48 wide)."""
    w0 = max(len(r[0]) for r in rows)
    w1 = min(48, max(len(r[1]) for r in rows))
    return "".join("%-*s  %-*s  %s\n" % (w0, a, w1, b, c) for a, b, c in rows)
