"""The workload's environment under graphsignal-run: the run id its
writers name their rings by, the trace settings its native writers read,
the CUDA injection (CUPTI) or the driver interposer (--cuda-trace light),
and NVTX's injection, from the run's resolved Settings.

It guards the workload against the profiler's settings: a bad number
(GRAPHSIGNAL_* read by the writers) is dropped with one line so each
writer uses its default, the endpoint's token never reaches the
workload, a setup that fails costs its collection only (each is guarded:
one line, the run goes on), and what the user set (an injection of
another tool) is left alone and said.

Standard library and the light parts of this package only: the
workload's start waits for it.
"""
import functools
from typing import Callable, Dict, List, Mapping

from graphsignal import config, envcheck
from graphsignal.config import GRAPH_TRACE_ENV, ROCM_TRACE_ENV, RUN_ID_ENV
from graphsignal.launch import injection, interposer
from graphsignal.report import Reporter


def workload_env(settings: config.Settings, environ: Mapping[str, str], run_id: str, command: List[str],
                 reporter: Reporter, note: Callable[[str], None]) -> Dict[str, str]:
    """The environment the workload starts with: `environ` with the run's
    variables set (reporter: one line and one error entry per problem;
    note: an error entry alone, for the injection's own notes)."""
    env = dict(environ)
    envcheck.sanitize(env)  # one line per bad number; the workload's writers then use their defaults
    s = settings
    env[RUN_ID_ENV] = run_id
    env.pop(config.SIGNALS_TOKEN_ENV, None)  # the endpoint's, not the workload's
    env[GRAPH_TRACE_ENV] = s.cuda_graph_trace
    env[ROCM_TRACE_ENV] = s.rocm_kernel_trace
    if s.rocm_kernel_trace != "none" and injection.rocm_tracing_library() is None:
        reporter.say("--rocm-kernel-trace %s does nothing in this build: it has no ROCm kernel-tracing "
                     "library (ROCm GPUs get AMD SMI telemetry and probe_rocm.h probes)" % s.rocm_kernel_trace)
    activity = s.cuda_trace == "on"  # CUPTI; light counts through the driver interposer instead
    if not activity:
        _cuda_trace_off_notes(s, env, reporter)
    lib = reporter.guard("CUDA injection setup", functools.partial(injection.prepare_injection, activity=activity),
                         env, command, note)
    if s.cuda_trace == "light":
        env[config.CUDA_TRACE_ENV] = "light"
        reporter.guard("CUDA interposer setup", interposer.prepare_interposer, env, note)
    nvtx = s.nvtx
    amended = s.amendment("nvtx")  # gpu without CUPTI: config.resolve made it on (host time per range)
    if amended:
        reporter.say(amended)
    env[config.NVTX_ENV] = nvtx  # the library's mode: off, on, gpu
    collected = reporter.guard("NVTX injection setup", injection.prepare_nvtx, env, lib, nvtx)
    if not lib and nvtx != "off" and not collected and s.origin("nvtx") != config.DEFAULT \
            and not env.get(injection.ENV_NVTX_INJECTION):
        # asked for by name and lost for want of a driver: say so (by default it is part of the driver line)
        reporter.say("--nvtx %s: NVTX ranges are not collected on this host: their injection is "
                     "graphsignal's CUPTI library, which needs the NVIDIA driver (libcuda.so.1) and is "
                     "not loaded without it; probes (graphsignal.probes, probe.h) work without one" % nvtx)
    return env


def _cuda_trace_off_notes(s: config.Settings, env: Mapping[str, str], reporter: Reporter) -> None:
    """One line each for what --cuda-trace off or light cannot do: an
    injection set in the environment still loads in the workload (it is
    left alone, as always), and node mode has nothing to trace."""
    mode = s.cuda_trace
    user = env.get(injection.ENV_INJECTION)
    if user:
        reporter.say("%s=%s is set in the environment and stays: with --cuda-trace %s graphsignal adds no "
                     "CUPTI, but that library still loads in the workload (and CUPTI with it, if it uses "
                     "it)" % (injection.ENV_INJECTION, user, mode))
    if s.cuda_graph_trace == "node":
        reporter.say("--cuda-graph-trace node does nothing with --cuda-trace %s: %s" % (
            mode, "no CUDA activity is collected" if mode == "off" else
            "the interposer counts graph replays, not the kernels inside them (use --cuda-trace on)"))
