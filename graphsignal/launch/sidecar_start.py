"""How graphsignal-run starts its sidecar (graphsignal.sidecar.process): a
fresh interpreter in its own session, given the channel's end, the run's
config document and the run lock, and nothing else of ours.

It guards the profiler against the workload's environment and the
workload's console against the profiler: the sidecar's sys.path is
graphsignal's own (never the working directory or the workload's
PYTHONPATH first, where a stray numpy.py or graphsignal/ would win), the
user's interpreter settings that would make it print or linger on the
workload's stderr are dropped, numpy's thread pools are capped (one
spinning thread per core for a process that does no BLAS), only the
descriptors it needs are passed, and its signal mask is cleared first
thing, so SIGTERM ends it even during its start-up.

Standard library only: the supervisor imports this before the workload
starts.
"""
import os
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

import graphsignal
from graphsignal import channel

# The sidecar's own thread pools: numpy's BLAS would otherwise start one
# spinning thread per core at import, for a process that does no BLAS.
# Set in the sidecar's environment only, never the workload's.
SIDECAR_THREAD_CAPS = {name: "1" for name in (
    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS", "GOTO_NUM_THREADS")}

# Interpreter settings of the user's that would make the sidecar print
# (a faulthandler dump, warnings) or linger (inspect mode) on the
# workload's stderr; the sidecar is ours, not the user's Python program.
# PYTHONPATH too: the sidecar gets its sys.path whole (sidecar_path).
SIDECAR_DROPPED_ENV = ("PYTHONINSPECT", "PYTHONFAULTHANDLER", "PYTHONWARNINGS", "PYTHONVERBOSE", "PYTHONDEVMODE",
                       "PYTHONTRACEMALLOC", "PYTHONPROFILEIMPORTTIME", "PYTHONDEBUG", "PYTHONASYNCIODEBUG",
                       "PYTHONPATH")


def start(theirs: Any, cfg: Dict[str, Any], environ: Mapping[str, str], stderr_fd: int,
          lock_fd: Optional[int], pidfd: Optional[int]) -> "subprocess.Popen[bytes]":
    """The sidecar process, started with `theirs` (its end of the channel:
    closed here, so that if it never started the pumps' sends fail at
    once and stop), the config document `cfg`, the run lock and the
    workload's pidfd (closed here too)."""
    cfg_fd = None
    try:
        cfg_fd = channel.write_config(cfg)
        fds = [theirs.fileno(), cfg_fd] + [fd for fd in (lock_fd, pidfd) if fd is not None]
        argv = ["--channel-fd", str(theirs.fileno()), "--config-fd", str(cfg_fd)]
        if pidfd is not None:
            argv += ["--child-pidfd", str(pidfd)]
        env = {k: v for k, v in environ.items() if k not in SIDECAR_DROPPED_ENV}
        env.update(SIDECAR_THREAD_CAPS)
        # Not `-m`: that would put the working directory first on
        # sys.path, where a stray numpy.py or graphsignal/ would win.
        # Our signal mask (HANDLED blocked) is inherited through exec:
        # unblock first thing, so SIGTERM ends it even during start-up.
        code = ("import sys; sys.path[:] = %r; import signal; signal.pthread_sigmask(signal.SIG_SETMASK, []); "
                "from graphsignal.sidecar.process import main; sys.exit(main(sys.argv[1:]))"
                % sidecar_path(sys.path, environ.get("PYTHONPATH", "")))
        return subprocess.Popen([sys.executable, "-c", code] + argv, env=env, pass_fds=fds,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=None if stderr_fd == 2 else stderr_fd, close_fds=True,
                                start_new_session=True)
    finally:
        # Ours closed, the sidecar's end lives only in the sidecar: if it
        # never started, the pumps' sends fail at once and stop.
        theirs.close()
        for fd in (cfg_fd, pidfd):
            if fd is not None:
                os.close(fd)


def sidecar_path(path: Sequence[str], pythonpath: str) -> List[str]:
    """The sidecar's sys.path: graphsignal's own environment first, which
    is the directory graphsignal came from, then this interpreter's
    sys.path without PYTHONPATH's entries (its site-packages, the user
    site), and PYTHONPATH's entries last, so that a dependency found only
    there (an install with --target) is still found, but a numpy the
    workload's PYTHONPATH carries never wins over graphsignal's own. Never
    the working directory ('' or a relative entry), where a stray numpy.py
    or graphsignal/ would win."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(graphsignal.__file__)))
    extra = {os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p}
    entries = [os.path.abspath(p) for p in path if p and os.path.isabs(p)]
    out = [root] + [p for p in entries if p not in extra] + [p for p in entries if p in extra]
    return list(dict.fromkeys(out))


class NoSidecar:
    """Stands in for channel.Sender while there is no sidecar."""
    dead = True

    def data(self, stream: str, chunk: bytes) -> None:
        pass

    def closed(self, stream: str) -> None:
        pass

    def exit(self, returncode: int, ended_ns: Optional[int] = None, cpu_ns: Optional[int] = None) -> bool:
        return False

    def close(self) -> None:
        pass
