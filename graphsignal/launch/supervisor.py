"""The supervisor: starts the workload as a child, pumps its console
through unchanged, forwards signals, runs the sidecar (poller, sources,
server) beside it, and exits the way the child did.

Never harm the workload: every sidecar part is started inside a guard
that logs one line on failure; only the console pumps are essential (a
child writing into a pipe nobody reads would block), and they never stop
pumping because of the error capture.
"""
import errno
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time

from graphsignal import __version__, envcheck, native
from graphsignal.launch import engines
from graphsignal.payload import build_signals
from graphsignal.poller import Poller
from graphsignal.server import ServerThread, make_app
from graphsignal.sources import SourceThread, console, registry
from graphsignal.store import MetricStore
from graphsignal.textsafe import SafeFormatter
from graphsignal.windows import window_stats

logger = logging.getLogger("graphsignal")

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
SI_KERNEL = 0x80  # si_code of signals the kernel sends (e.g. the terminal's ^C)

ENV_RUN_ID = "GRAPHSIGNAL_RUN_ID"
ENV_GRAPH_TRACE = "GRAPHSIGNAL_CUDA_GRAPH_TRACE"
ENV_ROCM_TRACE = "GRAPHSIGNAL_ROCM_KERNEL_TRACE"
ENV_SIGNALS_FILE = "GRAPHSIGNAL_SIGNALS_FILE"  # write the final /signals payload here at exit
ENV_LINGER = "GRAPHSIGNAL_LINGER"  # keep /signals up this many seconds after the workload exits
ENV_LOG_LEVEL = "GRAPHSIGNAL_LOG_LEVEL"
EOF_WAIT = 2.0  # seconds to wait for the console pipes to close after the child exits


def setup_logging(environ):
    level = getattr(logging, environ.get(ENV_LOG_LEVEL, "WARNING").upper(), logging.WARNING)
    logger.setLevel(level)
    if not logger.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(SafeFormatter("%(message)s"))  # messages quote engines and workloads: no control bytes
        logger.addHandler(h)
    logger.propagate = False
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


def resolve_choice(flag_value, environ, env_name, choices, default):
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


class Pump(threading.Thread):
    """Copies a child's pipe to our fd byte for byte; hands each chunk to
    on_data (error capture) after it has been written through."""

    def __init__(self, name, fd_in, fd_out, on_data=None, on_close=None):
        threading.Thread.__init__(self, name="graphsignal-pump-" + name, daemon=True)
        self.stream = name
        self.fd_in, self.fd_out = fd_in, fd_out
        self.on_data, self.on_close = on_data, on_close
        self.out_broken = False

    def run(self):
        try:
            while True:
                try:
                    data = os.read(self.fd_in, 1 << 16)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                if not self.out_broken:
                    self._write(data)
                if self.out_broken:
                    # Our reader is gone: let the child see the closed pipe,
                    # as it would in a bare run.
                    break
                if self.on_data is not None:
                    try:
                        self.on_data(self.stream, data)
                    except Exception as e:
                        self.on_data = None
                        logger.warning("graphsignal: error capture on %s stopped: %s: %s",
                                       self.stream, type(e).__name__, e)
        finally:
            try:
                os.close(self.fd_in)
            except OSError:
                pass
            if self.on_close is not None:
                try:
                    self.on_close(self.stream)
                except Exception:
                    logger.warning("graphsignal: error capture on %s failed at close", self.stream)

    def _write(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd_out, view)
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.EBADF):
                    self.out_broken = True
                    return
                raise
            view = view[n:]


