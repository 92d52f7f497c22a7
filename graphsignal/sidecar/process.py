"""The sidecar process: poller, sources, console capture and the /signals
server, fed by the supervisor through graphsignal.channel.

Started by the supervisor after the workload, in a session of its own, as
  python -c '...main(argv)' --channel-fd N --config-fd M [--child-pidfd K]
with the run's lock descriptor inherited (graphsignal.rings.stale) and
BLAS/OpenMP pools capped to one thread in its environment.

Every part starts inside a guard that logs one line on failure; a failure
that ends the process says so in one line and exits with EXIT_REPORTED,
and any other death (a signal, the OOM killer) is reported by the
supervisor. Either way the workload goes on.

When the channel reaches EOF before the workload's exit was announced, the
supervisor is gone (killed outright): the workload gets SIGTERM, as from
any supervisor that ends, and the final payload is still written.
"""
import logging
import os
import select
import signal
import socket
import sys
import threading
import time

from graphsignal import __version__, config, safefs
from graphsignal.report import Reporter
from graphsignal.sidecar.feed import Feed, Workload
from graphsignal.rings import stale
from graphsignal import channel
from graphsignal.channel import EXIT_REPORTED, setup_logging

logger = logging.getLogger("graphsignal")

SUPERVISOR_GONE_WAIT = 10.0  # seconds the workload gets to exit after our SIGTERM, for the final payload


class Part:
    """A long-running part of the sidecar. Sidecar.parts() lists them in
    start order (cheapest first: the rings are read and the endpoint is
    up while the sources' libraries still load). At the end, final() runs
    in FINAL_ORDER (what feeds the store, then the rings' last drain, then
    what sends the store away), then the final payload is written and the
    sidecar lingers, then close() runs in reverse start order. Each step
    runs inside a guard: a failure is one line, and the rest goes on."""

    name = ""
    final_step = ""  # the guard's words for final(); "" when it has none
    close_with = ""  # the method of what begin() started that close() calls; "" when nothing

    def __init__(self, sc):
        self.sc = sc
        self.running = None  # what begin() started

    def start(self) -> None:
        self.running = self.begin()

    def begin(self):
        raise NotImplementedError

    def final(self) -> None:
        pass

    def close(self) -> None:
        if self.running is not None and self.close_with:
            getattr(self.running, self.close_with)()


FINAL_ORDER = ("sources", "poller", "uploader", "otlp")


class _Clock(Part):
    name = "clock"
    close_with = "stop"

    def begin(self):
        from graphsignal.sidecar.clock import StoreClock

        return StoreClock(self.sc.store).start()


class _Poller(Part):
    name = "poller"
    final_step = "final drain"
    close_with = "cleanup_all"  # the rings of this run

    def begin(self):
        from graphsignal.sidecar.poller import Poller

        poller = Poller(self.sc.store, self.sc.run_id, on_error=self.sc._sidecar_error)
        poller.start()
        return poller

    def final(self):
        if self.running is not None:
            self.running.stop(True)


class _Server(Part):
    name = "server"
    close_with = "stop"

    def begin(self):
        from graphsignal.sidecar.exposition import Exposition
        from graphsignal.sidecar.server import HostGuard, ServerThread, make_app
        from graphsignal.sidecar.windows import window_stats

        sc, st = self.sc, self.sc.settings
        why = config.token_problem(st.signals_token)
        if why:
            # never served without the token it was asked to require
            raise ValueError("%s; /signals and /metrics are not served" % why)
        guard = HostGuard(st.listen_host, st.allow_hosts)
        metrics = Exposition.from_settings(sc.store, st, sc._engine_series)
        server = ServerThread(make_app(sc.store, window_stats, guard, metrics, st.signals_token),
                              st.listen_host, st.listen_port, on_error=sc._sidecar_error, host_guard=guard)
        server.start()
        return server


class _Sources(Part):
    name = "sources"
    final_step = "stopping the sources"

    def begin(self):
        from graphsignal.sources import SourceContext, SourceThread, registry

        sc = self.sc
        child = sc.child
        ctx = SourceContext(store=sc.store, settings=sc.settings, root_pid=lambda: child.pid,
                            alive=lambda: child.poll() is None, metrics_url=sc.metrics_url,
                            engine=sc.cfg.get("engine"))
        threads = []
        for src in registry.make_sources(ctx):
            t = SourceThread(src, sc.store)
            t.start()
            threads.append(t)
        return threads

    def final(self):
        for t in self.running or ():
            self.sc._guard("stopping " + t.source.name, t.stop, 5.0, True)

    def engine_series(self):
        """Keys of the series scraped from the engine's endpoint (what
        /metrics leaves out unless asked): the scraper's own record of what
        it wrote in its last good scrape."""
        keys = set()
        for t in self.running or ():
            keys.update(getattr(t.source, "_keys", ()))
        return keys


class _Uploader(Part):
    """Only with GRAPHSIGNAL_API_KEY (upload.start returns None without)."""

    name = "uploader"
    final_step = "final upload"

    def begin(self):
        from graphsignal.sidecar import upload

        st = self.sc.settings
        return upload.start(self.sc.store, st.api_key, st.api_base)

    def final(self):
        if self.running is not None:
            from graphsignal.sidecar import upload

            self.running.stop(upload.FINAL_DEADLINE)


