"""The supervisor: graphsignal-run's own small process. It starts the
workload first, pumps its console through unchanged, forwards signals,
relays job control, and exits the way the workload did. Everything else
(poller, sources, server) runs in the sidecar, a separate process started
after the workload (graphsignal.sidecar.process), so that nothing the
sidecar does, not even a crash, reaches the workload.

Never harm the workload: only the console pumps are essential (a workload
writing into a pipe nobody reads would block); they never wait for the
sidecar (graphsignal.channel drops and counts), and when the
sidecar dies the run goes on, unprofiled, with one line saying so.

Imports are kept to the standard library and the light parts of this
package: the workload's start waits for them. The workload's environment
is made by graphsignal.launch.workload_env, the sidecar started by
graphsignal.launch.sidecar_start; this module runs the two processes.

Process layout.
  - The workload runs in its own process group. A signal sent to our
    group (a parent script, a batch system) therefore reaches it once,
    through us, and one sent to us alone is forwarded once. When our
    controlling terminal has us in the foreground, the workload's group
    gets the foreground (so ^C, ^Z and reads of the terminal act on it as
    in a bare run); we relay its stops to our parent by stopping
    ourselves with the same signal, and continue it when we are continued
    (as shells, sudo and script do).
  - stdout and stderr are each a pty when ours is a terminal (the same
    window size, kept in sync; output processing off in the pty so bytes
    reach the real terminal as the workload wrote them, and the real
    terminal does its processing once), pipes otherwise. stdin is ours.
  - The sidecar runs in its own session: neither terminal nor group
    signals reach it. If we are killed outright (SIGKILL), it sees its
    channel close and sends the workload SIGTERM.
  - Writers that outlive the workload (a daemon holding its stdout) get a
    detached copy of the pump that lives until the last of them closes.
"""
import errno
import fcntl
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

from graphsignal import config, procfs, report, safefs
from graphsignal.launch import engines, sidecar_start
from graphsignal.launch.pumps import Pump, Stream, detach_pump, same_destination
from graphsignal.launch.workload_env import workload_env
from graphsignal.rings import stale
from graphsignal import channel
from graphsignal.channel import EXIT_REPORTED, describe_status, setup_logging, start_time

logger = logging.getLogger("graphsignal")

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Everything the main thread takes with sigwaitinfo (blocked in every thread).
HANDLED = FORWARDED + (signal.SIGCHLD, signal.SIGWINCH, signal.SIGCONT, signal.SIGTSTP, signal.SIGTTIN,
                       signal.SIGTTOU)
JOB_STOPS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)

EOF_GRACE = 0.25  # seconds the pumps get to see EOF after the workload exits, before writers left are handed over
WINSIZE_POLL = 0.1  # seconds between checks of the terminal's size (see _sync_winsize)
SIDECAR_STOP_WAIT = 5.0  # seconds a stopped sidecar gets to exit before SIGKILL
SIDECAR_FINAL_WAIT = 60.0  # seconds for the final payload (plus GRAPHSIGNAL_LINGER), while it shows progress
SIDECAR_FINAL_STALL = 5.0  # seconds without a heartbeat after which that wait ends (channel.HEARTBEAT)


class OutputRefused(Exception):
    """The signals file's folder cannot take the payload; one line."""