class Supervisor:
    def __init__(self, cfg, environ=None, stdout_fd=1, stderr_fd=2):
        self.cfg = cfg
        self.environ = dict(os.environ if environ is None else environ)
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.run_id = os.urandom(6).hex()
        self.store = MetricStore()
        self.store.context.update({"instance.id": self.run_id, "host.name": os.uname().nodename})
        self.child = None
        self.poller = None
        self.server = None
        self.sources = []
        self.pumps = []
        self.console = None
        self.metrics_url = None
        self.engine = None  # engines.Prepared when the command is a known engine
        self._sig_halt = threading.Event()

    # -- guarded helpers ---------------------------------------------------------
    def _guard(self, what, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            msg = "%s failed: %s: %s (the workload runs on)" % (what, type(e).__name__, e)
            logger.warning("graphsignal: %s", msg)
            try:
                self.store.add_error("error", msg, tags={"source": "sidecar"})
            except Exception:
                pass
            return None

    def _sidecar_error(self, msg):
        self.store.add_error("warning", msg, tags={"source": "sidecar"})

    # -- environment ------------------------------------------------------------
    def child_env(self, command):
        env = dict(self.environ)
        envcheck.sanitize(env)  # one line per bad number; the workload's writers then use their defaults
        env[ENV_RUN_ID] = self.run_id
        env[ENV_GRAPH_TRACE] = resolve_choice(self.cfg.cuda_graph_trace, self.environ, ENV_GRAPH_TRACE,
                                              ("graph", "node"), "graph")
        env[ENV_ROCM_TRACE] = resolve_choice(self.cfg.rocm_kernel_trace, self.environ, ENV_ROCM_TRACE,
                                             ("none", "all"), "none")
        self._guard("CUDA injection setup", native.prepare_injection, env, command, self._sidecar_error)
        return env

    def prepare_command(self):
        command = list(self.cfg.command)
        prepared = self._guard("engine launcher", engines.prepare, command, self.cfg.metrics_port,
                               self._sidecar_error)
        if prepared is None:
            return command
        self.metrics_url = prepared.metrics_url
        self.engine = prepared
        return list(prepared.command)

    # -- child ------------------------------------------------------------------
    def spawn(self, command, env):
        def child_setup():
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

        return subprocess.Popen(command, env=env, stdin=None, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=child_setup, close_fds=True,
                                restore_signals=True, bufsize=0)

    def _signal_loop(self):
        same_group = os.getpgid(self.child.pid) == os.getpgrp() if self.child else False
        while not self._sig_halt.is_set():
            info = signal.sigtimedwait(FORWARDED, 0.2)
            if info is None or self.child is None:
                continue
            if info.si_code == SI_KERNEL and same_group:
                continue  # the terminal sent it to our whole group: the child has it already
            try:
                os.kill(self.child.pid, info.si_signo)
            except ProcessLookupError:
                pass

    # -- sidecar ----------------------------------------------------------------
    def start_sidecar(self):
        self._guard("poller", self._start_poller)
        self._guard("sources", self._start_sources)
        self._guard("server", self._start_server)

    def _start_poller(self):
        self.poller = Poller(self.store, self.run_id, on_error=self._sidecar_error)
        self.poller.start()

    def _start_sources(self):
        for src in registry.make_sources(self):
            t = SourceThread(src, self.store)
            t.start()
            self.sources.append(t)

    def _start_server(self):
        self.server = ServerThread(make_app(self.store, window_stats), self.cfg.listen_host, self.cfg.listen_port,
                                   on_error=self._sidecar_error)
        self.server.start()

    def stop_sidecar(self):
        for t in self.sources:
            self._guard("stopping " + t.source.name, t.stop, 5.0, True)
        if self.poller is not None:
            self._guard("final drain", self.poller.stop, True)
        path = self.environ.get(ENV_SIGNALS_FILE)
        if path:
            self._guard("writing " + path, self._write_signals, path)
        linger = envcheck.value(self.environ, ENV_LINGER)  # a bad value was reported by child_env
        if linger:
            time.sleep(linger)
        if self.server is not None:
            self._guard("server shutdown", self.server.stop)
        if self.poller is not None:
            self._guard("ring cleanup", self.poller.cleanup_all)

    def _write_signals(self, path):
        data = build_signals(self.store)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def _record_exit(self, rc):
        pid = str(self.child.pid)
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = "signal %d" % -rc
            self.store.add_error("error", "process %s was killed by %s" % (pid, name),
                                 tags={"process.pid": pid, "exit.signal": str(-rc)})
        elif rc != 0:
            self.store.add_error("error", "process %s exited with code %d" % (pid, rc),
                                 tags={"process.pid": pid, "exit.code": str(rc)})

    # -- main -------------------------------------------------------------------
    def run(self):
        setup_logging(self.environ)
        command = self.prepare_command()
        env = self.child_env(command)
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            self.child = self.spawn(command, env)
        except FileNotFoundError:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
            sys.stderr.write("graphsignal-run: error: command not found: %s\n" % command[0])
            return 127
        except PermissionError:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
            sys.stderr.write("graphsignal-run: error: permission denied: %s\n" % command[0])
            return 126
        sig_thread = threading.Thread(target=self._signal_loop, name="graphsignal-signals", daemon=True)
        sig_thread.start()
        self._guard("console capture", self._start_console)
        for name, pipe, fd_out in (("stdout", self.child.stdout, self.stdout_fd),
                                   ("stderr", self.child.stderr, self.stderr_fd)):
            on_data = self.console.feed if self.console is not None else None
            on_close = self.console.close_stream if self.console is not None else None
            fd_in = os.dup(pipe.fileno())  # the pump owns (and closes) its own descriptor
            pipe.close()
            p = Pump(name, fd_in, fd_out, on_data, on_close)
            p.start()
            self.pumps.append(p)
        self._guard("process resources", self._register_root, command)
        self.start_sidecar()
        rc = self.child.wait()
        deadline = time.monotonic() + EOF_WAIT
        for p in self.pumps:
            p.join(max(0.0, deadline - time.monotonic()))
        self._guard("exit status", self._record_exit, rc)
        self._sig_halt.set()
        self.stop_sidecar()
        sig_thread.join(1.0)
        return self.exit_like_child(rc)

    def _start_console(self):
        self.console = console.ConsoleCapture(self.store, lambda: self.child.pid if self.child else None)

    def _register_root(self, command):
        self.store.set_resource("host", {}, {
            "platform.name": os.uname().sysname, "platform.version": os.uname().release,
            "platform.machine": os.uname().machine, "profiler.version": __version__,
            "cpu.count": os.cpu_count()})
        # known before the first host poll, so even a short-lived workload has it
        pid = str(self.child.pid)
        self.store.set_resource("process", {"process.pid": pid, "process.root_pid": pid}, {
            "process.parent_pid": str(os.getpid()), "process.command_line": " ".join(command)})

    @staticmethod
    def exit_like_child(rc):
        if rc >= 0:
            return rc
        sig = -rc
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's core (if any) is the one that counts
        except (OSError, ValueError):
            pass
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        return 128 + sig


def run(cfg):
    return Supervisor(cfg).run()

