"""graphsignal-run's configuration: the environment variables it reads and
sets, each defined once here, and its flags and environment resolved once
into a frozen Settings (py-spy's config.rs is the model: parse, resolve,
then hand the one value around).

What C writers must agree on with the sidecar (the run-id variable, the
ring-name format, the shared-memory folder) is defined in
include/graphsignal/probe.h. The sidecar reads them from the header through
the compiled helper (graphsignal.rings.layout); the supervisor, which starts
the workload before any native module loads, reads the header's text
(graphsignal.rings.header), and tests/unit/test_header_constants.py holds
the two equal.

Standard library only: the supervisor imports this before the workload
starts.
"""
import logging
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from graphsignal import otelenv
from graphsignal.rings import header

logger = logging.getLogger("graphsignal")

# -- what C writers agree on (include/graphsignal/probe.h, read from its text) -------
RUN_ID_ENV = header.string("GRAPHSIGNAL_RUN_ID_ENV")  # set for the workload only under graphsignal-run
RING_PREFIX = header.string("GRAPHSIGNAL_RING_PREFIX")  # a ring is <prefix><run id>-<pid>-<kind>
SHM_DIR = header.string("GRAPHSIGNAL_SHM_DIR")
RING_CAPACITY_ENV = header.string("GRAPHSIGNAL_RING_CAPACITY_ENV")

# -- graphsignal-run (the supervisor) -------------------------------------------------
GRAPH_TRACE_ENV = "GRAPHSIGNAL_CUDA_GRAPH_TRACE"  # --cuda-graph-trace
CUDA_TRACE_ENV = "GRAPHSIGNAL_CUDA_TRACE"  # --cuda-trace: off keeps CUPTI out of the workload
ROCM_TRACE_ENV = "GRAPHSIGNAL_ROCM_KERNEL_TRACE"  # --rocm-kernel-trace
NVTX_ENV = "GRAPHSIGNAL_NVTX"  # --nvtx: NVTX ranges as profiles (off, on, gpu); the CUPTI library reads it
SIGNALS_FILE_ENV = "GRAPHSIGNAL_SIGNALS_FILE"  # --output: the final /signals payload at exit
LINGER_ENV = "GRAPHSIGNAL_LINGER"  # seconds /signals stays up after the workload exits
SIGNALS_TOKEN_ENV = "GRAPHSIGNAL_SIGNALS_TOKEN"  # a bearer token /signals and /metrics ask for (top, diff send it)
API_KEY_ENV = "GRAPHSIGNAL_API_KEY"  # uploads (graphsignal.sidecar.upload), a last one at exit
LOG_LEVEL_ENV = "GRAPHSIGNAL_LOG_LEVEL"  # both processes' log level (default WARNING)
ALLOW_HOSTS_ENV = "GRAPHSIGNAL_ALLOW_HOSTS"  # --allow-host: more Host names the endpoint answers ("*": any)

# -- the sidecar ----------------------------------------------------------------------
API_BASE_ENV = "GRAPHSIGNAL_API_BASE"  # where uploads go (graphsignal.sidecar.api)
ALL_GPUS_ENV = "GRAPHSIGNAL_ALL_GPUS"  # telemetry for every GPU, not only the workload's
METRICS_TOP_FRAMES_ENV = "GRAPHSIGNAL_METRICS_TOP_FRAMES"  # /metrics: frames exported per profile
METRICS_ENGINE_ENV = "GRAPHSIGNAL_METRICS_ENGINE"  # /metrics: re-export the engine's own series
DISABLE_VERSION_CHECK_ENV = "GRAPHSIGNAL_DISABLE_VERSION_CHECK"
# identity and OTLP export (graphsignal.otelenv reads them, and OTEL_*)
SERVICE_ENV = otelenv.SERVICE_ENV  # the service name (wins over OTEL_SERVICE_NAME)
TAGS_ENV = otelenv.TAGS_ENV  # k=v,...: context, uploads, /metrics labels, OTLP resource
OTLP_ENV = otelenv.OTLP_ENV  # 1: OTLP/HTTP metric export (graphsignal.sidecar.otlp)
SIDECAR_PRIORITY_ENV = "GRAPHSIGNAL_SIDECAR_PRIORITY"  # the sidecar's threads below the workload's (sidecar.priority)

