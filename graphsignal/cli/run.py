"""graphsignal-run [OPTIONS] COMMAND [ARGS...]

Options come before the command; the first argument that is not an option
(or everything after `--`) is the command, passed through unchanged.
"""
import argparse
import sys
from dataclasses import dataclass
from typing import Optional

from graphsignal import config
from graphsignal.cli import args

PROG = "graphsignal-run"

DESCRIPTION = """Runs COMMAND under the graphsignal profiler and serves what it measures at
http://127.0.0.1:18259/signals (and Prometheus text at /metrics) while it runs.

graphsignal-run's own options come before the command; the first argument
that is not one of them (or everything after --) is the command, passed
through unchanged: graphsignal-run python -V runs python -V."""

UsageError = args.UsageError


@dataclass(frozen=True)
class RunConfig(config.Flags):
    """The command line: the options (config.Flags, resolved into
    config.Settings with the environment) and the switches."""

    show_help: bool = False
    show_version: bool = False
    check: bool = False
    print_config: bool = False
    explain: Optional[str] = None  # --explain [TOPIC|METRIC]: "" lists the topics


def _allow_host(text):
    try:
        return config.allowed_host(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def parser():
    p = args.Parser(PROG, unknown_hint="options go before the command; see --help",
                    usage="%(prog)s [OPTIONS] COMMAND [ARGS...]", description=DESCRIPTION)
    p.add_argument("--print-config", action="store_true",
                   help="print every setting as this command line and environment resolve it, and where each "
                        "came from (flag, environment, default), then exit")
    p.add_argument("--check", action="store_true",
                   help="check this install and host for GPU profiling: the CUPTI libraries built and their "
                        "headers, the driver's CUDA version, what a Python workload here would load; says what "
                        "is missing and how to get it (exit 1 then)")
    p.add_argument("--explain", metavar="TOPIC|METRIC", nargs="?", const="",
                   help="print the reference text of a topic (findings, payload, metrics, run, diff, overhead, ...) "
                        "or what a metric is, offline, then exit; without an argument: the list of topics")
    p.add_argument("--metrics-port", metavar="PORT", type=args.port(config.CONNECT_PORT),
                   help="port to scrape the engine's Prometheus metrics on (default: derived from the engine's "
                        "--port)")
    p.add_argument("--listen-host", metavar="HOST", type=args.non_empty,
                   help="host to bind the /signals endpoint to (default: %s)" % config.DEFAULT_LISTEN_HOST)
    p.add_argument("--listen-port", metavar="PORT", type=args.port(config.BIND_PORT),
                   help="port for the /signals endpoint (default: %d)" % config.DEFAULT_LISTEN_PORT)
    p.add_argument("--allow-host", metavar="NAME", dest="allow_hosts", action="append", type=_allow_host,
                   help="one more name the endpoint answers in the Host header, e.g. a Kubernetes Service name "
                        "that Prometheus scrapes through (repeat it for more; env %s=NAME1,NAME2; the flags "
                        "win); * turns the Host check off" % config.ALLOW_HOSTS_ENV)
    p.add_argument("--cuda-graph-trace", metavar="{graph,node}", type=args.choice(config.GRAPH_TRACE_CHOICES),
                   help="CUDA graph granularity (default: graph; env %s; the flag wins)" % config.GRAPH_TRACE_ENV)
    p.add_argument("--cuda-trace", metavar="{on,off,light}", type=args.choice(config.CUDA_TRACE_CHOICES),
                   help="CUDA activity collection in the workload: on, through CUPTI (time per kernel, graph, "
                        "copy and sync); light, without CUPTI, by interposing the CUDA driver (exact launch, "
                        "replay, sync and copy counts, copies by pinned or pageable host memory, sync host "
                        "time, graph GPU time estimated from sampled replays; no kernel time) at a fraction of "
                        "on's cost; off keeps CUDA collection out "
                        "of the workload: GPU telemetry, host, engine, probe and NVTX host-time signals stay "
                        "(default: on; env %s=on|off|light|1|0; the flag wins)" % config.CUDA_TRACE_ENV)
    p.add_argument("--rocm-kernel-trace", metavar="{none,all}", type=args.choice(config.ROCM_TRACE_CHOICES),
                   help="per-kernel tracing on ROCm (default: none; env %s; the flag wins)"
                        % config.ROCM_TRACE_ENV)
    p.add_argument("--nvtx", metavar="{on,off,gpu}", type=args.choice(config.NVTX_CHOICES),
                   help="NVTX ranges as profiles (nvtx_ranges_nanoseconds); gpu: also the GPU time of the kernels "
                        "launched inside each range, at a cost per launch (default: on; env %s=1|0|gpu; the flag "
                        "wins)" % config.NVTX_ENV)
    p.add_argument("--output", metavar="FILE", type=args.non_empty,
                   help="write the final /signals payload to FILE when the workload exits, also after "
                        "SIGINT/SIGTERM; its folder must exist and be writable, or nothing runs (exit 2) "
                        "(env %s; the flag wins)" % config.SIGNALS_FILE_ENV)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS...]", help=argparse.SUPPRESS)
    return p


