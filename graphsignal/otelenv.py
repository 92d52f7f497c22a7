"""The run's identity and OTLP export, read from the environment: what
config.resolve() calls for GRAPHSIGNAL_SERVICE, GRAPHSIGNAL_TAGS,
GRAPHSIGNAL_OTLP and the standard OTEL_* variables.

Identity (used everywhere: /signals's context, uploads, /metrics labels,
OTLP resource attributes):

  GRAPHSIGNAL_SERVICE    the service name; wins over OTEL_SERVICE_NAME,
                         which wins over service.name in
                         OTEL_RESOURCE_ATTRIBUTES (OpenTelemetry's own
                         order). At most MAX_SERVICE printable characters.
  GRAPHSIGNAL_TAGS       k=v,k2=v2: at most MAX_TAGS tags; a key is at most
                         MAX_TAG_KEY characters of [A-Za-z0-9_.] starting
                         with a letter or `_` (not `__`), a value at most
                         MAX_TAG_VALUE printable characters, not empty,
                         without a comma. Two keys that differ only in `.`
                         against `_` are one Prometheus label: the second
                         is refused. `service` and `service.name` are
                         refused (GRAPHSIGNAL_SERVICE says it).

OTLP (only with GRAPHSIGNAL_OTLP=1: workloads set OTEL_* for their own
tracing, and nothing leaves the machine without our own opt-in):

  OTEL_EXPORTER_OTLP_METRICS_ENDPOINT  the full URL, as given
  OTEL_EXPORTER_OTLP_ENDPOINT          a base: /v1/metrics is appended
                                       (default http://localhost:4318)
  OTEL_EXPORTER_OTLP_METRICS_HEADERS   k=v,... (percent-decoded); when set,
  OTEL_EXPORTER_OTLP_HEADERS           it replaces the general one
  OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION  gzip | none (default none)
  OTEL_METRIC_EXPORT_INTERVAL          milliseconds (default 60000, at
                                       least 1000)
  OTEL_RESOURCE_ATTRIBUTES             k=v,... (percent-decoded)
  OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL  only http/protobuf is spoken;
                                       another value is one line
  OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE  only cumulative is
                                       sent; another value is one line

Every entry that cannot be used gets one line ("graphsignal: ...") and is
skipped; nothing here stops a run. Standard library only (the supervisor
reads it before the workload starts).
"""
import logging
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import unquote

from graphsignal.config_values import DEFAULT, ENVIRONMENT, yes

logger = logging.getLogger("graphsignal")

SERVICE_ENV = "GRAPHSIGNAL_SERVICE"
TAGS_ENV = "GRAPHSIGNAL_TAGS"
OTLP_ENV = "GRAPHSIGNAL_OTLP"
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
OTEL_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
OTEL_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
OTEL_METRICS_HEADERS = "OTEL_EXPORTER_OTLP_METRICS_HEADERS"
OTEL_COMPRESSION = "OTEL_EXPORTER_OTLP_COMPRESSION"
OTEL_METRICS_COMPRESSION = "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION"
OTEL_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_METRICS_PROTOCOL = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
OTEL_TEMPORALITY = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"
OTEL_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"

MAX_SERVICE = 256  # characters
MAX_TAGS = 20
MAX_TAG_KEY = 64  # characters
MAX_TAG_VALUE = 256  # characters
MAX_RESOURCE_ATTRIBUTES = 64
MAX_HEADERS = 32
MAX_HEADER_VALUE = 4096  # characters
DEFAULT_OTLP_BASE = "http://localhost:4318"
METRICS_PATH = "v1/metrics"
DEFAULT_INTERVAL = 60.0  # seconds (OpenTelemetry's default, 60000 ms)
MIN_INTERVAL = 1.0  # seconds: the store changes once a second
MAX_INTERVAL = 86400.0
RESERVED_TAGS = ("service", "service.name")  # GRAPHSIGNAL_SERVICE names the service

_TAG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP token


def _say(msg: str) -> None:
    logger.warning("graphsignal: %s", msg)


def _shown(text: str, limit: int = 40) -> str:
    """text for a line: printable, cut."""
    out = "".join(ch if ch.isprintable() else "\\x%02x" % (ord(ch) & 0xFF) for ch in text[:limit])
    return out + ("..." if len(text) > limit else "")


def _pairs(raw: str) -> List[Tuple[str, str, str]]:
    """(entry as given, key, value) of each non-empty comma-separated
    entry; key and value stripped ('' key: no `=`)."""
    out = []
    for entry in raw.split(","):
        if not entry.strip():
            continue
        key, eq, value = entry.partition("=")
        out.append((entry, key.strip() if eq else "", value.strip()))
    return out


def label_key(key: str) -> str:
    """The Prometheus label a tag key becomes (`.` as `_`), for the check
    that two keys do not become one label."""
    return key.replace(".", "_")