class _Otlp(Part):
    """Only with GRAPHSIGNAL_OTLP=1 (otlp.start returns None without)."""

    name = "otlp"
    final_step = "final OTLP export"

    def begin(self):
        from graphsignal.sidecar import otlp

        return otlp.start(self.sc.store, self.sc.settings, self.sc._engine_series)

    def final(self):
        if self.running is not None:
            from graphsignal.sidecar import otlp

            self.running.stop(otlp.FINAL_DEADLINE)


class _VersionCheck(Part):
    """One request on a daemon thread: nothing to stop."""

    name = "version check"

    def begin(self):
        from graphsignal.sidecar import version_check

        st = self.sc.settings
        return version_check.start(self.sc.store, st.api_base) if st.version_check else None


class _Once(Part):
    """A step of the start that leaves nothing running."""

    def __init__(self, sc, name, fn):
        super().__init__(sc)
        self.name, self.fn = name, fn

    def begin(self):
        self.fn()


class Sidecar:
    def __init__(self, cfg, feed):
        from graphsignal.sidecar.store import MetricStore

        self.cfg = cfg
        self.settings = config.Settings.from_dict(cfg["settings"])
        setup_logging(config.level_number(self.settings.log_level))
        self.feed = feed
        self.sock = feed.sock
        self.run_id = cfg["run_id"]
        self.child = feed.child
        self.metrics_url = cfg.get("metrics_url")
        self.store = MetricStore()
        self.store.set_started(cfg.get("launch_ns"))
        self.store.set_context(**{"instance.id": self.run_id, "host.name": os.uname().nodename},
                               **config.identity_context(self.settings))
        self.reporter = Reporter(self.store, {"source": "sidecar"})
        self.sources = _Sources(self)
        self.channel_eof = False
        self.priority = None  # what the parts' threads run at (sidecar.priority)
        self._parts = [_Clock(self), _Poller(self), _Server(self),
                       _Once(self, "process resources", self._register_root), self.sources, _Uploader(self),
                       _Otlp(self), _VersionCheck(self), _Once(self, "stale ring cleanup", self._remove_stale)]

    def parts(self):
        """The long-running parts, in start order (Part)."""
        return list(self._parts)

    # -- guarded helpers ---------------------------------------------------------
    def _guard(self, what, fn, *args, ended=False):
        return self.reporter.guard(what, fn, *args, ended=ended)

    def _sidecar_error(self, msg):
        self.reporter.entry(msg)

    def _engine_series(self):
        return self.sources.engine_series()

    # -- start ------------------------------------------------------------------
    def start(self):
        for level, msg in self.cfg.get("notes") or ():
            self.store.add_error(level, msg, tags={"source": "sidecar"})
        self.feed.store.attach(self.store)
        for part in self._parts:
            self._guard(part.name, part.start)
        self._guard("tuning the garbage collector", _tune_gc)
        # below the workload (sidecar.priority), but this thread (the final drain and payload)
        # and the channel's
        self.priority = self._guard("lowering the priority", self._lower_priority)

    def _lower_priority(self):
        from graphsignal.sidecar import priority

        keep = {threading.main_thread().native_id, self.feed.native_id}
        return priority.lower_threads(self.settings.sidecar_priority, keep)

    def _register_root(self):
        """The host and the root process, known before the first host poll,
        so even a short-lived workload has them."""
        from graphsignal.sources.host import redact_command_line

        u = os.uname()
        self.store.set_resource("host", {}, {
            "platform.name": u.sysname, "platform.version": u.release, "platform.machine": u.machine,
            "profiler.version": __version__, "cpu.count": os.cpu_count()})
        # known before the first host poll, so even a short-lived workload has it
        pid = str(self.child.pid)
        self.store.set_resource("process", {"process.pid": pid, "process.root_pid": pid}, {
            "process.parent_pid": str(self.cfg.get("supervisor_pid")),
            "process.command_line": " ".join(redact_command_line(self.cfg["command"]))})

    def _remove_stale(self):
        removed = stale.remove_stale(self.run_id)
        if removed:
            logger.info("graphsignal: removed %d ring file(s) left by earlier runs", len(removed))

    def supervisor_gone(self):
        """The supervisor was killed outright: the workload gets SIGTERM, and
        SIGKILL (with its process group) when it is still there
        SUPERVISOR_GONE_WAIT seconds later, so that it never outlives
        graphsignal-run as an orphan."""
        msg = "graphsignal-run (pid %s) is gone; sending SIGTERM to the workload (pid %d)" % (
            self.cfg.get("supervisor_pid"), self.child.pid)
        self.reporter.say(msg, "error", log_level=logging.WARNING)
        self.child.signal(signal.SIGTERM)
        if self.child.wait_gone(SUPERVISOR_GONE_WAIT):
            self.store.set_ended(None, None)  # when, as seen from here; its status went with the supervisor
            return
        self.reporter.say("the workload (pid %d) was still running %ds after SIGTERM; sending SIGKILL to it and its "
                          "process group" % (self.child.pid, SUPERVISOR_GONE_WAIT), "error", log_level=logging.WARNING)
        self.child.kill_group()
        if self.child.wait_gone(SUPERVISOR_GONE_WAIT):
            self.store.set_ended(None, -signal.SIGKILL)

    # -- stop -------------------------------------------------------------------
    def stop(self):
        by_name = {p.name: p for p in self._parts}
        for name in FINAL_ORDER:
            part = by_name[name]
            self._guard(part.final_step, part.final, ended=True)
        path = self.settings.signals_file
        if path:
            self._guard("writing " + path, self._write_signals, path, ended=True)
        if self.settings.linger:
            self._linger(self.settings.linger)
        for part in reversed(self._parts):
            if part.close_with:
                self._guard("stopping the " + part.name, part.close, ended=True)

    def _linger(self, seconds):
        """Keeps serving for seconds, or until the supervisor closes the
        channel (a signal told it to end the run now)."""
        if self.channel_eof:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                tag, _ = channel.receive(self.sock)
                if tag is None:
                    return

    def _write_signals(self, path):
        from graphsignal.sidecar.history_block import final_history
        from graphsignal.sidecar.payload import build_signals

        history = final_history(self.store)
        data = build_signals(self.store, {"history": history} if history is not None else None)
        safefs.write_atomic(path, data)

    def run(self):
        self.start()
        self.feed.join()
        if not self.feed.ended:
            self.channel_eof = True
            self.supervisor_gone()
        self.stop()
        return 0