def parse_args(argv):
    """Parses graphsignal-run's own options; raises UsageError."""
    ns = parser().parse(list(argv))
    command = list(ns.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command and not (ns.show_help or ns.show_version or ns.check or ns.print_config or
                            ns.explain is not None):
        raise UsageError("no command given (usage: graphsignal-run [OPTIONS] COMMAND [ARGS...])")
    return RunConfig(command=tuple(command), metrics_port=ns.metrics_port, listen_host=ns.listen_host,
                     listen_port=ns.listen_port, cuda_graph_trace=ns.cuda_graph_trace, cuda_trace=ns.cuda_trace,
                     rocm_kernel_trace=ns.rocm_kernel_trace, output=ns.output, nvtx=ns.nvtx,
                     allow_hosts=tuple(dict.fromkeys(ns.allow_hosts or ())), show_help=ns.show_help,
                     show_version=ns.show_version, check=ns.check, print_config=ns.print_config,
                     explain=ns.explain)


def _as_a_run_sees_it(s):
    """(Settings with the command line redacted as /signals shows it, {setting:
    why a run refuses its value}) for --print-config. What config.resolve
    amended (Settings.amended) it shows itself."""
    import dataclasses

    from graphsignal import safefs
    from graphsignal.sidecar import api
    from graphsignal.sources.host import redact_command_line

    refused = {}
    if s.signals_file:
        try:
            safefs.output_folder(s.signals_file)
        except (safefs.UnsafePath, safefs.NoFolder) as e:
            refused["signals_file"] = str(e)
    if s.uploads or s.version_check:
        try:
            api.api_base(s.api_base)
        except api.BadBase:
            refused["api_base"] = "not a usable http(s) URL"
    return dataclasses.replace(s, command=tuple(redact_command_line(s.command))), refused


def main(argv=None) -> int:
    cfg, status = args.start(PROG, parse_args, lambda: parser().format_help(), argv)
    if cfg is None:
        return status
    if cfg.explain is not None:
        from graphsignal import explain

        status, text = explain.explain(cfg.explain)
        (sys.stdout if status == 0 else sys.stderr).write(text)
        return status
    if cfg.print_config:
        import os

        from graphsignal import envcheck

        envcheck.sanitize(dict(os.environ))  # a bad number gets its line here too, as a run would say it
        s, refused = _as_a_run_sees_it(config.resolve(cfg, os.environ))
        sys.stdout.write(config.print_config(s, os.environ, refused))
        return 0
    if cfg.check:
        from graphsignal.cli import doctor

        return 1 if doctor.check() else 0
    from graphsignal.launch.supervisor import run

    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