# -- identity -------------------------------------------------------------------------
def service(environ: Mapping[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(service name, the variable it came from) or (None, None):
    GRAPHSIGNAL_SERVICE, then OTEL_SERVICE_NAME, then service.name in
    OTEL_RESOURCE_ATTRIBUTES. A value that cannot be used is one line and
    the next source is tried."""
    for name in (SERVICE_ENV, OTEL_SERVICE_NAME):
        value = (environ.get(name) or "").strip()
        if not value:
            continue
        why = _service_problem(value)
        if why is None:
            return value, name
        _say("%s=%r %s; not used" % (name, _shown(value), why))
    attrs = resource_attributes(environ.get(OTEL_RESOURCE_ATTRIBUTES) or "", warn=False)
    value = attrs.get("service.name", "")
    if value and _service_problem(value) is None:
        return value, OTEL_RESOURCE_ATTRIBUTES
    return None, None


def _service_problem(value: str) -> Optional[str]:
    if len(value) > MAX_SERVICE:
        return "is longer than %d characters" % MAX_SERVICE
    if not value.isprintable():
        return "holds control characters"
    return None


def tags(raw: Optional[str]) -> Dict[str, str]:
    """GRAPHSIGNAL_TAGS as {key: value}, in the order given; each entry
    that breaks a rule of the module doc is one line and skipped."""
    out: Dict[str, str] = {}
    labels: Dict[str, str] = {}  # Prometheus label -> the key that took it
    for entry, key, value in _pairs(raw or ""):
        why = None
        if not key:
            why = "is not key=value"
        elif len(key) > MAX_TAG_KEY or not _TAG_KEY.match(key) or key.startswith("__"):
            why = ("has a key that is not 1 to %d characters of letters, digits, '_' and '.' starting with a "
                   "letter or '_' (and not '__')" % MAX_TAG_KEY)
        elif key in RESERVED_TAGS:
            why = "names the service: set %s instead" % SERVICE_ENV
        elif not value:
            why = "has an empty value"
        elif len(value) > MAX_TAG_VALUE:
            why = "has a value longer than %d characters" % MAX_TAG_VALUE
        elif not value.isprintable():
            why = "has a value with control characters"
        elif label_key(key) in labels:
            why = "is the same label as %r (a '.' is a '_' in Prometheus)" % labels[label_key(key)]
        elif len(out) >= MAX_TAGS:
            why = "is past the first %d tags" % MAX_TAGS
        if why is not None:
            _say("%s entry %r %s; skipped" % (TAGS_ENV, _shown(entry.strip()), why))
            continue
        out[key] = value
        labels[label_key(key)] = key
    return out


def resource_attributes(raw: str, warn: bool = True) -> Dict[str, str]:
    """OTEL_RESOURCE_ATTRIBUTES as {key: value} (values percent-decoded,
    as OpenTelemetry's SDKs read them); a bad entry is one line (warn) and
    skipped."""
    out: Dict[str, str] = {}
    for entry, key, value in _pairs(raw):
        value = unquote(value, errors="replace")
        why = None
        if not key:
            why = "is not key=value"
        elif len(key) > MAX_TAG_KEY * 4 or not key.isprintable():
            why = "has a key longer than %d characters or with control characters" % (MAX_TAG_KEY * 4)
        elif len(value) > MAX_TAG_VALUE * 4 or not value.isprintable():
            why = "has a value longer than %d characters or with control characters" % (MAX_TAG_VALUE * 4)
        elif len(out) >= MAX_RESOURCE_ATTRIBUTES and key not in out:
            why = "is past the first %d attributes" % MAX_RESOURCE_ATTRIBUTES
        if why is not None:
            if warn:
                _say("%s entry %r %s; skipped" % (OTEL_RESOURCE_ATTRIBUTES, _shown(entry.strip()), why))
            continue
        out[key] = value
    return out


# -- OTLP -----------------------------------------------------------------------------
def otlp_endpoint(environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """(the URL metrics are posted to, the variable it came from, or
    "default"); None when the variable's value is not an http(s) URL
    (one line: then nothing is exported)."""
    specific = (environ.get(OTEL_METRICS_ENDPOINT) or "").strip()
    if specific:
        url, source = specific, OTEL_METRICS_ENDPOINT
    else:
        base = (environ.get(OTEL_ENDPOINT) or "").strip()
        source = OTEL_ENDPOINT if base else "default"
        base = base or DEFAULT_OTLP_BASE
        url = base + ("" if base.endswith("/") else "/") + METRICS_PATH
    if not re.match(r"https?://[^/?#\s]+", url, re.I) or not url.isprintable() or " " in url:
        _say("%s is not an http(s) URL; no OTLP export" % source)
        return None, source
    return url, source


def otlp_headers(environ: Mapping[str, str]) -> Tuple[Tuple[Tuple[str, str], ...], Optional[str]]:
    """(headers, the variable they came from or None): the metrics
    variable when set, else the general one; names are HTTP tokens, values
    percent-decoded printable ASCII; a bad entry is one line (without its
    value: headers carry credentials) and skipped."""
    name = OTEL_METRICS_HEADERS if (environ.get(OTEL_METRICS_HEADERS) or "").strip() else OTEL_HEADERS
    raw = environ.get(name) or ""
    out: List[Tuple[str, str]] = []
    for entry, key, value in _pairs(raw):
        value = unquote(value, errors="replace")
        why = None
        if not key or not _HEADER_NAME.match(key):
            why = "is not name=value with an HTTP header name"
        elif not value or len(value) > MAX_HEADER_VALUE or not (value.isascii() and value.isprintable()):
            why = "has a value that is empty, longer than %d characters or not printable ASCII" % MAX_HEADER_VALUE
        elif len(out) >= MAX_HEADERS:
            why = "is past the first %d headers" % MAX_HEADERS
        if why is not None:
            _say("%s entry for %r %s; skipped" % (name, _shown(key or entry.strip().partition("=")[0], 60), why))
            continue
        out.append((key, value))
    return tuple(out), (name if raw.strip() else None)


def otlp_interval(environ: Mapping[str, str]) -> Tuple[float, bool]:
    """(seconds between exports, whether the environment set it)."""
    raw = (environ.get(OTEL_INTERVAL) or "").strip()
    if not raw:
        return DEFAULT_INTERVAL, False
    if raw.isascii() and raw.isdigit() and len(raw) <= 12 and MIN_INTERVAL <= int(raw) / 1000.0 <= MAX_INTERVAL:
        return int(raw) / 1000.0, True
    _say("%s=%r is not milliseconds between %d and %d; using %d" % (OTEL_INTERVAL, _shown(raw), MIN_INTERVAL * 1000,
                                                                    MAX_INTERVAL * 1000, DEFAULT_INTERVAL * 1000))
    return DEFAULT_INTERVAL, False


def otlp_gzip(environ: Mapping[str, str]) -> Tuple[bool, bool]:
    """(gzip the body, whether the environment said)."""
    for name in (OTEL_METRICS_COMPRESSION, OTEL_COMPRESSION):
        raw = (environ.get(name) or "").strip().lower()
        if not raw:
            continue
        if raw in ("gzip", "none"):
            return raw == "gzip", True
        _say("%s=%r is not gzip or none; sending uncompressed" % (name, _shown(raw)))
        return False, False
    return False, False


def otlp_notes(environ: Mapping[str, str]) -> None:
    """One line for each OTEL_* choice this exporter does not follow."""
    for name in (OTEL_METRICS_PROTOCOL, OTEL_PROTOCOL):
        raw = (environ.get(name) or "").strip().lower()
        if raw:
            if raw != "http/protobuf":
                _say("%s=%r: graphsignal's OTLP export speaks http/protobuf only, and uses it" % (name, _shown(raw)))
            break
    raw = (environ.get(OTEL_TEMPORALITY) or "").strip().lower()
    if raw and raw != "cumulative":
        _say("%s=%r: graphsignal's OTLP export sends cumulative temporality only" % (OTEL_TEMPORALITY, _shown(raw)))


def otlp_settings(environ: Mapping[str, str], take: Callable[[str, Tuple[Any, str]], Any]) -> Dict[str, Any]:
    """config.resolve()'s otlp_* settings, each passed through take(name,
    (value, origin)): read (and their bad values said) only with
    GRAPHSIGNAL_OTLP=1, since a workload sets OTEL_* for itself."""
    on, how = yes(environ, OTLP_ENV)
    out: Dict[str, Any] = {"otlp": take("otlp", (on, how))}
    if not on:
        return out
    otlp_notes(environ)
    url, url_from = otlp_endpoint(environ)
    headers, headers_from = otlp_headers(environ)
    interval, interval_set = otlp_interval(environ)
    gzip, gzip_set = otlp_gzip(environ)
    resource = resource_attributes(environ.get(OTEL_RESOURCE_ATTRIBUTES) or "")

    def env(value: Any, source: Optional[str]) -> Tuple[Any, str]:
        return (value, "%s %s" % (ENVIRONMENT, source)) if source else (value, DEFAULT)

    out["otlp_endpoint"] = take("otlp_endpoint", env(url, None if url_from == DEFAULT else url_from))
    out["otlp_headers"] = take("otlp_headers", env(headers, headers_from))
    out["otlp_interval"] = take("otlp_interval", (interval, ENVIRONMENT if interval_set else DEFAULT))
    out["otlp_gzip"] = take("otlp_gzip", env(gzip, (OTEL_METRICS_COMPRESSION
                                                    if environ.get(OTEL_METRICS_COMPRESSION)
                                                    else OTEL_COMPRESSION) if gzip_set else None))
    out["otlp_resource"] = take("otlp_resource", (tuple(resource.items()), ENVIRONMENT if resource else DEFAULT))
    return out