# -- the supervisor -------------------------------------------------------------------
class Supervisor:
    def __init__(self, cfg, environ=None, stdout_fd=1, stderr_fd=2):
        self.cfg = cfg
        self.environ = dict(os.environ if environ is None else environ)
        self.out_fds = (("stdout", stdout_fd), ("stderr", stderr_fd))
        self.run_id = os.urandom(6).hex()
        self.settings = None  # config.Settings, resolved once by run() (after logging is set up)
        self.notes = []  # (level, message) for the sidecar's error list
        self.reporter = report.Reporter(sink=lambda level, msg: self.notes.append((level, msg)))
        self.metrics_url = None
        self.engine = None  # engines.Prepared when the command is a known engine
        self.child = None
        self.child_pgid = None  # the workload's own process group
        self.child_rc = None
        self.launch_ns = None  # epoch ns just before the workload was started
        self.child_ended_ns = None  # epoch ns when it was reaped
        self.child_cpu_ns = None  # its CPU time and its reaped descendants' (wait4's rusage)
        self.streams = []
        self.stdin_closed = False
        self.pumps = []
        self.ctty = None  # our controlling terminal, when we have one
        self.lock_fd = None
        self.sidecar = None
        self.sender = None
        self.sidecar_stopping = False
        self._wake_r = self._wake_w = None
        self._sidecar_end = None

    # -- guarded helpers ---------------------------------------------------------
    def _guard(self, what, fn, *args):
        return self.reporter.guard(what, fn, *args)

    def _note(self, msg):
        self.notes.append(("warning", msg))

    def _checked_output(self, s):
        """The settings, once the output's amendment is said (config.resolve
        drops an output that could never be written safely, said now, once,
        rather than after a long run). A folder that is missing or not
        writable raises OutputRefused: a typo in a path, which the user
        fixes before a run, not after it."""
        if s.amendment("signals_file"):
            self.reporter.say(s.amendment("signals_file"))
        if s.signals_file:
            try:
                safefs.output_folder(s.signals_file)
            except (safefs.NoFolder, safefs.UnsafePath) as e:  # (unsafe now: changed since resolve() looked)
                flag = "--output" if s.origin("signals_file").startswith("flag") else config.SIGNALS_FILE_ENV
                raise OutputRefused("%s %s: %s; the workload was not started (make the folder or name another "
                                    "file)" % (flag, s.signals_file, e))
        return s

    def prepare_command(self):
        command = list(self.settings.command)
        prepared = self._guard("engine launcher", engines.prepare, command, self.settings.metrics_port, self._note)
        if prepared is None:
            return command
        self.metrics_url = prepared.metrics_url
        self.engine = prepared
        return list(prepared.command)

    # -- terminal ---------------------------------------------------------------
    def _open_ctty(self):
        try:
            return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return None

    def _foreground(self):
        """The process group in the foreground of our terminal, or None."""
        if self.ctty is None:
            return None
        try:
            return os.tcgetpgrp(self.ctty)
        except OSError:
            return None

    def _own_group(self):
        return self.child_pgid is not None and self.child_pgid != os.getpgrp()

    def _give_terminal(self, pgid):
        # SIGTTOU is blocked, so a background group may set the foreground
        try:
            os.tcsetpgrp(self.ctty, pgid)
        except OSError:
            pass

    def _take_terminal_back(self):
        if self._own_group() and self._foreground() == self.child_pgid:
            self._give_terminal(os.getpgrp())

    def _sync_winsize(self):
        """Polled: a resize signals the terminal's foreground group, which
        is the workload's, not us. The workload may read its pty before we
        update it; the SIGWINCH we send after updating gives it the new
        size (a second SIGWINCH for one resize, which programs take as a
        redraw)."""
        changed = False
        for s in self.streams:
            if s.is_pty and s.sync_winsize():
                changed = True
        if changed and self._own_group() and self._foreground() == self.child_pgid:
            try:
                os.killpg(self.child_pgid, signal.SIGWINCH)
            except OSError:
                pass

    # -- child ------------------------------------------------------------------
    def spawn(self, command, env, hand_over, mask):
        ctty = self.ctty

        def child_setup():
            for fd in closed:
                os.close(fd)
            os.setpgid(0, 0)
            if hand_over:
                try:
                    os.tcsetpgrp(ctty, os.getpid())  # before exec: its first read of the terminal is in the foreground
                except OSError:
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

        out, err = self.streams
        closed = [fd for fd, s in ((1, out), (2, err)) if s.closed] + ([0] if self.stdin_closed else [])
        # close_fds=False: what we inherited (a make jobserver, systemd's
        # sockets, a parent's pipe) is the workload's, as in a bare run; our
        # own descriptors are all close-on-exec.
        def popen(argv):
            return subprocess.Popen(argv, env=env, stdin=None, stdout=out.child_fd, stderr=err.child_fd,
                                    preexec_fn=child_setup, close_fds=False, restore_signals=True)

        try:
            return popen(command)
        except OSError as e:
            if e.errno != errno.ENOEXEC:
                raise
        # A file the kernel cannot execute (a script without "#!"): run it
        # with /bin/sh, as execvp(3) and the shells do.
        path = command[0] if "/" in command[0] else shutil.which(command[0], path=env.get("PATH", os.defpath))
        return popen(["/bin/sh", path or command[0]] + list(command[1:]))

    def _forward(self, sig):
        if self.child_rc is not None:
            return
        try:
            os.kill(self.child.pid, sig)
        except ProcessLookupError:
            pass

    def _on_signal(self, sig):
        if sig == signal.SIGCHLD:
            self._reap()
        elif sig == signal.SIGCONT:
            self._continue_child()
        elif sig in (signal.SIGWINCH, signal.SIGTTIN, signal.SIGTTOU):
            pass  # sizes are synced by the loop; we never read the terminal
        else:
            self._forward(sig)  # SIGTSTP too: the workload stops, and we follow it (_child_stopped)

    def _reap(self):
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if os.WIFSTOPPED(status) or os.WIFCONTINUED(status):
                if pid == self.child.pid and os.WIFSTOPPED(status):
                    self._child_stopped(os.WSTOPSIG(status))
                continue
            rc = os.waitstatus_to_exitcode(status)
            if pid == self.child.pid:
                self.child.returncode = self.child_rc = rc
                self.child_ended_ns = time.time_ns()
                # exact at the end, where the sidecar's sampling misses the last interval (a short run: all of it)
                self.child_cpu_ns = int(round((usage.ru_utime + usage.ru_stime) * 1e9))
            elif self.sidecar is not None and pid == self.sidecar.pid:
                self.sidecar.returncode = rc
                self._sidecar_exited(rc)

    def _job_control(self):
        """True when a job-control shell runs us: we have a terminal and a
        process group of our own, not the session leader's."""
        try:
            return self.ctty is not None and os.getpgrp() != os.getsid(0)
        except OSError:
            return False

    def _child_stopped(self, sig):
        """The workload stopped (^Z, a read of the terminal from the
        background, SIGSTOP). Under a job-control shell we stop the same
        way, so the shell sees the job stop and takes the terminal; the
        SIGCONT that resumes us (fg, bg) resumes it. Without one nobody
        would resume us, and nobody could resume a job-control stop (^Z
        under `script -c`, a read of the terminal): bare, in its group with
        no job-control parent, the kernel would have discarded it, so we
        continue the workload. A SIGSTOP is left to whoever sent it."""
        if not self._job_control():
            if sig in JOB_STOPS:
                self._continue_child()
            return
        self._take_terminal_back()
        if sig not in JOB_STOPS:
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        signal.pthread_kill(threading.get_ident(), sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])  # delivered here: the whole process stops
        signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
        if signal.SIGCONT not in signal.sigpending():
            # Not stopped: the kernel discards job-control stops in an
            # orphaned process group. The workload would not have stopped
            # in a bare run either.
            self._continue_child()

    def _continue_child(self):
        if self.child_rc is not None:
            return
        if self._own_group():
            if self._foreground() == os.getpgrp():
                self._give_terminal(self.child_pgid)
            try:
                os.killpg(self.child_pgid, signal.SIGCONT)
            except OSError:
                pass
        else:
            self._forward(signal.SIGCONT)

    # -- sidecar ----------------------------------------------------------------
    def _open_channel(self):
        """The channel exists before the pumps start, so the sidecar, which
        starts after them, gets the workload's first bytes too (the kernel
        holds them meanwhile)."""
        ours, self._sidecar_end = channel.pair()
        self.sender = channel.Sender(ours, line_limit=channel.LINE_LIMIT)

    def _start_sidecar(self, command):
        theirs, self._sidecar_end = self._sidecar_end, None
        pidfd = None
        try:
            pidfd = os.pidfd_open(self.child.pid)
        except (AttributeError, OSError):
            pass
        cfg = {
            "run_id": self.run_id,
            "supervisor_pid": os.getpid(),
            "child_pid": self.child.pid,
            "child_start_time": start_time(self.child.pid),
            "launch_ns": self.launch_ns,
            "command": command,
            "metrics_url": self.metrics_url,
            "engine": self.engine.engine if self.engine is not None else None,
            "settings": self.settings.to_dict(),
            "notes": self.notes,
        }
        self.sidecar = sidecar_start.start(theirs, cfg, self.environ, dict(self.out_fds)["stderr"], self.lock_fd,
                                           pidfd)

    def _sidecar_exited(self, rc):
        if self.sender is not None:
            self.sender.dead = True
        if self.sidecar_stopping or rc == EXIT_REPORTED:
            return
        logger.error("graphsignal: the profiler stopped (%s); the workload runs on, unprofiled",
                     describe_status(rc))

    def _wait(self, until, timeout=None):
        """Takes signals until until() or timeout seconds; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not until():
            poll = WINSIZE_POLL if any(s.is_pty for s in self.streams) and self.child_rc is None else None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poll = left if poll is None else min(poll, left)
            info = signal.sigtimedwait(HANDLED, poll) if poll is not None else signal.sigwaitinfo(HANDLED)
            if self.child_rc is None and any(s.is_pty for s in self.streams):
                self._sync_winsize()
            if info is not None:
                self._on_signal(info.si_signo)
        return True

    def _stop_sidecar(self, rc):
        sc = self.sidecar
        if sc is None:
            return
        self.sidecar_stopping = True
        if sc.returncode is None:
            if self._wants_final():
                self.sender.exit(rc, self.child_ended_ns, self.child_cpu_ns)
                self._wait_final(sc, self.settings.linger)
            else:
                # Nothing it would still do could be seen (no file, and no
                # endpoint once we return): end it at once, even in the
                # middle of its start-up. Its rings go below.
                self._kill_sidecar(signal.SIGKILL)
            if sc.returncode is None:
                self._kill_sidecar(signal.SIGTERM)
            if not self._wait(lambda: sc.returncode is not None, SIDECAR_STOP_WAIT):
                self._kill_sidecar(signal.SIGKILL)
                self._wait(lambda: sc.returncode is not None, SIDECAR_STOP_WAIT)
        self.sender.close()

    def _wants_final(self):
        """The sidecar has work after the workload exits: the final payload
        to write (GRAPHSIGNAL_SIGNALS_FILE), to keep serving (LINGER), to
        upload (GRAPHSIGNAL_API_KEY) or to export (GRAPHSIGNAL_OTLP); the
        last upload and the last export have their own 2 s each."""
        return self.settings.wants_final

    def _wait_final(self, sc, linger):
        """Waits for the final payload (and GRAPHSIGNAL_LINGER). A signal
        for us meanwhile cuts it short: the sidecar sees its channel close
        and finishes at once."""
        hurried = []
        base = self._on_signal

        def on_signal(sig):
            if sig in FORWARDED and not hurried:
                hurried.append(sig)
                self.sender.close()
            base(sig)

        self._on_signal = on_signal
        try:
            done = lambda: sc.returncode is not None or bool(hurried)  # noqa: E731
            start = last_beat = time.monotonic()
            cpu = procfs.cpu_ticks(sc.pid)
            while not done():
                now = time.monotonic()
                # Progress: a heartbeat (the sidecar has the exit and works on
                # it, or lingers), or CPU time spent (it is still starting up)
                cpu, was = procfs.cpu_ticks(sc.pid), cpu
                if self.sender.heard() or cpu != was:
                    last_beat = now
                if now - last_beat >= SIDECAR_FINAL_STALL:
                    # SIGSTOPped or hung: SIGTERM would wait in its queue
                    logger.warning("graphsignal: the profiler made no progress for %ds after the workload exited; "
                                   "stopping it (the final payload may be missing)", SIDECAR_FINAL_STALL)
                    self._kill_sidecar(signal.SIGKILL)
                    return
                if now - start >= SIDECAR_FINAL_WAIT + linger:
                    logger.warning("graphsignal: the final /signals payload took more than %ds; stopping the "
                                   "profiler", SIDECAR_FINAL_WAIT + linger)
                    return
                self._wait(done, channel.BEAT_INTERVAL)
            if hurried:
                self._wait(lambda: sc.returncode is not None, SIDECAR_STOP_WAIT)
        finally:
            self._on_signal = base

    def _kill_sidecar(self, sig):
        if self.sidecar.returncode is None:
            try:
                os.kill(self.sidecar.pid, sig)
            except ProcessLookupError:
                pass

    # -- main -------------------------------------------------------------------
    def run(self):
        closed = _reserve_std_fds()  # before we open anything
        self.stdin_closed = 0 in closed
        setup_logging(config.log_level_of(self.environ))
        try:
            self.settings = self._checked_output(config.resolve(self.cfg, self.environ))
        except OutputRefused as e:
            sys.stderr.write("graphsignal-run: error: %s\n" % e)
            return 2  # a usage error: nothing started yet
        command = self.prepare_command()
        env = workload_env(self.settings, self.environ, self.run_id, command, self.reporter, self._note)
        self.lock_fd = self._guard("run lock", stale.hold_run_lock, self.run_id)
        self.streams = [Stream(name, fd, fd in closed) for name, fd in self.out_fds]
        self.ctty = self._open_ctty()
        hand_over = self.ctty is not None and self._foreground() == os.getpgrp()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        try:
            self.launch_ns = time.time_ns()
            self.child = self.spawn(command, env, hand_over, mask)
        except (OSError, subprocess.SubprocessError) as e:
            if hand_over:
                self._give_terminal(os.getpgrp())  # the failed child may have taken it
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._close_all()
            if isinstance(e, FileNotFoundError):
                sys.stderr.write("graphsignal-run: error: command not found: %s\n" % command[0])
                return 127
            if isinstance(e, PermissionError):
                sys.stderr.write("graphsignal-run: error: permission denied: %s\n" % command[0])
                return 126
            sys.stderr.write("graphsignal-run: error: cannot run %s: %s\n" % (command[0], e))
            return 126
        try:
            self.child_pgid = os.getpgid(self.child.pid)
        except OSError:
            self.child_pgid = None
        for s in self.streams:
            s.close_child_end()
        self._guard("the profiler's channel", self._open_channel)
        if self.sender is None:
            self.sender = sidecar_start.NoSidecar()
        self._wake_r, self._wake_w = os.pipe()
        out, err = self.streams
        groups = [[out, err]] if same_destination(out.out_fd, err.out_fd) else [[out], [err]]
        for g in [[st for st in g if not st.closed] for g in groups]:
            if not g:
                continue
            p = Pump(g, self.sender, self._wake_r)
            p.start()
            self.pumps.append(p)
        self._reap()  # a workload that is already gone (`true`) ...
        if self._sidecar_end is not None and (self.child_rc is None or self._wants_final()):
            self._guard("starting the profiler", self._start_sidecar, command)
        if self.sidecar is None:  # ... needs no sidecar unless its final payload was asked for
            self.sender.dead = True
            if self._sidecar_end is not None:
                self._sidecar_end.close()
                self._sidecar_end = None
        self._wait(lambda: self.child_rc is not None)
        rc = self.child_rc
        self._take_terminal_back()
        self._finish_pumps()
        self._stop_sidecar(rc)
        self._guard("ring cleanup", stale.remove_run, self.run_id)
        self._close_all()
        return self.exit_like_child(rc)

    def _finish_pumps(self):
        deadline = time.monotonic() + EOF_GRACE
        for p in self.pumps:
            p.join(max(0.0, deadline - time.monotonic()))
        os.write(self._wake_w, b"x")
        for p in self.pumps:
            p.join()
        pairs = [pair for p in self.pumps for pair in p.handovers()]
        if pairs:
            self._guard("detaching the console pump", detach_pump, pairs)
            for fd_in, _ in pairs:
                os.close(fd_in)

    def _close_all(self):
        for fd in (self.ctty, self.lock_fd, self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ctty = self.lock_fd = self._wake_r = self._wake_w = None
        for s in self.streams:
            if s.child_fd is not None:
                s.close_child_end()

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


def _reserve_std_fds():
    """Opens /dev/null on any of 0, 1, 2 that we were started without, so
    the pipes and ptys made next never take those numbers; returns them
    (the workload gets them closed, as we did)."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            closed.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    return closed


def run(cfg):
    return Supervisor(cfg).run()
