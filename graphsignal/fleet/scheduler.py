"""graphsignal-server's per-tenant queues: the complete requests the
connection front (graphsignal.fleet.serving) admitted wait in their
tenant's queue (a tenant is an API key; requests without a known key
share one), and the worker threads take the tenants in turn, at most
`inflight` requests of one tenant at a time. So one tenant's flood of
big uploads waits behind itself, never in front of another tenant's
small upload. The budgets that admit a request are the front's."""
import collections
import threading


class Job:
    __slots__ = ("sock", "addr", "data", "tenant", "reserved", "ready")

    def __init__(self, sock, addr, data, tenant, reserved, ready):
        self.sock, self.addr, self.data = sock, addr, data
        self.tenant, self.reserved, self.ready = tenant, reserved, ready


class Scheduler:
    """Per-tenant FIFO queues, served round-robin across tenants; at most
    `inflight` jobs of one tenant are handed out at a time."""

    def __init__(self, inflight):
        self.inflight = inflight
        self.cv = threading.Condition()
        self.queues = {}  # tenant -> deque of jobs
        self.running = collections.Counter()
        self.ready = collections.deque()  # tenants with a queued job and a free slot, in turn
        self.in_ready = set()
        self.closed = False

    def _offer(self, tenant):
        if tenant not in self.in_ready and self.queues.get(tenant) and self.running[tenant] < self.inflight:
            self.ready.append(tenant)
            self.in_ready.add(tenant)
            self.cv.notify()

    def put(self, tenant, job):
        with self.cv:
            self.queues.setdefault(tenant, collections.deque()).append(job)
            self._offer(tenant)

    def get(self):
        """The next job (blocks), or None once closed."""
        with self.cv:
            while not self.ready and not self.closed:
                self.cv.wait()
            if self.closed:
                return None
            tenant = self.ready.popleft()
            self.in_ready.discard(tenant)
            q = self.queues[tenant]
            job = q.popleft()
            if not q:
                del self.queues[tenant]
            self.running[tenant] += 1
            self._offer(tenant)  # its next job, behind the other tenants' turns
            return job

    def done(self, tenant):
        with self.cv:
            self.running[tenant] -= 1
            if self.running[tenant] <= 0:
                del self.running[tenant]
            self._offer(tenant)

    def close(self):
        """Stops handing out jobs; returns the jobs still queued."""
        with self.cv:
            self.closed = True
            left = [j for q in self.queues.values() for j in q]
            self.queues.clear()
            self.cv.notify_all()
            return left
