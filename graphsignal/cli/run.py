"""graphsignal-run [OPTIONS] COMMAND [ARGS...]

Options come before the command; the first argument that is not an option
(or everything after `--`) is the command, passed through unchanged.
"""
import sys
from dataclasses import dataclass

from graphsignal import __version__, config
from graphsignal.cli import args

USAGE = """usage: graphsignal-run [OPTIONS] COMMAND [ARGS...]

Runs COMMAND under the graphsignal profiler and serves what it measures at
http://127.0.0.1:18259/signals while it runs.

options (before the command):
  -h, --help                 show this help and exit
  -V, --version              print the profiler version and exit
  --print-config             print every setting as this command line and
                             environment resolve it, and where each came from
                             (flag, environment, default), then exit
  --check                    check this install and host for GPU profiling: the
                             CUPTI libraries built and their headers, the driver's
                             CUDA version, what a Python workload here would load;
                             says what is missing and how to get it (exit 1 then)
  --metrics-port PORT        port to scrape the engine's Prometheus metrics on
                             (default: derived from the engine's --port)
  --listen-host HOST         host to bind the /signals endpoint to (default: 127.0.0.1)
  --listen-port PORT         port for the /signals endpoint (default: 18259)
  --cuda-graph-trace {graph,node}
                             CUDA graph granularity (default: graph; env
                             GRAPHSIGNAL_CUDA_GRAPH_TRACE; the flag wins)
  --rocm-kernel-trace {none,all}
                             per-kernel tracing on ROCm (default: none; env
                             GRAPHSIGNAL_ROCM_KERNEL_TRACE; the flag wins)
  --nvtx {on,off,gpu}        NVTX ranges as profiles (nvtx_ranges_nanoseconds);
                             gpu: also the GPU time of the kernels launched
                             inside each range, at a cost per launch (default:
                             on; env GRAPHSIGNAL_NVTX=1|0|gpu; the flag wins)
  --output FILE              write the final /signals payload to FILE when the
                             workload exits, also after SIGINT/SIGTERM (env
                             GRAPHSIGNAL_SIGNALS_FILE; the flag wins)
"""

class UsageError(Exception):
    pass


@dataclass(frozen=True)
class RunConfig(config.Flags):
    """The command line: the options (config.Flags, resolved into
    config.Settings with the environment) and the switches."""

    show_help: bool = False
    show_version: bool = False
    check: bool = False
    print_config: bool = False


_VALUED = {
    "--metrics-port": "metrics_port",
    "--listen-host": "listen_host",
    "--listen-port": "listen_port",
    "--cuda-graph-trace": "cuda_graph_trace",
    "--rocm-kernel-trace": "rocm_kernel_trace",
    "--output": "output",
    "--nvtx": "nvtx",
}
_CHOICES = {"cuda_graph_trace": config.GRAPH_TRACE_CHOICES, "rocm_kernel_trace": config.ROCM_TRACE_CHOICES,
            "nvtx": config.NVTX_CHOICES}
_PORTS = {"metrics_port": config.CONNECT_PORT, "listen_port": config.BIND_PORT}


def _port(opt, raw, ports):
    try:
        return ports.parse(raw)
    except ValueError as e:
        raise UsageError("%s %s" % (opt, e))


def parse_args(argv):
    """Parses graphsignal-run's own options; raises UsageError."""
    values = {}
    flags = {"show_help": False, "show_version": False, "check": False, "print_config": False}
    switches = {"-h": "show_help", "--help": "show_help", "-V": "show_version", "--version": "show_version",
                "--check": "check", "--print-config": "print_config"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg in switches:
            flags[switches[arg]] = True
            i += 1
            continue
        opt, eq, val = arg.partition("=")
        if opt not in _VALUED:
            raise UsageError("unknown option %s (options go before the command; see --help)" % opt)
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError("%s needs a value" % opt)
            val = argv[i + 1]
            i += 2
        else:
            i += 1
        field = _VALUED[opt]
        if field in _PORTS:
            values[field] = _port(opt, val, _PORTS[field])
        elif field in _CHOICES:
            if val not in _CHOICES[field]:
                raise UsageError("%s must be one of %s, got %r" % (opt, "|".join(_CHOICES[field]), val))
            values[field] = val
        else:
            if not val:
                raise UsageError("%s needs a non-empty value" % opt)
            values[field] = val
    command = tuple(argv[i:])
    if not command and not any(flags.values()):
        raise UsageError("no command given (usage: graphsignal-run [OPTIONS] COMMAND [ARGS...])")
    return RunConfig(command=command, **values, **flags)


def _as_a_run_sees_it(s):
    """(Settings with the command line redacted as /signals shows it, {setting:
    why a run refuses its value}) for --print-config."""
    import dataclasses

    from graphsignal import safefs
    from graphsignal.sidecar import api
    from graphsignal.sources.host import redact_command_line

    refused = {}
    if s.signals_file:
        try:
            safefs.output_target(s.signals_file)
        except safefs.UnsafePath as e:
            refused["signals_file"] = str(e)
    if s.uploads or s.version_check:
        try:
            api.api_base(s.api_base)
        except api.BadBase:
            refused["api_base"] = "not a usable http(s) URL"
    return dataclasses.replace(s, command=tuple(redact_command_line(s.command))), refused


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_args(argv)
    except UsageError as e:
        return args.usage_error("graphsignal-run", e)
    if args.help_or_version(cfg, USAGE, "graphsignal %s" % __version__):
        return 0
    if cfg.print_config:
        import os

        from graphsignal import envcheck

        envcheck.sanitize(dict(os.environ))  # a bad number gets its line here too, as a run would say it
        s, refused = _as_a_run_sees_it(config.resolve(cfg, os.environ))
        sys.stdout.write(config.print_config(s, os.environ, refused))
        return 0
    if cfg.check:
        from graphsignal import doctor

        return 1 if doctor.check() else 0
    from graphsignal.launch.supervisor import run

    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
