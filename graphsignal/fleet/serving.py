"""graphsignal-server's HTTP front: the connections, apart from the app.

One event-loop thread owns every connection until its request has fully
arrived; a fixed pool of worker threads runs the app (through Werkzeug's
request handler) on requests that are complete. So a client costs a
thread only while its request is being answered, never while it is
connecting, idle, or sending slowly:

  connections  at most Limits.max_connections open at once, and never more
               than the file limit (RLIMIT_NOFILE) leaves room for. When
               full, a new connection takes the place of the oldest one
               that has not sent a whole request head (an idle or
               unauthenticated one); when none is like that, the new one is
               answered 503 and closed at once.
  timeouts     the request head must arrive within head_timeout of the
               connect (an idle connection is closed then, silently); a
               body may pause at most read_timeout and must be complete
               within request_timeout of the connect: else 408 and the
               connection is closed (a body shorter than its
               Content-Length holds nothing past that). A response must be
               written within write_timeout.
  answers      an error the loop answers itself (413, 503, 408, framing)
               is sent, then the client's input is read and dropped (the
               rest of its Content-Length, at most drain_bytes; until it
               pauses linger or request_timeout has passed) before the
               connection is closed: closing a socket with unread input
               sends a reset, which makes the client's send fail with a
               broken pipe and can throw away the answer it has not read
               yet. A body larger than drain_bytes still gets the reset.
  framing      strict, before anything reaches the app
               (graphsignal.fleet.framing): heads of at most max_head
               bytes (431), bodies of at most max_body bytes (413, unread).
  tenants      a request's tenant is its API key (known keys only; all
               other requests share one anonymous tenant, and their bodies
               are read and thrown away, never held: the app answers them
               401 or without a body). Each tenant's complete requests wait
               in its own queue (graphsignal.fleet.scheduler); the workers
               take the tenants in turn, at most tenant_inflight requests
               of one tenant at a time, so one tenant's flood of big
               uploads waits behind itself, not in front of another
               tenant's small one. A tenant may have at most tenant_queue
               requests admitted (reading, queued or running) and
               tenant_buffer_bytes of bodies held; all tenants together at
               most buffer_bytes: past these, 503 with Retry-After (the
               uploader backs off).

A worker answers a request through Werkzeug's handler over the bytes
already read (graphsignal.fleet.handler).
"""
import collections
import errno
import logging
import resource
import selectors
import socket
import threading
import time
from dataclasses import dataclass

from graphsignal.fleet.framing import Reject, parse_head, simple_response
from graphsignal.fleet.handler import Handler
from graphsignal.fleet.scheduler import Job, Scheduler

logger = logging.getLogger("graphsignal.fleet")

RESERVED_FDS = 64  # descriptors kept for the database, the listener, logging, imports
ANONYMOUS = ""  # the tenant of requests without a known key
TICK = 0.1  # seconds between timeout checks (and the longest a shutdown waits for the loop)


@dataclass(frozen=True)
class Limits:
    max_connections: int = 1024
    workers: int = 8
    head_timeout: float = 10.0  # connect to the end of the request head
    read_timeout: float = 10.0  # longest pause while a body arrives
    request_timeout: float = 60.0  # connect to the end of the body
    write_timeout: float = 30.0  # to write a response
    linger: float = 2.0  # after an error answered by the loop: its input is read and dropped until a pause this long
    drain_bytes: int = 64 << 20  # ... or until this much (or the rest of its Content-Length) is dropped
    max_head: int = 64 << 10
    max_body: int = 8 << 20
    buffer_bytes: int = 512 << 20  # bodies held at once, all tenants
    tenant_buffer_bytes: int = 64 << 20  # bodies held at once, one tenant
    tenant_inflight: int = 1  # requests of one tenant the workers run at once
    tenant_queue: int = 64  # requests of one tenant admitted at once (reading, queued, running)


