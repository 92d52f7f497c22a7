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

One option's raw text is made into its value by graphsignal.config_values
(ports, choices, yes/no words, host names, printable text); the otlp_*
settings are read by graphsignal.otelenv. resolve() also amends what a run
cannot do as asked (Settings.amended), so --print-config prints what runs.

Standard library only: the supervisor imports this before the workload
starts.
"""
import dataclasses
import logging
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from graphsignal import otelenv
from graphsignal.config_values import ANY_HOST as ANY_HOST
from graphsignal.config_values import BIND_PORT as BIND_PORT
from graphsignal.config_values import CONNECT_PORT as CONNECT_PORT
from graphsignal.config_values import DEFAULT as DEFAULT
from graphsignal.config_values import ENVIRONMENT as ENVIRONMENT
from graphsignal.config_values import FLAG as FLAG
from graphsignal.config_values import MAX_ALLOW_HOSTS as MAX_ALLOW_HOSTS
from graphsignal.config_values import PortRange as PortRange
from graphsignal.config_values import allowed_host as allowed_host
from graphsignal.config_values import choice, host_list, log_level, switch, table, text, yes
from graphsignal.config_values import level_number as level_number
from graphsignal.config_values import printable as printable
from graphsignal.config_values import shown_url as shown_url
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
MAX_TOP_FRAMES = 250  # what /signals itself lists per profile (its windows, the diff and /metrics too)
DEFAULT_LOG_LEVEL = "WARNING"
# The workload's own device selection, which GPU telemetry follows (unless
# GRAPHSIGNAL_ALL_GPUS): each backend reads the names it knows, in its order.
VISIBLE_DEVICES_ENVS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def ring_prefix(run_id: str, prefix: str = RING_PREFIX) -> str:
    """The start of every ring name of a run: gs-<run id>-. The sidecar
    passes the header's prefix as the compiled helper carries it
    (graphsignal.rings.layout.RING_PREFIX)."""
    return "%s%s-" % (prefix, run_id)


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


def allow_hosts(environ: Mapping[str, str]) -> Tuple[Tuple[str, ...], str]:
    """(names, origin) of GRAPHSIGNAL_ALLOW_HOSTS (a comma list); a name
    that is none gets one line and is left out, the others are kept."""
    return host_list(environ.get(ALLOW_HOSTS_ENV) or "", ALLOW_HOSTS_ENV)


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
    its value came from), for --print-config; amended: (setting, the line
    that says what resolve() changed in what was asked, and why), said by
    the supervisor and shown by --print-config."""

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
    amended: Tuple[Tuple[str, str], ...] = field(default=(), compare=False)

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

    def amendment(self, name: str) -> Optional[str]:
        """The line that says how resolve() amended setting `name`, or None."""
        return dict(self.amended).get(name)

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
        d["amended"] = [list(p) for p in self.amended]
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
            if f.name in ("origins", "amended"):
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
            note = self.amendment(f.name)
            if note:
                shown = "%s (amended: %s)" % (shown, note)
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
    "allow_hosts": (list,), "origins": (list,), "amended": (list,),
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
    if name in ("visible_devices", "origins", "amended", "otlp_headers", "otlp_resource"):
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
    line and its default); then what a run cannot do as asked is amended
    (_amend), so the Settings are what runs."""
    return _amend(_resolved(cfg, environ))


def _amend(s: Settings) -> Settings:
    """The settings as a run uses them, each change with its line
    (Settings.amended): NVTX GPU time needs CUPTI's kernel records, so
    without --cuda-trace on NVTX ranges get their host time only; an output
    that could never be written safely (a device, a directory, another
    user's symlink) is dropped, said now rather than after a long run; one
    that can be is held by its absolute path (the sidecar has another
    working folder). An output whose folder is missing stays: the run
    refuses to start (graphsignal.launch.supervisor), a typo in a path that
    the user fixes before a run."""
    from graphsignal import safefs

    changed: Dict[str, Any] = {}
    notes: List[Tuple[str, str]] = []
    if s.nvtx == "gpu" and s.cuda_trace != "on":
        changed["nvtx"] = "on"
        notes.append(("nvtx", "NVTX GPU time (--nvtx gpu, GRAPHSIGNAL_NVTX=gpu) needs CUDA tracing through CUPTI "
                              "(--cuda-trace on), which is %s: NVTX ranges get their host time only" % s.cuda_trace))
    if s.signals_file:
        try:
            safefs.output_folder(s.signals_file)
        except safefs.UnsafePath as e:
            changed["signals_file"] = None
            notes.append(("signals_file", "%s: the final payload will not be written" % e))
        except safefs.NoFolder:
            pass
        else:
            changed["signals_file"] = os.path.abspath(s.signals_file)
    return dataclasses.replace(s, amended=tuple(notes), **changed)


def _resolved(cfg: Flags, environ: Mapping[str, str]) -> Settings:
    """Settings as asked for (resolve() without the amendments)."""
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
        cuda_graph_trace=take("cuda_graph_trace", choice(cfg.cuda_graph_trace, environ, GRAPH_TRACE_ENV,
                                                          GRAPH_TRACE_CHOICES, DEFAULT_GRAPH_TRACE)),
        cuda_trace=take("cuda_trace", switch(cfg.cuda_trace, environ, CUDA_TRACE_ENV, CUDA_TRACE_CHOICES,
                                              DEFAULT_CUDA_TRACE)),
        rocm_kernel_trace=take("rocm_kernel_trace", choice(cfg.rocm_kernel_trace, environ, ROCM_TRACE_ENV,
                                                            ROCM_TRACE_CHOICES, DEFAULT_ROCM_TRACE)),
        signals_file=take("signals_file", (cfg.output, FLAG) if cfg.output else text(environ, SIGNALS_FILE_ENV,
                                                                                       strip=False)),
        linger=take("linger", (linger, ENVIRONMENT if linger else DEFAULT)),
        signals_token=take("signals_token", (token, ENVIRONMENT if token else DEFAULT)),
        api_key=take("api_key", text(environ, API_KEY_ENV)),
        api_base=take("api_base", text(environ, API_BASE_ENV)),
        version_check=not take("version_check", yes(environ, DISABLE_VERSION_CHECK_ENV)),
        all_gpus=take("all_gpus", yes(environ, ALL_GPUS_ENV)),
        visible_devices=take("visible_devices", (visible, ENVIRONMENT if visible else DEFAULT)),
        metrics_top_frames=take("metrics_top_frames", top_frames(environ)),
        metrics_engine=take("metrics_engine", yes(environ, METRICS_ENGINE_ENV)),
        log_level=take("log_level", _log_level(environ)),
        service=take("service", (service, "%s %s" % (ENVIRONMENT, service_from)) if service else (None, DEFAULT)),
        tags=take("tags", (tags, ENVIRONMENT if tags else DEFAULT)),
        **otelenv.otlp_settings(environ, take),
        allow_hosts=take("allow_hosts", (tuple(cfg.allow_hosts), FLAG) if cfg.allow_hosts else allow_hosts(environ)),
        nvtx=take("nvtx", switch(cfg.nvtx, environ, NVTX_ENV, NVTX_CHOICES, DEFAULT_NVTX)),
        sidecar_priority=take("sidecar_priority", choice(None, environ, SIDECAR_PRIORITY_ENV,
                                                          SIDECAR_PRIORITY_CHOICES, DEFAULT_SIDECAR_PRIORITY)),
        origins=tuple(origins),
    )


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
    return log_level(environ, LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL, warn)


def log_level_of(environ: Mapping[str, str]) -> int:
    """GRAPHSIGNAL_LOG_LEVEL as a logging level (WARNING when unset or not
    a level's name), for the moment before Settings exist."""
    return level_number(_log_level(environ, warn=False)[0])


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
    return table(rows)
