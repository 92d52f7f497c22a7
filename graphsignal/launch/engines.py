"""Engine launchers: recognize an inference server's command line, make its
Prometheus metrics available, and say where to scrape them.

Per engine (facts in shared/reference/engines.md, section 3):

  vLLM          `vllm serve`, `python -m vllm.entrypoints.openai.api_server`
                drops --disable-log-stats (it turns off every vllm:* series);
                scrapes :PORT/metrics (default port 8000, binds all hosts)
  SGLang        `sglang serve`, `python -m sglang.launch_server`
                adds --enable-metrics (/metrics is a 404 without it);
                scrapes :PORT/metrics (default 127.0.0.1:30000)
  TensorRT-LLM  `trtllm-serve [serve] MODEL`
                no flag exists: `return_perf_metrics: true` in the YAML given
                with --config / --extra_llm_api_options mounts Prometheus; we
                say so in one line when it is missing. Scrapes
                :PORT/prometheus/metrics, never /metrics (a JSON queue that
                every read drains). Default localhost:8000.
  llama.cpp     `llama-server`
                adds --metrics (/metrics is a 501 without it);
                scrapes :PORT[/api-prefix]/metrics (default 127.0.0.1:8080,
                env LLAMA_ARG_HOST / LLAMA_ARG_PORT)

The command is found behind `python -m`, full paths and wrappers such as
`uv run`, `env A=B`, `nohup`, `numactl ...`: we scan the leading tokens for
an engine's executable (followed by its subcommand) or a Python interpreter
running an engine module. Only the engine's own arguments are rewritten, and
only as listed above; every other token passes through unchanged.
--metrics-port overrides the derived port; a command that is not an engine
is scraped only when --metrics-port is given (at 127.0.0.1:PORT/metrics).
"""
import logging
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")

VLLM = "vllm"
SGLANG = "sglang"
TRTLLM = "trtllm"
LLAMACPP = "llamacpp"

# How many leading tokens we look through for the engine behind wrappers;
# past that, a token that happens to read "vllm" is some program's argument.
SCAN_LIMIT = 24

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?[dmu]*$")
# Python options that consume the next token (python -W ignore -m ...).
_PYTHON_VALUED = {"-W", "-X", "--check-hash-based-pycs"}
_WILDCARD_HOSTS = {"", "0.0.0.0", "::", "[::]", "*"}
_TRUE = {"1", "true", "yes", "on"}


@dataclass
class Prepared:
    """What the supervisor runs, and what the scraper reads."""
    command: List[str]
    metrics_url: Optional[str] = None
    engine: Optional[str] = None  # VLLM, SGLANG, TRTLLM, LLAMACPP or None (generic)
    notes: List[str] = field(default_factory=list)  # changes made to the command, for the log


@dataclass
class _Match:
    engine: str
    start: int  # index of the first engine argument in the command


def _base(token):
    return os.path.basename(token.rstrip("/"))


def _is_python(token):
    return bool(_PYTHON.match(_base(token)))


def _module_engine(module, rest):
    """Engine run by `python -m module rest...`, or None."""
    if module in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
        return VLLM, 0
    if module in ("vllm.entrypoints.cli.main", "vllm") and rest[:1] == ["serve"]:
        return VLLM, 1
    if module in ("sglang.launch_server",):
        return SGLANG, 0
    if module in ("sglang.cli.main", "sglang") and rest[:1] == ["serve"]:
        return SGLANG, 1
    if module == "tensorrt_llm.commands.serve":
        return TRTLLM, 1 if rest[:1] == ["serve"] else 0
    return None


def _exe_engine(name, rest):
    """Engine run by an executable called `name` with arguments `rest`, or None."""
    if name == "vllm" and rest[:1] == ["serve"]:
        return VLLM, 1
    if name == "sglang" and rest[:1] == ["serve"]:
        return SGLANG, 1
    if name == "trtllm-serve":
        # `trtllm-serve MODEL` and `trtllm-serve serve MODEL`; its other
        # subcommands (disaggregated, ...) have no /prometheus/metrics of their own.
        if rest[:1] == ["serve"]:
            return TRTLLM, 1
        if rest and rest[0] in ("disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve"):
            return None
        return TRTLLM, 0
    if name == "llama-server":
        return LLAMACPP, 0
    return None