# -- graphsignal-server ---------------------------------------------------------------
SERVER_API_KEYS_ENV = "GRAPHSIGNAL_SERVER_API_KEYS"

GRAPH_TRACE_CHOICES = ("graph", "node")
# light: CUDA counted by the driver interposer, CUPTI never loads; GRAPHSIGNAL_CUDA_TRACE also takes 1 and 0
CUDA_TRACE_CHOICES = ("on", "off", "light")
ROCM_TRACE_CHOICES = ("none", "all")
NVTX_CHOICES = ("off", "on", "gpu")  # GRAPHSIGNAL_NVTX also takes 0 and 1
SIDECAR_PRIORITY_CHOICES = ("normal", "low", "idle")  # as the workload; nice 19; SCHED_IDLE (else nice 19)
TRUE_WORDS = ("1", "true", "yes", "on")  # what a yes/no variable accepts as yes (any case)
FALSE_WORDS = ("0", "false", "no", "off")

# -- defaults, each defined once ------------------------------------------------------
DEFAULT_LISTEN_HOST = "127.0.0.1"  # /signals is local unless --listen-host says otherwise
DEFAULT_LISTEN_PORT = 18259
DEFAULT_SERVER_PORT = 18260  # graphsignal-server
DEFAULT_API_BASE = "https://api.graphsignal.com"
DEFAULT_GRAPH_TRACE = "graph"
DEFAULT_CUDA_TRACE = "on"
DEFAULT_ROCM_TRACE = "none"
DEFAULT_NVTX = "on"  # costs nothing until the workload's first NVTX call (SKILL.md has the measured cost)
DEFAULT_SIDECAR_PRIORITY = "idle"
DEFAULT_TOP_FRAMES = 50  # /metrics: frames exported per profile
MAX_TOP_FRAMES = 250  # what /signals itself lists per profile
DEFAULT_LOG_LEVEL = "WARNING"
# The workload's own device selection, which GPU telemetry follows (unless
# GRAPHSIGNAL_ALL_GPUS): each backend reads the names it knows, in its order.
VISIBLE_DEVICES_ENVS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def ring_prefix(run_id: str, prefix: str = RING_PREFIX) -> str:
    """The start of every ring name of a run: gs-<run id>-. The sidecar
    passes the header's prefix as the compiled helper carries it
    (graphsignal.rings.layout.RING_PREFIX)."""
    return "%s%s-" % (prefix, run_id)


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
FLAG, ENVIRONMENT, DEFAULT = "flag", "environment", "default"