def _tune_gc():
    import gc

    from graphsignal import gctune

    gctune.tune()  # after the parts' imports and set-up: that is what gc.freeze() keeps out of every pass
    logger.debug("graphsignal: garbage collector: thresholds %s, %d objects set aside (graphsignal.gctune)",
                 gc.get_threshold(), gc.get_freeze_count())


def parse_args(argv):
    """{"channel_fd", "config_fd", "child_pidfd"} from "--channel-fd N ..."
    (the supervisor is the only caller); raises ValueError."""
    names = {"--channel-fd": "channel_fd", "--config-fd": "config_fd", "--child-pidfd": "child_pidfd"}
    if len(argv) % 2:
        raise ValueError("expected pairs of --name fd, got %r" % (argv,))
    args = {"child_pidfd": None}
    for name, value in zip(argv[::2], argv[1::2]):
        if name not in names:
            raise ValueError("unknown argument %r" % name)
        args[names[name]] = int(value)
    if "channel_fd" not in args or "config_fd" not in args:
        raise ValueError("--channel-fd and --config-fd are required")
    return args


def _thread_died(args):
    """A sidecar thread that dies of an exception says so in one line: our
    stderr is the workload's, and a traceback there is not its output."""
    if args.exc_type is SystemExit:
        return
    where = ""
    tb = args.exc_traceback
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = " at %s:%d" % (os.path.basename(tb.tb_frame.f_code.co_filename), tb.tb_lineno)
    name = args.thread.name if args.thread is not None else "?"
    logger.warning("graphsignal: sidecar thread %s stopped: %s: %s%s (the workload runs on)",
                   name, args.exc_type.__name__, args.exc_value, where)


SWITCH_INTERVAL = 0.0005  # seconds a thread may hold the interpreter lock while another waits for it


def main(argv=None):
    # The supervisor's signal mask is inherited through exec.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # the supervisor's environment (thread caps aside) until the settings come
    setup_logging(config.log_level_of(os.environ))
    threading.excepthook = _thread_died
    # Readers' renders are long runs of Python; the poller's cycle lets go of
    # the interpreter lock at every numpy call and then waits for a render to
    # be made to hand it back, by default 5 ms each time (a convoy). A short
    # switch interval bounds what each hand-back costs the drain (issue 36).
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        cfg = channel.read_config(args["config_fd"])
        sock = socket.socket(fileno=args["channel_fd"])
        child = Workload(cfg["child_pid"], cfg.get("child_start_time"), args["child_pidfd"])
        # The capture first (light), then the heavy rest: the channel is
        # read while numpy and friends import.
        feed = Feed(sock, child)
        try:
            feed.start_console()
        except Exception as e:
            logger.warning("graphsignal: console capture failed: %s: %s (the workload runs on)", type(e).__name__, e)
        feed.start()
        rc = Sidecar(cfg, feed).run()
    except BaseException as e:  # noqa: B902 (SystemExit and KeyboardInterrupt too: one line, never a traceback)
        logger.error("graphsignal: the profiler stopped (%s: %s); the workload runs on, unprofiled",
                     type(e).__name__, e)
        _flush()
        os._exit(EXIT_REPORTED)
    _flush()
    # Skip interpreter teardown: daemon threads may sit in C calls, and
    # nothing is left to do (files are written, rings removed).
    os._exit(rc)


def _flush():
    for h in logger.handlers:
        try:
            h.flush()
        except Exception:
            pass


if __name__ == "__main__":
    main()