def _python_target(argv, i):
    """For the interpreter at argv[i]: ("module", name, next index) or
    ("script", path, next index) or None."""
    j = i + 1
    while j < len(argv):
        tok = argv[j]
        if tok == "-m":
            return ("module", argv[j + 1], j + 2) if j + 1 < len(argv) else None
        if tok.startswith("-m") and len(tok) > 2:
            return "module", tok[2:], j + 1
        if tok == "-c" or tok.startswith("-c") or tok == "-":
            return None  # inline code: not an engine we can recognize
        if tok in _PYTHON_VALUED:
            j += 2
            continue
        if tok.startswith("-"):
            j += 1
            continue
        return "script", tok, j + 1
    return None


def detect(argv):
    """The engine in `argv` (a list of str), or None."""
    for i, tok in enumerate(argv[:SCAN_LIMIT]):
        if _is_python(tok):
            target = _python_target(argv, i)
            if target is None:
                return None
            kind, what, nxt = target
            rest = list(argv[nxt:])
            found = _module_engine(what, rest) if kind == "module" else _exe_engine(_base(what), rest)
            # The interpreter owns everything after it: nothing further to scan.
            return _Match(found[0], nxt + found[1]) if found else None
        found = _exe_engine(_base(tok), list(argv[i + 1:]))
        if found:
            return _Match(found[0], i + 1 + found[1])
        if tok.endswith(".py") or tok.endswith(".sh"):
            return None  # a script runs from here on; its arguments are its own
    return None


# -- argument helpers -------------------------------------------------------------

def _names(opt):
    """--foo-bar and --foo_bar (vLLM and SGLang accept both spellings)."""
    body = opt[2:]
    return {opt, "--" + body.replace("-", "_"), "--" + body.replace("_", "-")}


def opt_value(args, opt):
    """The value of the last `--opt V` / `--opt=V` in args, or None
    (argparse lets the last one win)."""
    names = _names(opt)
    val = None
    i = 0
    while i < len(args):
        tok = args[i]
        if tok in names:
            if i + 1 < len(args):
                val = args[i + 1]
            i += 2
            continue
        head, eq, tail = tok.partition("=")
        if eq and head in names:
            val = tail
        i += 1
    return val


def has_flag(args, opt):
    names = _names(opt)
    return any(tok in names or tok.partition("=")[0] in names for tok in args)


def _drop_flag(args, opt):
    """args without the boolean flag `opt` (bare or --opt=VALUE)."""
    names = _names(opt)
    return [tok for tok in args if not (tok in names or tok.partition("=")[0] in names)]


def _yaml_scalar(path, key):
    """A top-level `key: value` from a YAML file, as a str (or None).

    A deliberately small reader: engines' configs are flat mappings, and the
    launcher must not fail (nor pull in a YAML library) over one of them."""
    if not path:
        return None
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    pat = re.compile(r"^%s\s*:\s*(.*?)\s*(#.*)?$" % "[-_]".join(re.escape(p) for p in re.split("[-_]", key)))
    val = None
    for line in text.splitlines():
        m = pat.match(line)
        if m:
            val = m.group(1).strip().strip("'\"")
    return val


def _port(raw):
    try:
        p = int(str(raw).strip())
    except (TypeError, ValueError):
        return None
    return p if 0 < p < 65536 else None


def scrape_host(host):
    """Where to reach a server bound to `host`: a wildcard bind is reached on
    loopback; an IPv6 literal gets brackets."""
    host = (host or "").strip()
    if host in _WILDCARD_HOSTS:
        return "127.0.0.1"
    if ":" in host and not host.startswith("["):
        return "[%s]" % host
    return host


def _url(host, port, path):
    return "http://%s:%d%s" % (scrape_host(host), port, path)


# -- per-engine rules --------------------------------------------------------------