def connection_cap(wanted):
    """The most connections this process can hold: wanted, less when the
    file limit leaves less room."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - RESERVED_FDS))


HEAD, BODY, LINGER = "head", "body", "linger"


class _Conn:
    __slots__ = ("sock", "fd", "addr", "state", "buf", "t0", "last", "deadline", "head", "need", "keep",
                 "tenant", "reserved", "admitted", "dropped", "linger_end")

    def __init__(self, sock, addr, now, limits):
        self.sock, self.fd, self.addr = sock, sock.fileno(), addr
        self.state = HEAD
        self.buf = bytearray()
        self.t0 = self.last = now
        self.deadline = now + limits.head_timeout
        self.head = None
        self.need = 0  # body bytes still to come
        self.keep = False  # the body is held for the app (else read and dropped)
        self.tenant = ANONYMOUS
        self.reserved = 0  # body bytes counted against the budgets
        self.admitted = False
        self.dropped = 0  # bytes read and thrown away (dropped bodies, lingering)
        self.linger_end = 0.0  # lingering: closed by then whatever the client does


class FleetServer:
    """Serves a WSGI app on a bound, listening socket (see the module
    docstring). tenant_of(head) -> a tenant name for a known key, or None."""

    multithread = True
    multiprocess = False
    passthrough_errors = False
    ssl_context = None

    def __init__(self, sock, app, tenant_of, limits=Limits()):
        import importlib.metadata

        self.listener = sock
        self.listener.setblocking(False)
        self.server_address = sock.getsockname()[:2]
        self.app = app
        self.tenant_of = tenant_of
        self.limits = limits
        self.max_connections = connection_cap(limits.max_connections)
        self._server_version = "Werkzeug/%s" % importlib.metadata.version("werkzeug")
        self.scheduler = Scheduler(limits.tenant_inflight)
        self.lock = threading.Lock()  # the counts below, shared with the workers
        self.open = 0  # connections open: in the loop, queued and being answered
        self.buffered = 0
        self.tenant_bytes = collections.Counter()
        self.tenant_admitted = collections.Counter()
        self.stats = collections.Counter()  # what happened, for tests and logs
        self.conns = collections.OrderedDict()  # fd -> _Conn, oldest first: the loop's connections
        self.sel = selectors.DefaultSelector()
        self._halt = threading.Event()
        self._stopped = threading.Event()
        self._listening_again = 0.0  # out of descriptors: accept again after this
        self.workers = [threading.Thread(target=self._work, name="graphsignal-server-worker-%d" % i, daemon=True)
                        for i in range(limits.workers)]

    # -- WSGIRequestHandler's view of a server ------------------------------------------------------------------
    def log(self, type, message, *args):
        logger.debug("graphsignal-server: %s: " + message, type, *args)

    # -- the loop ------------------------------------------------------------------------------------------------
    def serve_forever(self):
        for w in self.workers:
            w.start()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        listening = True
        next_check = 0.0
        try:
            while not self._halt.is_set():
                for key, _ in self.sel.select(TICK):
                    if key.data is None:
                        self._accept()
                    else:
                        self._readable(key.data)
                now = time.monotonic()
                if listening and self._listening_again > now:
                    self.sel.unregister(self.listener)
                    listening = False
                elif not listening and self._listening_again <= now:
                    self.sel.register(self.listener, selectors.EVENT_READ, None)
                    listening = True
                if now >= next_check:
                    next_check = now + TICK
                    self._expire(now)
        finally:
            self._close_all()
            self._stopped.set()

    def shutdown(self):
        """Stops the loop and the workers (from another thread); returns
        once the loop has stopped."""
        self._halt.set()
        self._stopped.wait(5)

    def server_close(self):
        self.listener.close()

    def _accept(self):
        for _ in range(64):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.stats["out_of_descriptors"] += 1
                    if not self._evict():
                        self._listening_again = time.monotonic() + TICK
                    return
                continue  # ECONNABORTED and the like: that client is gone
            with self.lock:
                full = self.open >= self.max_connections
            if full and not self._evict():
                self.stats["refused"] += 1
                self._send_quietly(sock, simple_response(503, "too many connections: try again later",
                                                         [("Retry-After", "1")]))
                sock.close()
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock.close()
                continue
            c = _Conn(sock, addr, time.monotonic(), self.limits)
            self.conns[c.fd] = c
            self.sel.register(sock, selectors.EVENT_READ, c)
            with self.lock:
                self.open += 1
            self.stats["accepted"] += 1

    def _evict(self):
        """Closes the oldest connection that has no request admitted (idle,
        sending its head, dropping a body or lingering); False when every
        connection holds an admitted request."""
        for c in self.conns.values():
            if not c.admitted:
                self.stats["evicted"] += 1
                self._close(c)
                return True
        return False

    def _readable(self, c):
        try:
            data = c.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if not data:
            self._close(c)  # the client went away (or finished, when lingering)
            return
        now = time.monotonic()
        c.last = now
        if c.state == LINGER:
            self._drop(c, len(data), now)
            return
        if c.state == HEAD:
            start = max(0, len(c.buf) - 3)
            c.buf += data
            end = c.buf.find(b"\r\n\r\n", start)
            if end < 0:
                if len(c.buf) > self.limits.max_head:
                    self._answer(c, 431, "the request head is over %d KiB" % (self.limits.max_head >> 10))
                return
            if end + 4 > self.limits.max_head:
                self._answer(c, 431, "the request head is over %d KiB" % (self.limits.max_head >> 10))
                return
            rest = bytes(c.buf[end + 4:])
            del c.buf[end + 4:]
            self._head_done(c, now)
            if c.state == LINGER and rest and self.conns.get(c.fd) is c:  # answered at its head, still open:
                self._drop(c, len(rest), now)  # what came with the head counts as drained
            if c.state != BODY:
                return
            data = rest
        if c.keep:
            c.buf += data[:c.need]
        else:
            c.dropped += min(len(data), c.need)
        c.need -= min(len(data), c.need)
        if c.need == 0:
            self._dispatch(c, now)

    def _head_done(self, c, now):
        try:
            head = parse_head(bytes(c.buf))
        except Reject as e:
            self.stats["bad_framing"] += 1
            self._answer(c, e.status, str(e))
            return
        if head.length > self.limits.max_body:
            self._answer(c, 413, "body of %d bytes is over the %d MiB cap" % (head.length, self.limits.max_body >> 20),
                         expect=head.length)
            return
        tenant = self.tenant_of(head)
        c.head, c.need = head, head.length
        c.tenant = tenant if tenant is not None else ANONYMOUS
        c.keep = tenant is not None and head.method == "POST" and head.length > 0
        size = head.length if c.keep else 0
        lim = self.limits
        with self.lock:
            if self.tenant_admitted[c.tenant] >= lim.tenant_queue:
                why = "this key has %d requests in progress" % lim.tenant_queue
            elif size and (self.tenant_bytes[c.tenant] + size > lim.tenant_buffer_bytes
                           or self.buffered + size > lim.buffer_bytes):
                why = "too many upload bytes in progress"
            else:
                why = None
                self.tenant_admitted[c.tenant] += 1
                if size:
                    self.tenant_bytes[c.tenant] += size
                    self.buffered += size
                c.admitted, c.reserved = True, size
        if why is not None:
            self.stats["busy"] += 1
            self._answer(c, 503, why + ": try again later", [("Retry-After", "1")], expect=head.length)
            return
        c.state = BODY
        c.deadline = min(c.t0 + lim.request_timeout, now + lim.read_timeout)
        if c.need and head.expect_continue:
            self._send_quietly(c.sock, b"HTTP/1.1 100 Continue\r\n\r\n")

    def _dispatch(self, c, now):
        self.sel.unregister(c.sock)
        del self.conns[c.fd]
        try:
            c.sock.setblocking(True)
            c.sock.settimeout(self.limits.write_timeout)
        except OSError:
            self._release(c.tenant, c.reserved)
            self._closed_socket(c.sock)
            return
        self.scheduler.put(c.tenant, Job(c.sock, c.addr, bytes(c.buf), c.tenant, c.reserved, now))
        c.buf = bytearray()

    def _expire(self, now):
        lim = self.limits
        for c in [c for c in self.conns.values() if c.deadline <= now]:
            if c.state == BODY:
                c.deadline = min(c.t0 + lim.request_timeout, c.last + lim.read_timeout)
                if c.deadline > now:
                    continue
                self.stats["timed_out"] += 1
                got = c.head.length - c.need
                self._answer(c, 408, "the body did not arrive: %d of %d bytes in %.0f s" % (
                    got, c.head.length, now - c.t0), expect=c.need)
            elif c.state == HEAD:
                self.stats["timed_out"] += 1
                if c.buf:
                    self._answer(c, 408, "the request head did not arrive within %g s" % lim.head_timeout)
                else:
                    self._close(c)  # idle: nothing to answer
            else:
                self._close(c)

    def _answer(self, c, status, message, extra=(), expect=None):
        """The loop's own answer (an error): sent, then the connection's
        input is read and dropped so the client can read it (the module
        docstring's `answers`). expect: the body bytes the client has yet
        to send, None when unknown."""
        self._unadmit(c)
        self._send_quietly(c.sock, simple_response(status, message, extra))
        try:
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(c)
            return
        lim = self.limits
        now = time.monotonic()
        c.state, c.buf = LINGER, bytearray()
        c.need = lim.drain_bytes if expect is None else min(expect, lim.drain_bytes)
        c.linger_end = now + lim.request_timeout
        c.deadline = min(c.linger_end, now + lim.linger)
        if c.need <= 0:  # nothing more is coming: the close sends no reset
            self._close(c)

    def _drop(self, c, n, now):
        """n bytes of a lingering connection's input were read and dropped."""
        c.dropped += n
        c.need -= n
        if c.need <= 0:
            self._close(c)  # all it declared, or the bound: past that a reset is the client's own doing
        else:
            c.deadline = min(c.linger_end, now + self.limits.linger)  # a pause, not the whole body, is bounded

    @staticmethod
    def _send_quietly(sock, data):
        try:
            sock.send(data)  # small, into an empty socket buffer
        except OSError:
            pass

    def _unadmit(self, c):
        if c.admitted:
            c.admitted = False
            self._release(c.tenant, c.reserved)
            c.reserved = 0

    def _release(self, tenant, reserved):
        with self.lock:
            self.tenant_admitted[tenant] -= 1
            if self.tenant_admitted[tenant] <= 0:
                del self.tenant_admitted[tenant]
            if reserved:
                self.tenant_bytes[tenant] -= reserved
                if self.tenant_bytes[tenant] <= 0:
                    del self.tenant_bytes[tenant]
                self.buffered -= reserved

    def _close(self, c):
        self._unadmit(c)
        self.conns.pop(c.fd, None)
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        self._closed_socket(c.sock)

    def _closed_socket(self, sock):
        try:
            sock.close()
        except OSError:
            pass
        with self.lock:
            self.open -= 1

    def _close_all(self):
        for c in list(self.conns.values()):
            self._close(c)
        for job in self.scheduler.close():
            self._release(job.tenant, job.reserved)
            self._closed_socket(job.sock)
        self.sel.close()
        deadline = time.monotonic() + 2.0
        for w in self.workers:
            w.join(max(0.0, deadline - time.monotonic()))

    # -- the workers ---------------------------------------------------------------------------------------------
    def _work(self):
        while True:
            job = self.scheduler.get()
            if job is None:
                return
            try:
                self._serve(job)
            except Exception as e:  # a bug must cost one request, not a worker
                logger.debug("graphsignal-server: request failed: %s: %s", type(e).__name__, e)
            finally:
                self.scheduler.done(job.tenant)
                self._release(job.tenant, job.reserved)
                try:
                    job.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self._closed_socket(job.sock)

    def _serve(self, job):
        waited = time.monotonic() - job.ready
        if waited > self.limits.request_timeout:
            with self.lock:
                self.stats["stale"] += 1
            job.sock.sendall(simple_response(503, "the request waited %.0f s for its turn: try again" % waited,
                                             [("Retry-After", "1")]))
            return
        Handler(job.sock, job.addr, self, job.data).handle_one_request()
