"""The workload's console as the supervisor pumps it: a pty or a pipe per
stream (Stream), the pump threads that copy each to our own stdout and
stderr byte for byte and hand a copy to the sidecar (Pump), and the
detached copy that serves writers outliving the workload (detach_pump).

Standard library only: part of the supervisor's start-up.
"""
import errno
import fcntl
import logging
import os
import select
import signal
import struct
import termios
import threading
import time

from graphsignal import channel

logger = logging.getLogger("graphsignal")

DRAIN_SECONDS = 0.1  # at most this long copying what is buffered before a handover


class Stream:
    """One of the workload's output streams: what the workload gets
    (child_fd) and what we read (read_fd), a pty when ours is a terminal."""

    def __init__(self, name, out_fd, closed=False):
        self.name, self.out_fd = name, out_fd
        self.winsize = None
        self.is_pty = False
        self.closed = closed  # we were started without it: so is the workload, and nothing is pumped
        self.read_fd = self.child_fd = None
        if closed:
            return
        try:
            self.is_pty = os.isatty(out_fd)
        except OSError:
            pass
        if self.is_pty:
            try:
                self._open_pty()
                return
            except OSError as e:
                logger.info("graphsignal: no pty for %s (%s); using a pipe", name, e)
                self.is_pty = False
        self.read_fd, self.child_fd = os.pipe()

    def _open_pty(self):
        master, slave = os.openpty()
        try:
            try:
                attrs = termios.tcgetattr(self.out_fd)
            except termios.error:
                attrs = termios.tcgetattr(slave)
            # No output processing here: the real terminal does it, once.
            attrs[1] &= ~termios.OPOST
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            self.winsize = _get_winsize(self.out_fd)
            if self.winsize is not None:
                fcntl.ioctl(slave, termios.TIOCSWINSZ, self.winsize)
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        self.read_fd, self.child_fd = master, slave

    def close_child_end(self):
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None

    def sync_winsize(self):
        """Copies our terminal's size to the pty; True when it changed."""
        ws = _get_winsize(self.out_fd)
        if ws is None or ws == self.winsize:
            return False
        try:
            fcntl.ioctl(self.read_fd, termios.TIOCSWINSZ, ws)
        except OSError:
            return False
        self.winsize = ws
        return True


def _get_winsize(fd):
    try:
        return fcntl.ioctl(fd, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    except OSError:
        return None


def write_all(fd, data):
    """Writes all of data to fd, waiting while it is full (a non-blocking
    descriptor shared with others). Raises OSError as os.write does."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


class _Copy:
    """One stream as a pump copies it."""

    def __init__(self, stream):
        self.name = stream.name
        self.fd_in, self.fd_out = stream.read_fd, stream.out_fd
        self.done = False  # EOF, or our output is gone
        self.handover = False  # writers remain after the workload exited: fd_in (left open) goes on
        self.out_broken = False


class Pump(threading.Thread):
    """Copies streams of the workload to our fds byte for byte, then offers
    each chunk to the sidecar (which never makes it wait). One pump serves
    stdout and stderr when they go to the same place (one terminal, `2>&1`),
    so what the workload wrote to each keeps its order there as far as the
    kernel's buffers tell; otherwise each stream has its own, so a stalled
    reader of one never holds up the other. After the workload has exited
    (wake_fd readable) a pump copies what is buffered and stops; each
    copy's `handover` then says whether writers remain."""

    def __init__(self, streams, sender, wake_fd):
        threading.Thread.__init__(self, name="graphsignal-pump-" + "+".join(s.name for s in streams), daemon=True)
        self.copies = [_Copy(s) for s in streams]
        self.sender = sender
        self.wake_fd = wake_fd

    def run(self):
        try:
            poller = select.poll()
            by_fd = {}
            for c in self.copies:
                os.set_blocking(c.fd_in, False)
                poller.register(c.fd_in, select.POLLIN)
                by_fd[c.fd_in] = c
            poller.register(self.wake_fd, select.POLLIN)
            live = len(self.copies)
            while live:
                ready = {fd for fd, _ in poller.poll()}
                if self.wake_fd in ready:
                    self._drain()
                    return
                for c in self.copies:  # stdout first, as the workload most likely wrote it
                    if c.fd_in in ready and not c.done and self._copy(c) is False:
                        c.done = True
                        live -= 1
                        poller.unregister(c.fd_in)
                        self._close(c)
        except Exception as e:  # never seen; the workload then sees its pipe close, as with a dead reader
            logger.warning("graphsignal: console pump stopped: %s: %s", type(e).__name__, e)
        finally:
            for c in self.copies:
                if not c.done:
                    c.done = True
                    self._close(c)

    def _close(self, c):
        if not c.handover:
            try:
                os.close(c.fd_in)
            except OSError:
                pass
        try:
            self.sender.closed(c.name)
        except Exception:
            pass

    def _copy(self, c):
        """One read: False at EOF or when our output is gone, None when
        nothing was there, True otherwise."""
        try:
            data = os.read(c.fd_in, channel.CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:  # EIO: the pty has no writer left
            return False
        if not data:
            return False
        try:
            write_all(c.fd_out, data)
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.EBADF, errno.EIO, errno.ENOSPC):
                raise
            # Our reader is gone: let the workload see a closed pipe, as it
            # would in a bare run.
            c.out_broken = True
            return False
        self.sender.data(c.name, data)
        return True

    def _drain(self):
        deadline = time.monotonic() + DRAIN_SECONDS
        for c in self.copies:
            while not c.done:
                r = self._copy(c)
                if r is False:
                    c.done = True
                    self._close(c)
                elif r is None or time.monotonic() >= deadline:
                    c.handover = True
                    c.done = True
                    self._close(c)

    def handovers(self):
        return [(c.fd_in, c.fd_out) for c in self.copies if c.handover]


def same_destination(fd_a, fd_b):
    """True when two of our fds write to the same file, pipe or terminal."""
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def detach_pump(pairs):
    """Forks a process that copies each (fd_in, fd_out) until its last
    writer closes, in a session of its own; returns its pid. Call with no
    other thread running."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        keep = {fd for pair in pairs for fd in pair}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        live = dict(pairs)
        for fd in live:
            os.set_blocking(fd, True)
        while live:
            readable, _, _ = select.select(list(live), [], [])
            for fd in readable:
                try:
                    data = os.read(fd, channel.CHUNK)
                except OSError:
                    data = b""
                if data:
                    try:
                        write_all(live[fd], data)
                        continue
                    except OSError:
                        pass
                os.close(fd)
                del live[fd]
    finally:
        os._exit(0)