def _prepare_vllm(args, metrics_port, report, environ):
    notes = []
    if has_flag(args, "--disable-log-stats"):
        args = _drop_flag(args, "--disable-log-stats")
        notes.append("vLLM: removed --disable-log-stats so that its vllm:* metrics are served")
    config = opt_value(args, "--config")
    if (_yaml_scalar(config, "disable-log-stats") or "").lower() in _TRUE:
        msg = ("vLLM: %s sets disable-log-stats: true, so vLLM serves no vllm:* metrics; "
               "remove it from the config to see engine metrics" % config)
        _say(msg, report)
    host = opt_value(args, "--host") or _yaml_scalar(config, "host")
    port = _port(opt_value(args, "--port") or _yaml_scalar(config, "port")) or 8000
    return args, _url(host, metrics_port or port, "/metrics"), notes


def _prepare_sglang(args, metrics_port, report, environ):
    notes = []
    config = opt_value(args, "--config")
    if not has_flag(args, "--enable-metrics"):
        args = args + ["--enable-metrics"]
        notes.append("SGLang: added --enable-metrics so that /metrics is served")
    host = opt_value(args, "--host") or _yaml_scalar(config, "host") or "127.0.0.1"
    port = _port(opt_value(args, "--port") or _yaml_scalar(config, "port")) or 30000
    return args, _url(host, metrics_port or port, "/metrics"), notes


def _prepare_trtllm(args, metrics_port, report, environ):
    configs = [c for c in (opt_value(args, "--config"), opt_value(args, "--extra_llm_api_options")) if c]
    enabled = any((_yaml_scalar(c, "return_perf_metrics") or "").lower() in _TRUE for c in configs)
    if not enabled:
        where = " or ".join(configs) if configs else "a YAML passed with --config"
        _say("trtllm-serve serves Prometheus metrics only with `return_perf_metrics: true` "
             "(and running/waiting/KV gauges with `enable_iter_perf_stats: true`) in %s; "
             "without it there are no engine metrics" % where, report)
    host = opt_value(args, "--host") or "localhost"
    port = _port(opt_value(args, "--port")) or 8000
    # /metrics is a JSON queue drained by every read: never touch it.
    return args, _url(host, metrics_port or port, "/prometheus/metrics"), []


def _prepare_llamacpp(args, metrics_port, report, environ):
    notes = []
    env_on = (environ.get("LLAMA_ARG_ENDPOINT_METRICS") or "").lower() in _TRUE
    if not has_flag(args, "--metrics") and not env_on:
        args = args + ["--metrics"]
        notes.append("llama-server: added --metrics so that /metrics is served")
    host = opt_value(args, "--host") or environ.get("LLAMA_ARG_HOST") or "127.0.0.1"
    if host.endswith(".sock") and not metrics_port:
        return args, None, notes + ["llama-server listens on a unix socket; "
                                    "pass --metrics-port to scrape a TCP port"]
    port = _port(opt_value(args, "--port") or environ.get("LLAMA_ARG_PORT")) or 8080
    prefix = (opt_value(args, "--api-prefix") or "").rstrip("/")
    if prefix and not prefix.startswith("/"):
        prefix = "/" + prefix
    return args, _url(host, metrics_port or port, prefix + "/metrics"), notes


_RULES = {VLLM: _prepare_vllm, SGLANG: _prepare_sglang, TRTLLM: _prepare_trtllm, LLAMACPP: _prepare_llamacpp}


def _say(msg, report):
    """One line for the user (stderr) and one warning entry in /signals."""
    Reporter(on_error=report).say(msg, entry=report is not None)


def prepare(command, metrics_port=None, report=None, environ=None):
    """The command to run and the metrics URL to scrape.

    command: the workload's argv (list of str), never changed in place.
    metrics_port: --metrics-port (int) or None.
    report: callable(str) that adds a warning entry for the user.
    environ: the workload's environment (default os.environ), for engines
    that read their port from it.
    """
    argv = list(command)
    environ = os.environ if environ is None else environ
    match = detect(argv)
    if match is None:
        url = _url("127.0.0.1", metrics_port, "/metrics") if metrics_port else None
        return Prepared(argv, url, None, [])
    head, args = argv[:match.start], argv[match.start:]
    args, url, notes = _RULES[match.engine](args, metrics_port, report, environ)
    for note in notes:
        logger.info("graphsignal: %s", note)
    return Prepared(head + list(args), url, match.engine, notes)
