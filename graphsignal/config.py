"""graphsignal-run's configuration: the environment variables it reads and
sets, each defined once here, and its flags and environment resolved once
into a frozen Settings (py-spy's config.rs is the model: parse, resolve,
then hand the one value around).

What C writers must agree on with the sidecar (the run-id variable, the
ring-name format, the shared-memory folder) is defined in
include/graphsignal/probe.h. The sidecar reads them from the header through
the compiled helper (graphsignal.rings.layout: SHM_DIR, RING_PREFIX,
RUN_ID_ENV, RING_CAPACITY_ENV); the supervisor, which starts the workload
before any native module loads, uses the copies below, and
tests/integration/test_config.py keeps the header, the helper and these
copies equal.

Standard library only: the supervisor imports this before the workload
starts.
"""
import logging
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, Sequence, Tuple

logger = logging.getLogger("graphsignal")

# -- what C writers agree on (include/graphsignal/probe.h) ---------------------------
RUN_ID_ENV = "GRAPHSIGNAL_RUN_ID"  # GRAPHSIGNAL_RUN_ID_ENV: set for the workload only under graphsignal-run
RING_PREFIX = "gs-"  # GRAPHSIGNAL_RING_PREFIX: a ring is <prefix><run id>-<pid>-<kind>
SHM_DIR = "/dev/shm"  # GRAPHSIGNAL_SHM_DIR
RING_CAPACITY_ENV = "GRAPHSIGNAL_RING_CAPACITY"  # GRAPHSIGNAL_RING_CAPACITY_ENV

# -- graphsignal-run (the supervisor) -------------------------------------------------
GRAPH_TRACE_ENV = "GRAPHSIGNAL_CUDA_GRAPH_TRACE"  # --cuda-graph-trace
ROCM_TRACE_ENV = "GRAPHSIGNAL_ROCM_KERNEL_TRACE"  # --rocm-kernel-trace
SIGNALS_FILE_ENV = "GRAPHSIGNAL_SIGNALS_FILE"  # --output: the final /signals payload at exit
LINGER_ENV = "GRAPHSIGNAL_LINGER"  # seconds /signals stays up after the workload exits
SIGNALS_TOKEN_ENV = "GRAPHSIGNAL_SIGNALS_TOKEN"  # a bearer token /signals and /metrics ask for (top, diff send it)
API_KEY_ENV = "GRAPHSIGNAL_API_KEY"  # uploads (graphsignal.sidecar.upload), a last one at exit
LOG_LEVEL_ENV = "GRAPHSIGNAL_LOG_LEVEL"  # both processes' log level (default WARNING)

# -- the sidecar ----------------------------------------------------------------------
API_BASE_ENV = "GRAPHSIGNAL_API_BASE"  # where uploads go (graphsignal.sidecar.api)
ALL_GPUS_ENV = "GRAPHSIGNAL_ALL_GPUS"  # telemetry for every GPU, not only the workload's
METRICS_TOP_FRAMES_ENV = "GRAPHSIGNAL_METRICS_TOP_FRAMES"  # /metrics: frames exported per profile
METRICS_ENGINE_ENV = "GRAPHSIGNAL_METRICS_ENGINE"  # /metrics: re-export the engine's own series
DISABLE_VERSION_CHECK_ENV = "GRAPHSIGNAL_DISABLE_VERSION_CHECK"

# -- graphsignal-server ---------------------------------------------------------------
SERVER_API_KEYS_ENV = "GRAPHSIGNAL_SERVER_API_KEYS"

GRAPH_TRACE_CHOICES = ("graph", "node")
ROCM_TRACE_CHOICES = ("none", "all")


def ring_prefix(run_id: str, prefix: str = RING_PREFIX) -> str:
    """The start of every ring name of a run: gs-<run id>-. The sidecar
    passes the header's prefix as the compiled helper carries it
    (graphsignal.rings.layout.RING_PREFIX)."""
    return "%s%s-" % (prefix, run_id)


def resolve_choice(flag_value: Optional[str], environ: Mapping[str, str], env_name: str, choices: Sequence[str],
                  default: str) -> str:
    """The flag wins; an env value outside `choices` warns and falls back."""
    if flag_value is not None:
        return flag_value
    raw = environ.get(env_name)
    if raw is None or raw == "":
        return default
    val = raw.strip().lower()
    if val not in choices:
        logger.warning("graphsignal: %s=%r is not one of %s; using %s", env_name, raw, "|".join(choices), default)
        return default
    return val


class Flags(Protocol):
    """What resolve() reads of graphsignal.cli.run.RunConfig."""

    @property
    def command(self) -> Sequence[str]: ...
    @property
    def metrics_port(self) -> Optional[int]: ...
    @property
    def listen_host(self) -> str: ...
    @property
    def listen_port(self) -> int: ...
    @property
    def cuda_graph_trace(self) -> Optional[str]: ...
    @property
    def rocm_kernel_trace(self) -> Optional[str]: ...
    @property
    def output(self) -> Optional[str]: ...


@dataclass(frozen=True)
class Settings:
    """A run's configuration, resolved once from graphsignal-run's flags
    (graphsignal.cli.run.RunConfig) and its environment.

    cuda_graph_trace: "graph" | "node"; rocm_kernel_trace: "none" | "all";
    signals_file: where the final payload goes (--output, else
    GRAPHSIGNAL_SIGNALS_FILE; None: nowhere); linger: seconds (0: none);
    uploads: GRAPHSIGNAL_API_KEY is set."""

    command: Tuple[str, ...]
    metrics_port: Optional[int]
    listen_host: str
    listen_port: int
    cuda_graph_trace: str
    rocm_kernel_trace: str
    signals_file: Optional[str]
    linger: float
    uploads: bool

    @property
    def wants_final(self) -> bool:
        """The sidecar has work after the workload exits: the final payload
        to write, to keep serving, or to upload."""
        return bool(self.signals_file or self.linger or self.uploads)


def linger_seconds(raw: Optional[str]) -> float:
    """GRAPHSIGNAL_LINGER's seconds; a bad value (reported once by
    envcheck.sanitize) counts as 0."""
    from graphsignal import envcheck

    return float(envcheck.value({LINGER_ENV: raw}, LINGER_ENV) or 0.0) if raw else 0.0


def resolve(cfg: "Flags", environ: Mapping[str, str]) -> Settings:
    """Settings from a RunConfig and an environment (a bad environment
    value gets one line and its default)."""
    return Settings(
        command=tuple(cfg.command),
        metrics_port=cfg.metrics_port,
        listen_host=cfg.listen_host,
        listen_port=cfg.listen_port,
        cuda_graph_trace=resolve_choice(cfg.cuda_graph_trace, environ, GRAPH_TRACE_ENV, GRAPH_TRACE_CHOICES,
                                        "graph"),
        rocm_kernel_trace=resolve_choice(cfg.rocm_kernel_trace, environ, ROCM_TRACE_ENV, ROCM_TRACE_CHOICES,
                                         "none"),
        signals_file=cfg.output or environ.get(SIGNALS_FILE_ENV) or None,
        linger=linger_seconds(environ.get(LINGER_ENV)),
        uploads=bool((environ.get(API_KEY_ENV) or "").strip()),
    )


def rocm_tracing_library(lib_dir: str) -> Optional[str]:
    """The ROCm kernel-tracing library of this build in lib_dir, or None
    (this build has none: ROCm GPUs get AMD SMI telemetry and probe_rocm.h
    probes)."""
    try:
        names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libgraphsignal_rocm") and n.endswith(".so"))
    except OSError:
        return None
    return os.path.join(lib_dir, names[0]) if names else None