def _choice(flag_value: Optional[str], environ: Mapping[str, str], env_name: str, choices: Sequence[str],
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


def _switch(flag_value: Optional[str], environ: Mapping[str, str], env_name: str, choices: Sequence[str],
            default: str) -> Tuple[str, str]:
    """_choice for a setting whose variable also takes the yes/no words
    (1, true, yes; 0, false, no) as on and off, as the native library reads
    them (GRAPHSIGNAL_NVTX, GRAPHSIGNAL_CUDA_TRACE)."""
    raw = environ.get(env_name)
    word = (raw or "").strip().lower()
    value = "on" if word in TRUE_WORDS else "off" if word in FALSE_WORDS else raw
    env = {env_name: value} if value is not None else {}
    return _choice(flag_value, env, env_name, choices, default, "|".join(choices) + "|1|0|true|false|yes|no")


def _yes(environ: Mapping[str, str], name: str) -> Tuple[bool, str]:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return False, DEFAULT
    return raw.strip().lower() in TRUE_WORDS, ENVIRONMENT


def _text(environ: Mapping[str, str], name: str, strip: bool = True) -> Tuple[Optional[str], str]:
    raw = environ.get(name)
    value = (raw or "").strip() if strip else raw
    return (value, ENVIRONMENT) if value else (None, DEFAULT)


def top_frames(environ: Mapping[str, str]) -> Tuple[int, str]:
    """N of GRAPHSIGNAL_METRICS_TOP_FRAMES (1..MAX_TOP_FRAMES); a bad value
    warns once and falls back to the default."""
    raw = (environ.get(METRICS_TOP_FRAMES_ENV) or "").strip()
    if not raw:
        return DEFAULT_TOP_FRAMES, DEFAULT
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_TOP_FRAMES:
        return int(raw), ENVIRONMENT
    logger.warning("graphsignal: %s=%r is not a number of frames between 1 and %d; using %d", METRICS_TOP_FRAMES_ENV,
                   raw, MAX_TOP_FRAMES, DEFAULT_TOP_FRAMES)
    return DEFAULT_TOP_FRAMES, DEFAULT


MAX_TOKEN = 1024  # characters of GRAPHSIGNAL_SIGNALS_TOKEN (an HTTP header must carry it)


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


def token_problem(token: Optional[str]) -> Optional[str]:
    """Why GRAPHSIGNAL_SIGNALS_TOKEN cannot be used (None: it can, or it is
    not set): the endpoint and its clients (graphsignal-top, -diff) send it
    in an Authorization header, so it is printable ASCII without spaces."""
    if not token:
        return None
    if len(token) > MAX_TOKEN or not (token.isascii() and token.isprintable()) or " " in token:
        return "%s must be printable ASCII without spaces, at most %d characters" % (SIGNALS_TOKEN_ENV, MAX_TOKEN)
    return None


def linger_seconds(raw: Optional[str]) -> float:
    """GRAPHSIGNAL_LINGER's seconds; a bad value (reported once by
    envcheck.sanitize) counts as 0."""
    from graphsignal import envcheck

    return float(envcheck.value({LINGER_ENV: raw}, LINGER_ENV) or 0.0) if raw else 0.0


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


def allow_hosts(environ: Mapping[str, str]) -> Tuple[Tuple[str, ...], str]:
    """(names, origin) of GRAPHSIGNAL_ALLOW_HOSTS (a comma list); a name
    that is none gets one line and is left out, the others are kept."""
    raw = environ.get(ALLOW_HOSTS_ENV) or ""
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
        logger.warning("graphsignal: %s: %s; left out", ALLOW_HOSTS_ENV, "; ".join(bad[:3]) + (
            "; and %d more" % (len(bad) - 3) if len(bad) > 3 else ""))
    names = list(dict.fromkeys(names))
    if len(names) > MAX_ALLOW_HOSTS:
        logger.warning("graphsignal: %s names %d hosts; the first %d are used", ALLOW_HOSTS_ENV, len(names),
                       MAX_ALLOW_HOSTS)
        del names[MAX_ALLOW_HOSTS:]
    return (tuple(names), ENVIRONMENT) if names else ((), DEFAULT)


@dataclass(frozen=True)
class Flags:
    """graphsignal-run's options as given on its command line (None: not
    given); graphsignal.cli.run.RunConfig adds its switches."""

    command: Tuple[str, ...] = ()
    metrics_port: Optional[int] = None
    listen_host: Optional[str] = None
    listen_port: Optional[int] = None
    cuda_graph_trace: Optional[str] = None
    rocm_kernel_trace: Optional[str] = None
    output: Optional[str] = None  # the final payload's file
    allow_hosts: Tuple[str, ...] = ()  # --allow-host NAME, each checked by allowed_host()
    nvtx: Optional[str] = None
    cuda_trace: Optional[str] = None


# Where each setting can come from: (flag, environment variable); None: not that way.
SOURCES: Dict[str, Tuple[Optional[str], Optional[str]]] = {
    "command": (None, None),
    "metrics_port": ("--metrics-port", None),
    "listen_host": ("--listen-host", None),
    "listen_port": ("--listen-port", None),
    "allow_hosts": ("--allow-host", ALLOW_HOSTS_ENV),
    "cuda_graph_trace": ("--cuda-graph-trace", GRAPH_TRACE_ENV),
    "cuda_trace": ("--cuda-trace", CUDA_TRACE_ENV),
    "rocm_kernel_trace": ("--rocm-kernel-trace", ROCM_TRACE_ENV),
    "nvtx": ("--nvtx", NVTX_ENV),
    "signals_file": ("--output", SIGNALS_FILE_ENV),
    "linger": (None, LINGER_ENV),
    "signals_token": (None, SIGNALS_TOKEN_ENV),
    "api_key": (None, API_KEY_ENV),
    "api_base": (None, API_BASE_ENV),
    "version_check": (None, DISABLE_VERSION_CHECK_ENV),
    "all_gpus": (None, ALL_GPUS_ENV),
    "visible_devices": (None, ",".join(VISIBLE_DEVICES_ENVS)),
    "metrics_top_frames": (None, METRICS_TOP_FRAMES_ENV),
    "metrics_engine": (None, METRICS_ENGINE_ENV),
    "log_level": (None, LOG_LEVEL_ENV),
    "service": (None, SERVICE_ENV),
    "tags": (None, TAGS_ENV),
    "otlp": (None, OTLP_ENV),
    "otlp_endpoint": (None, otelenv.OTEL_METRICS_ENDPOINT),
    "otlp_headers": (None, otelenv.OTEL_METRICS_HEADERS),
    "otlp_interval": (None, otelenv.OTEL_INTERVAL),
    "otlp_gzip": (None, otelenv.OTEL_COMPRESSION),
    "otlp_resource": (None, otelenv.OTEL_RESOURCE_ATTRIBUTES),
    "sidecar_priority": (None, SIDECAR_PRIORITY_ENV),
}
SECRET = ("signals_token", "api_key")  # --print-config says whether they are set, never what they are


@dataclass(frozen=True)
class Settings:
    """A run's configuration, every option of both processes, resolved once
    from graphsignal-run's flags (graphsignal.cli.run.RunConfig) and its
    environment (resolve()). The supervisor sends it to the sidecar
    (to_dict() through the channel, from_dict() there), which hands values
    on: no part of the sidecar reads the environment for an option.

    command: the workload's argv as given; metrics_port: the engine's
    metrics port (None: derived from the engine's own flags);
    cuda_graph_trace: "graph" | "node"; cuda_trace: "on" | "off" (off: no
    CUPTI in the workload, so no CUDA activity data; the payload's context
    says "cuda.trace": "off"); rocm_kernel_trace: "none" | "all";
    signals_file: where the final payload goes (None: nowhere); linger:
    seconds /signals stays up after the exit (0: none); signals_token: the
    bearer token /signals and /metrics ask for (None: none); api_key: the
    upload key, stripped (None: no uploads); api_base: the API's base URL
    as given (None: DEFAULT_API_BASE; the sidecar checks it); all_gpus:
    telemetry for every GPU; visible_devices: the workload's
    VISIBLE_DEVICES_ENVS that are set, as (name, value);
    metrics_top_frames: frames /metrics exports per profile;
    metrics_engine: /metrics re-exports the engine's own series; nvtx:
    "off" | "on" (NVTX ranges as profiles) | "gpu" (and their GPU time);
    log_level: both processes' log level name. service: the service name
    (None: not set); tags: GRAPHSIGNAL_TAGS, validated (identity_labels()
    gives both as labels); otlp: GRAPHSIGNAL_OTLP; otlp_endpoint: the URL
    metrics are posted to (None: OTLP is off, or its URL is unusable);
    otlp_headers: (name, value) sent with each export (secret values);
    otlp_interval: seconds between exports; otlp_gzip: gzip the body;
    otlp_resource: OTEL_RESOURCE_ATTRIBUTES as (key, value)
    (graphsignal.otelenv says how each is read); allow_hosts: names the
    endpoint's Host check answers besides this machine's (ANY_HOST: the
    check is off); sidecar_priority: "normal" | "low" | "idle", how the
    sidecar's threads are scheduled next to the workload's. origins: (setting, where
    its value came from), for --print-config."""

    command: Tuple[str, ...] = ()
    metrics_port: Optional[int] = None
    listen_host: str = DEFAULT_LISTEN_HOST
    listen_port: int = DEFAULT_LISTEN_PORT
    cuda_graph_trace: str = DEFAULT_GRAPH_TRACE
    cuda_trace: str = DEFAULT_CUDA_TRACE
    rocm_kernel_trace: str = DEFAULT_ROCM_TRACE
    signals_file: Optional[str] = None
    linger: float = 0.0
    signals_token: Optional[str] = None
    api_key: Optional[str] = None
    api_base: Optional[str] = None
    version_check: bool = True
    all_gpus: bool = False
    visible_devices: Tuple[Tuple[str, str], ...] = ()
    metrics_top_frames: int = DEFAULT_TOP_FRAMES
    metrics_engine: bool = False
    log_level: str = DEFAULT_LOG_LEVEL
    service: Optional[str] = None
    tags: Dict[str, str] = field(default_factory=dict)
    otlp: bool = False
    otlp_endpoint: Optional[str] = None
    otlp_headers: Tuple[Tuple[str, str], ...] = ()
    otlp_interval: float = otelenv.DEFAULT_INTERVAL
    otlp_gzip: bool = False
    otlp_resource: Tuple[Tuple[str, str], ...] = ()
    allow_hosts: Tuple[str, ...] = ()
    nvtx: str = DEFAULT_NVTX
    sidecar_priority: str = DEFAULT_SIDECAR_PRIORITY
    origins: Tuple[Tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def uploads(self) -> bool:
        """GRAPHSIGNAL_API_KEY is set."""
        return bool(self.api_key)

    @property
    def wants_final(self) -> bool:
        """The sidecar has work after the workload exits: the final payload
        to write, to keep serving, to upload, or to export over OTLP (a run
        shorter than the export interval has only that export)."""
        return bool(self.signals_file or self.linger or self.uploads or (self.otlp and self.otlp_endpoint))

    def origin(self, name: str) -> str:
        """Where a setting's value came from: "flag --x", "environment
        NAME" or "default"."""
        how = dict(self.origins).get(name, DEFAULT)
        flag, env = SOURCES.get(name, (None, None))
        if name == "command":
            return "command line"
        if name == "visible_devices" and how == ENVIRONMENT:
            return "environment " + ",".join(n for n, _ in self.visible_devices)
        if how.startswith(ENVIRONMENT + " "):
            return how  # one of several variables: its name
        if how == FLAG and flag:
            return "flag " + flag
        if how == ENVIRONMENT and env:
            return "environment " + env
        return DEFAULT

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON types, for the channel (from_dict() reads it back)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["command"] = list(self.command)
        d["visible_devices"] = [list(p) for p in self.visible_devices]
        d["tags"] = dict(self.tags)
        d["otlp_headers"] = [list(p) for p in self.otlp_headers]
        d["otlp_resource"] = [list(p) for p in self.otlp_resource]
        d["allow_hosts"] = list(self.allow_hosts)
        d["origins"] = [list(p) for p in self.origins]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Settings":
        """The Settings to_dict() wrote; raises ValueError for anything
        else (a missing or ill-typed setting)."""
        kw: Dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                raise ValueError("settings: %s is missing" % f.name)
            kw[f.name] = _typed(f.name, d[f.name])
        return cls(**kw)

    def describe(self, refused: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str, str]]:
        """(setting, value as shown, where it came from) for every setting;
        secrets show only whether they are set, a URL no credentials, and
        every value is printable (control characters and bytes that are not
        UTF-8 escaped)."""
        rows = []
        for f in fields(self):
            if f.name == "origins":
                continue
            v = getattr(self, f.name)
            if f.name in SECRET:
                shown = "(set, not shown)" if v else "(not set)"
                why = token_problem(v) if f.name == "signals_token" else None
                if why:
                    shown = "(set, refused: %s)" % why
            elif f.name in ("api_base", "otlp_endpoint") and v:
                shown = shown_url(v)
            elif f.name == "otlp_headers":
                shown = "%s (values not shown)" % ", ".join(n for n, _ in v) if v else "(none)"
            elif f.name in ("tags", "otlp_resource"):
                pairs = v.items() if isinstance(v, dict) else v
                shown = ",".join("%s=%s" % p for p in pairs) or "(none)"
            elif f.name == "command":
                shown = " ".join(v) if v else "(none)"
            elif f.name == "visible_devices":
                shown = " ".join("%s=%s" % p for p in v) if v else "(not set: every GPU)"
            elif f.name == "allow_hosts":
                shown = ",".join(v) if v else "(none: this machine's names only)"
            elif v is None:
                shown = {"metrics_port": "(from the engine's own flags)", "signals_file": "(none)",
                         "api_base": DEFAULT_API_BASE,
                         "otlp_endpoint": "(not exporting)"}.get(f.name, "(none)")
            else:
                shown = str(v)
            if refused and f.name in refused:
                shown = "%s (refused: %s; not used)" % (shown, refused[f.name])
            rows.append((f.name, printable(shown), self.origin(f.name)))
        return rows


_KINDS: Dict[str, Tuple[type, ...]] = {
    "command": (list,), "metrics_port": (int, type(None)), "listen_host": (str,), "listen_port": (int,),
    "cuda_graph_trace": (str,), "cuda_trace": (str,), "rocm_kernel_trace": (str,), "signals_file": (str, type(None)),
    "linger": (float, int), "signals_token": (str, type(None)), "api_key": (str, type(None)),
    "api_base": (str, type(None)), "version_check": (bool,), "all_gpus": (bool,), "visible_devices": (list,),
    "metrics_top_frames": (int,), "metrics_engine": (bool,), "log_level": (str,), "nvtx": (str,),
    "sidecar_priority": (str,),
    "allow_hosts": (list,), "origins": (list,),
    "service": (str, type(None)), "tags": (dict,), "otlp": (bool,), "otlp_endpoint": (str, type(None)),
    "otlp_headers": (list,), "otlp_interval": (float, int), "otlp_gzip": (bool,), "otlp_resource": (list,),
}


def _pairs(name: str, v: Any) -> Tuple[Tuple[str, str], ...]:
    if not all(isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in v):
        raise ValueError("settings: %s holds something other than pairs of strings" % name)
    return tuple((p[0], p[1]) for p in v)


def _typed(name: str, given: Any) -> Any:
    kinds = _KINDS[name]
    if not isinstance(given, kinds) or (isinstance(given, bool) and bool not in kinds):
        raise ValueError("settings: %s is a %s" % (name, type(given).__name__))
    v: Any = given
    if name == "command":
        if not all(isinstance(a, str) for a in v):
            raise ValueError("settings: command holds something other than strings")
        return tuple(v)
    if name in ("visible_devices", "origins", "otlp_headers", "otlp_resource"):
        return _pairs(name, v)
    if name == "allow_hosts":
        if not all(isinstance(a, str) for a in v):
            raise ValueError("settings: allow_hosts holds something other than strings")
        return tuple(v)
    if name == "tags":
        if not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            raise ValueError("settings: tags holds something other than strings")
        return dict(v)
    if name in ("linger", "otlp_interval"):
        return float(v)
    if name == "cuda_trace" and v not in CUDA_TRACE_CHOICES:
        raise ValueError("settings: cuda_trace is not one of %s" % "|".join(CUDA_TRACE_CHOICES))
    if name == "sidecar_priority" and v not in SIDECAR_PRIORITY_CHOICES:
        raise ValueError("settings: sidecar_priority is not one of %s" % "|".join(SIDECAR_PRIORITY_CHOICES))
    return v


def resolve(cfg: Flags, environ: Mapping[str, str]) -> Settings:
    """Settings from a RunConfig and an environment: the flag wins, then
    the environment, then the default (a bad environment value gets one
    line and its default)."""
    origins: List[Tuple[str, str]] = []

    def take(name: str, value_origin: Tuple[Any, str]) -> Any:
        value, origin = value_origin
        origins.append((name, origin))
        return value

    def flag(name: str, value: Any, default: Any) -> Any:
        return take(name, (value, FLAG) if value is not None else (default, DEFAULT))

    linger_raw = environ.get(LINGER_ENV)
    linger = linger_seconds(linger_raw)
    visible = tuple((n, environ[n]) for n in VISIBLE_DEVICES_ENVS if n in environ)
    token = environ.get(SIGNALS_TOKEN_ENV) or None
    service, service_from = otelenv.service(environ)
    tags = otelenv.tags(environ.get(TAGS_ENV))
    return Settings(
        command=take("command", (tuple(cfg.command), FLAG)),
        metrics_port=flag("metrics_port", cfg.metrics_port, None),
        listen_host=flag("listen_host", cfg.listen_host, DEFAULT_LISTEN_HOST),
        listen_port=flag("listen_port", cfg.listen_port, DEFAULT_LISTEN_PORT),
        cuda_graph_trace=take("cuda_graph_trace", _choice(cfg.cuda_graph_trace, environ, GRAPH_TRACE_ENV,
                                                          GRAPH_TRACE_CHOICES, DEFAULT_GRAPH_TRACE)),
        cuda_trace=take("cuda_trace", _switch(cfg.cuda_trace, environ, CUDA_TRACE_ENV, CUDA_TRACE_CHOICES,
                                              DEFAULT_CUDA_TRACE)),
        rocm_kernel_trace=take("rocm_kernel_trace", _choice(cfg.rocm_kernel_trace, environ, ROCM_TRACE_ENV,
                                                            ROCM_TRACE_CHOICES, DEFAULT_ROCM_TRACE)),
        signals_file=take("signals_file", (cfg.output, FLAG) if cfg.output else _text(environ, SIGNALS_FILE_ENV,
                                                                                       strip=False)),
        linger=take("linger", (linger, ENVIRONMENT if linger else DEFAULT)),
        signals_token=take("signals_token", (token, ENVIRONMENT if token else DEFAULT)),
        api_key=take("api_key", _text(environ, API_KEY_ENV)),
        api_base=take("api_base", _text(environ, API_BASE_ENV)),
        version_check=not take("version_check", _yes(environ, DISABLE_VERSION_CHECK_ENV)),
        all_gpus=take("all_gpus", _yes(environ, ALL_GPUS_ENV)),
        visible_devices=take("visible_devices", (visible, ENVIRONMENT if visible else DEFAULT)),
        metrics_top_frames=take("metrics_top_frames", top_frames(environ)),
        metrics_engine=take("metrics_engine", _yes(environ, METRICS_ENGINE_ENV)),
        log_level=take("log_level", _log_level(environ)),
        service=take("service", (service, "%s %s" % (ENVIRONMENT, service_from)) if service else (None, DEFAULT)),
        tags=take("tags", (tags, ENVIRONMENT if tags else DEFAULT)),
        **_otlp(environ, take),
        allow_hosts=take("allow_hosts", (tuple(cfg.allow_hosts), FLAG) if cfg.allow_hosts else allow_hosts(environ)),
        nvtx=take("nvtx", _switch(cfg.nvtx, environ, NVTX_ENV, NVTX_CHOICES, DEFAULT_NVTX)),
        sidecar_priority=take("sidecar_priority", _choice(None, environ, SIDECAR_PRIORITY_ENV,
                                                          SIDECAR_PRIORITY_CHOICES, DEFAULT_SIDECAR_PRIORITY)),
        origins=tuple(origins),
    )


def _otlp(environ: Mapping[str, str], take: Callable[[str, Tuple[Any, str]], Any]) -> Dict[str, Any]:
    """The otlp_* settings: read (and their bad values said) only with
    GRAPHSIGNAL_OTLP=1, since a workload sets OTEL_* for itself."""
    on, how = _yes(environ, OTLP_ENV)
    out: Dict[str, Any] = {"otlp": take("otlp", (on, how))}
    if not on:
        return out
    otelenv.otlp_notes(environ)
    url, url_from = otelenv.otlp_endpoint(environ)
    headers, headers_from = otelenv.otlp_headers(environ)
    interval, interval_set = otelenv.otlp_interval(environ)
    gzip, gzip_set = otelenv.otlp_gzip(environ)
    resource = otelenv.resource_attributes(environ.get(otelenv.OTEL_RESOURCE_ATTRIBUTES) or "")

    def env(value: Any, source: Optional[str]) -> Tuple[Any, str]:
        return (value, "%s %s" % (ENVIRONMENT, source)) if source else (value, DEFAULT)

    out["otlp_endpoint"] = take("otlp_endpoint", env(url, None if url_from == DEFAULT else url_from))
    out["otlp_headers"] = take("otlp_headers", env(headers, headers_from))
    out["otlp_interval"] = take("otlp_interval", (interval, ENVIRONMENT if interval_set else DEFAULT))
    out["otlp_gzip"] = take("otlp_gzip", env(gzip, (otelenv.OTEL_METRICS_COMPRESSION
                                                    if environ.get(otelenv.OTEL_METRICS_COMPRESSION)
                                                    else otelenv.OTEL_COMPRESSION) if gzip_set else None))
    out["otlp_resource"] = take("otlp_resource", (tuple(resource.items()), ENVIRONMENT if resource else DEFAULT))
    return out


def identity_labels(settings: Settings) -> Dict[str, str]:
    """The run's identity as labels: {"service": the service name} (when
    set) and every GRAPHSIGNAL_TAGS tag, key as given (validated by
    graphsignal.otelenv.tags: [A-Za-z_][A-Za-z0-9_.]*, not `__`, never
    `service`, and no two keys that differ only in `.` against `_`, so
    their Prometheus label names, `.` as `_`, are distinct too), values
    printable. /metrics adds them to every series; OTLP sends them as
    resource attributes (service as service.name)."""
    out = {"service": settings.service} if settings.service else {}
    out.update(settings.tags)
    return out


def identity_context(settings: Settings) -> Dict[str, Any]:
    """What the identity adds to the payload's `context` (and so to every
    upload): "service.name" (when set) and "tags" (an object, when any):
    beside "instance.id" and "host.name", never in their place; and
    "cuda.trace": "off" when CUDA tracing is off (--cuda-trace off),
    "light" when the driver interposer counts it (--cuda-trace light)."""
    out: Dict[str, Any] = {}
    if settings.cuda_trace in ("off", "light"):
        # off: no cuda_* series because none were collected, not because no work ran;
        # light: counts exact, graph time estimated, no kernel time
        out["cuda.trace"] = settings.cuda_trace
    if settings.service:
        out["service.name"] = settings.service
    if settings.tags:
        out["tags"] = dict(settings.tags)
    return out


def from_environ(environ: Mapping[str, str], command: Sequence[str] = ()) -> Settings:
    """Settings with no flags given (tests, benchmarks, tools)."""
    return resolve(Flags(command=tuple(command)), environ)


def _log_level(environ: Mapping[str, str], warn: bool = True) -> Tuple[str, str]:
    raw = (environ.get(LOG_LEVEL_ENV) or "").strip().upper()
    if not raw:
        return DEFAULT_LOG_LEVEL, DEFAULT
    if isinstance(logging.getLevelName(raw), int):
        return raw, ENVIRONMENT
    if warn:
        logger.warning("graphsignal: %s=%r is not a log level (debug, info, warning, error); using %s", LOG_LEVEL_ENV,
                       environ.get(LOG_LEVEL_ENV), DEFAULT_LOG_LEVEL.lower())
    return DEFAULT_LOG_LEVEL, DEFAULT


def log_level_of(environ: Mapping[str, str]) -> int:
    """GRAPHSIGNAL_LOG_LEVEL as a logging level (WARNING when unset or not
    a level's name), for the moment before Settings exist."""
    return level_number(_log_level(environ, warn=False)[0])


def level_number(name: str) -> int:
    """A level's name (Settings.log_level) as a logging level; WARNING for
    a name that is none."""
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.WARNING


def print_config(s: Settings, environ: Mapping[str, str], refused: Optional[Mapping[str, str]] = None) -> str:
    """--print-config's text: every setting, its value and where it came
    from (refused: setting -> why a run will not use its value), then the
    numeric variables the workload's writers read (checked as
    graphsignal-run checks them: a bad value is dropped)."""
    from graphsignal import envcheck

    rows = [("setting", "value", "from")] + s.describe(refused)
    for name, (_, _, _, unit, default) in envcheck.NUMERIC.items():
        if name == LINGER_ENV:
            continue  # the linger setting above
        v = envcheck.value(environ, name)
        if v is None:
            rows.append((name, "%s (%s)" % (default, unit), DEFAULT))
        else:
            rows.append((name, "%s (%s)" % (v, unit), "environment " + name))
    return _table(rows)


def _table(rows: Sequence[Tuple[str, str, str]]) -> str:
    w0 = max(len(r[0]) for r in rows)
    w1 = min(48, max(len(r[1]) for r in rows))
    return "".join("%-*s  %-*s  %s\n" % (w0, a, w1, b, c) for a, b, c in rows)


def rocm_tracing_library(lib_dir: str) -> Optional[str]:
    """The ROCm kernel-tracing library of this build in lib_dir, or None
    (this build has none: ROCm GPUs get AMD SMI telemetry and probe_rocm.h
    probes)."""
    try:
        names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libgraphsignal_rocm") and n.endswith(".so"))
    except OSError:
        return None
    return os.path.join(lib_dir, names[0]) if names else None
