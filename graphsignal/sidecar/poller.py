"""The poller: ring discovery, drain and retirement, on one thread.

Each cycle finds the run's rings in /dev/shm, takes the committed range of
every ring as numpy records and hands them to the aggregator
(graphsignal.sidecar.aggregate, which writes the store), and retires rings whose
writer has closed them (FLAG_CLOSED) or exited. Once a second it tells the
store which processes with series have exited. The store's history and
prerendering are the sidecar clock's (graphsignal.sidecar.clock), not the
poller's.

A writer without a ring runs unprofiled; the poller says so once per
process and writer kind (an `error` entry tagged with its process.pid) when
it can know: the writer left its marker (<ring name>.none, holding the
reason: every name taken, or no room within the /dev/shm budget), or every
name its ring may take (probe.h's GRAPHSIGNAL_RING_NAME_ATTEMPTS) is held
by something that is not a ring of ours (then the marker's name may be
taken too; the poller cannot tell whether that pid is one of the run's
processes, so another user who takes every name of a pid that never ran
makes one such entry, at most MAX_TAKEN in all). A ring smaller than the
GRAPHSIGNAL_RING_CAPACITY its writer asked for (the budget shrank it) is
said once per run.
"""
import ctypes
import logging
import os
import select
import struct
import threading
import time

import numpy as np

from graphsignal import config
from graphsignal.sidecar.aggregate import REJECTED_METRIC, UNNAMED, Aggregator
from graphsignal.report import Reporter
from graphsignal.rings import layout as L
from graphsignal.rings.reader import MARKER, MAX_NAMES, NAME_ATTEMPTS, Ring, RingError, parse_ring_file, read_marker
from graphsignal.rings.stale import pid_alive, remove_own

logger = logging.getLogger("graphsignal")

REFUSED_METRIC = "graphsignal_refused_ring_names"  # names of this run's rings held by something not ours
NO_RING_METRIC = "graphsignal_writers_without_ring"  # writers that run unprofiled: no ring could be made

RANK_ENV = (
    ("rank", ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")),
    ("local_rank", ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")),
    ("world_size", ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
)

def rank_tags(environ):
    tags = {}
    for tag, names in RANK_ENV:
        for n in names:
            v = environ.get(n)
            if v is not None and v.strip().lstrip("-").isdigit():
                tags[tag] = v.strip()
                break
    return tags


def process_environ(pid, proc_root="/proc"):
    try:
        with open(os.path.join(proc_root, str(pid), "environ"), "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


# -- per-ring state -------------------------------------------------------------
def requested_capacity(environ):
    """The ring capacity GRAPHSIGNAL_RING_CAPACITY asks for in a writer's
    environment, rounded up to a power of two as the header does; None when
    unset or not a capacity the header takes."""
    raw = environ.get(config.RING_CAPACITY_ENV, "")
    if not (raw.isascii() and raw.isdigit()) or not L.MIN_CAPACITY <= int(raw) <= L.MAX_CAPACITY:
        return None
    return 1 << (int(raw) - 1).bit_length()


class RingState:
    def __init__(self, ring, pid, kind_name, proc_root="/proc"):
        self.ring = ring
        self.pid = pid
        self.kind_name = kind_name
        self.base_tags = {"process.pid": str(pid)}
        environ = process_environ(pid, proc_root)
        self.base_tags.update(rank_tags(environ))
        # the writer's own, or (gone already) the run's, which it inherited
        self.requested_capacity = requested_capacity(environ or os.environ)
        self.devices = {}  # ordinal -> uuid string
        self.instruments = {}  # name_id -> (type, name, tags)
        self.resolved = {}  # name_id -> (type, name, tags with the ring's, their store key) (Aggregator._resolved)
        self.meta = {}
        self.gone_since = None
        self.dropped_seen = 0  # ring.dropped already added to Poller.dropped
        self.rejected = {}  # reason -> records (see REJECT_REASONS)
        self.said = set()  # reasons logged for this ring (once each)
        # records per second (for the adaptive interval); a new ring is taken
        # to be fast until it shows otherwise: a writer that starts at full
        # speed fills a small ring within a default interval
        self.rate = ring.capacity / (4 * 0.005)

    def device_tags(self, ordinal):
        tags = dict(self.base_tags)
        uuid = self.devices.get(ordinal)
        tags["device.cuda_index"] = str(ordinal)  # the CUDA ordinal in this process (NVML's device.index differs)
        if uuid:
            tags["device.uuid"] = uuid
        return tags

    def name(self, name_id):
        n = self.ring.names.get(name_id)
        return n if n is not None else UNNAMED


class Poller:
    BATCH = 1 << 20  # records per drain (the scratch buffer is reused)
    MIN_INTERVAL = 0.002  # seconds: the shortest sleep while a ring fills fast
    STOP_WAIT = 15.0  # seconds stop() waits for the thread

    def __init__(self, store, run_id, shm_dir=L.SHM_DIR, interval=0.05, proc_root="/proc",
                 retire_interval=1.0, gone_grace=1.0, on_error=None):
        self.store = store
        self.prefix = config.ring_prefix(run_id, L.RING_PREFIX)  # the header's, through the helper
        self.shm_dir = shm_dir
        self.interval = interval
        self.proc_root = proc_root
        self.retire_interval = retire_interval
        self.gone_grace = gone_grace
        self.on_error = on_error
        self.rings = {}  # file name -> RingState
        self.bad = set()  # file names refused or dropped (logged once), and markers read
        self.taken = {}  # (pid, kind) -> {slot: why} of the names its ring may take held by something not ours
        self.refused = 0  # names refused (REFUSED_METRIC)
        self._refused_writers = 0  # writers whose refusal was said
        self.without_ring = 0  # writers reported without a ring (NO_RING_METRIC)
        self.records_total = 0
        self.dropped = 0  # records the rings could not hold, all rings of the run (retired ones too)
        self._loss_said = None  # (monotonic s, dropped) when the loss was last said
        self.cycles = 0
        self._halt = threading.Event()
        self._wake = None  # (r, w) pipe: stop() ends the thread's inotify wait at once
        self._thread = None
        self._last_retire = None
        self._last_cycle = None
        self.reporter = Reporter(on_error=on_error)
        self.aggregator = Aggregator(store, self.reporter)
        self._scratch = None
        self.next_sleep = interval

    # -- discovery -------------------------------------------------------------
    LOSS_SAY_EVERY = 60.0  # seconds: a loss that keeps growing is said again at most this often
    LOSS_ENTRY = ("records were dropped: a writer outran the drain and its ring was full, so the numbers are "
                  "incomplete (counted per writer in graphsignal_dropped_records)")
    MAX_TAKEN = 4096  # (pid, kind) pairs with taken names followed; beyond, each name is only refused
    MAX_REFUSED_SAID = 8  # writers whose refused names get a line each; the rest share one
    MAX_NO_RING_SAID = 16  # writers without a ring that get an error entry each; the rest share one line

    def discover(self):
        try:
            names = os.listdir(self.shm_dir)
        except OSError as e:
            self._warn_once("listdir", "cannot list %s: %s" % (self.shm_dir, e))
            return
        for fname in names:
            if fname in self.rings or fname in self.bad:
                continue
            parsed = parse_ring_file(fname, self.prefix)
            if parsed is None:
                continue
            pid, kind_name, slot = parsed
            path = os.path.join(self.shm_dir, fname)
            if slot == MARKER:
                self._read_marker(fname, path, pid, kind_name)
                continue
            try:
                ring = Ring(path)
            except (RingError, OSError, ValueError) as e:
                self._refused(fname, pid, kind_name, slot, e)
                continue
            st = self.rings[fname] = RingState(ring, pid, kind_name, self.proc_root)
            self._check_capacity(st)

    def _refused(self, fname, pid, kind_name, slot, why):
        """A name of this run held by something that is not a ring of ours:
        one line for the first such name of a writer (pid, kind), for the
        first MAX_REFUSED_SAID writers (another user can make names by the
        thousand: they must not flood the workload's console or push real
        errors out of the list), then one line for all the rest; every
        one counted. When all the names a writer's ring may take are held,
        that writer has no ring."""
        self.bad.add(fname)
        self.refused += 1
        self.store.set_counter(REFUSED_METRIC, {}, self.refused)
        key = ("refused", pid, kind_name)
        if not self.reporter.said(key):
            if self._refused_writers < self.MAX_REFUSED_SAID:
                self._refused_writers += 1
                self._warn_once(key, "skipping ring %s" % why)
            else:
                self._warn_once("refused_more", "more names in %s that this run's rings may take are held by "
                                "something that is not a ring of this uid; skipping them without a word (counted "
                                "in %s)" % (self.shm_dir, REFUSED_METRIC))
        if slot == MARKER:
            return
        taken = self.taken.get((pid, kind_name))
        if taken is None:
            if len(self.taken) >= self.MAX_TAKEN:
                return
            taken = self.taken[(pid, kind_name)] = {}
        taken[slot] = why
        if all(i in taken for i in range(NAME_ATTEMPTS)) and self._could_be_ours(pid):
            self._no_ring(pid, kind_name, "all %d names its ring may take are held by something that is not a ring "
                          "of this uid (%s)" % (NAME_ATTEMPTS, "; ".join(str(taken[i]) for i in range(NAME_ATTEMPTS))))

    def _read_marker(self, fname, path, pid, kind_name):
        """The marker a writer left without a ring (<ring name>.none)."""
        try:
            why = read_marker(path)
        except (RingError, OSError) as e:
            self._refused(fname, pid, kind_name, MARKER, e)
            return
        self.bad.add(fname)
        self._no_ring(pid, kind_name, why or "no reason given")

    def _could_be_ours(self, pid):
        """False when pid is a live process of another uid: only a process
        writing as our uid could have made a ring we would read, so names
        all held by others mean nothing about such a one. A pid that has
        exited cannot be told apart from one another user made up; those
        reports are bounded by MAX_NO_RING_SAID."""
        try:
            with open(os.path.join(self.proc_root, str(pid), "status"), "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        uids = line.split()[1:]
                        return str(os.geteuid()).encode() in (uids[1:2] + uids[3:4])  # effective, filesystem
        except FileNotFoundError:
            return True
        except (OSError, IndexError):
            pass
        return False

    def _no_ring(self, pid, kind_name, why):
        """Says once per writer (pid, kind) that it runs unprofiled: an error
        entry tagged with its process.pid and writer kind, for the first
        MAX_NO_RING_SAID writers, then one line for all the rest; every one
        counted."""
        if any(st.pid == pid and st.kind_name == kind_name for st in self.rings.values()):
            return  # another copy of the header in that process did get a ring
        if not self.reporter.first(("no_ring", pid, kind_name)):
            return
        self.without_ring += 1
        self.store.set_counter(NO_RING_METRIC, {}, self.without_ring)
        if self.without_ring > self.MAX_NO_RING_SAID:
            self._warn_once("no_ring_more", "more writers could not create their rings and run unprofiled (counted "
                            "in %s)" % NO_RING_METRIC)
            return
        msg = "process %d could not create its %s ring: %s; that writer runs unprofiled" % (pid, kind_name, why)
        logger.warning("graphsignal: %s", msg)
        self.store.add_error("error", msg, tags={"process.pid": str(pid), "writer": kind_name})

    def _check_capacity(self, st):
        """Says once per run when the /dev/shm budget made a ring smaller
        than the GRAPHSIGNAL_RING_CAPACITY its writer asked for."""
        want = st.requested_capacity
        if want is not None and st.ring.capacity < want:
            self._warn_once("capacity_budget", "ring %s holds %d records, not the %d %s asks for: rings leave half of "
                            "%s free for the workload; records that do not fit are counted in "
                            "graphsignal_dropped_records" % (st.ring.name, st.ring.capacity, want,
                                                             config.RING_CAPACITY_ENV, self.shm_dir))

    def _warn_once(self, key, msg):
        self.reporter.once(key, msg)

    # -- one cycle -------------------------------------------------------------
    def poll_once(self, final=False):
        now = time.monotonic()
        self.discover()
        dt = (now - self._last_cycle) if self._last_cycle is not None else self.interval
        self._last_cycle = now
        sleep = self.interval
        for fname, st in list(self.rings.items()):
            try:
                n = self._drain_ring(st)
                self._publish_ring_counters(st)
                self._maybe_retire(fname, st, final)
            except RingError as e:
                self._drop(fname, st, str(e))
                continue
            # records per second, remembered with a half-life of 0.25 s: one
            # cycle that finds nothing (the writer was descheduled) must not
            # put the poller back to sleep for a whole interval
            st.rate = max(n / dt if dt > 0 else 0.0, st.rate * 0.5 ** min(dt / 0.25, 240.0))
            if st.rate > 0:
                # poll again well before the ring can be half full at this rate
                sleep = min(sleep, 0.25 * st.ring.capacity / st.rate)
        self.next_sleep = max(self.MIN_INTERVAL, sleep)
        self._say_loss(now, final)
        self.cycles += 1
        if self._last_retire is None or now - self._last_retire >= self.retire_interval:
            self._last_retire = now
            self._retire_exited()

    def _say_loss(self, now, final=False):
        """Says records lost to full rings where people look: a line (with
        the count) the first time, then at most once every LOSS_SAY_EVERY
        seconds while the count grows, and at the final drain if it grew
        since; each time the same `errors` entry counts once more. A count
        in a metric alone went unseen (issue 36)."""
        said = self._loss_said
        if self.dropped == (said[1] if said else 0):
            return
        if said is not None and not final and now - said[0] < self.LOSS_SAY_EVERY:
            return
        self._loss_said = (now, self.dropped)
        self.reporter.say("%d records dropped so far: a writer outran the drain (its ring was full); the numbers "
                          "are incomplete (graphsignal_dropped_records)" % self.dropped,
                          entry_message=self.LOSS_ENTRY)

    def _retire_exited(self):
        """Tells the store which processes with series (from any source)
        have exited, so their series fold instead of crowding live ones."""
        with_rings = {str(st.pid) for st in self.rings.values()}
        for pid in self.store.pids():
            if pid not in with_rings and pid.isdigit() and not pid_alive(int(pid), self.proc_root):
                self.store.process_exited(pid)

    def _drop(self, fname, st, why):
        """Stops reading a ring that no longer makes sense (one line); what
        it delivered so far stays. The file is left for cleanup_all."""
        self.bad.add(fname)
        self.rings.pop(fname, None)
        self._warn_once(("dropped", fname), why)
        try:
            st.ring.close()
        except Exception:
            pass

    def _drain_ring(self, st):
        """Drains in bounded batches so one busy ring cannot starve the rest
        and batch memory stays small; returns the records drained."""
        if self._scratch is None:
            self._scratch = np.empty(self.BATCH * (L.RECORD_SIZE // 8), dtype=np.uint64)
        total = 0
        for _ in range(64):
            recs = st.ring.drain(max_records=self.BATCH, scratch=self._scratch)
            if recs.size == 0:
                break
            total += int(recs.size)
            self.records_total += int(recs.size)
            try:
                self.aggregator.aggregate(st, recs)
            except Exception as e:  # hostile records must cost this batch, not the ring or the poller
                self._warn_once(("aggregate", st.ring.name), "ring %s: a batch of %d records could not be "
                                "aggregated (%s: %s); it is lost" % (st.ring.name, recs.size, type(e).__name__, e))
            if recs.size < self.BATCH:
                break
        return total

    def _publish_ring_counters(self, st):
        tags = dict(st.base_tags, writer=st.kind_name)
        dropped = st.ring.dropped
        if dropped > st.dropped_seen:
            self.dropped += dropped - st.dropped_seen
            st.dropped_seen = dropped
        self.store.set_counter("graphsignal_dropped_records", tags, dropped)
        if st.ring.strings_dropped or st.ring.skipped:
            self.store.set_counter("graphsignal_dropped_names", tags, st.ring.strings_dropped)
            self.store.set_counter("graphsignal_skipped_slots", tags, st.ring.skipped)
        if st.ring.names_dropped:
            self.aggregator.reject(st, "names_over_cap", st.ring.names_dropped - st.rejected.get("names_over_cap", 0),
                                   "more than %d names or %d name bytes" % (MAX_NAMES, st.ring._strings_size))
        for reason, n in st.rejected.items():
            self.store.set_counter(REJECTED_METRIC, dict(tags, reason=reason), n)

    def _maybe_retire(self, fname, st, final):
        """Retires a ring once its writer is done with it: the writer closed
        it (FLAG_CLOSED: it will not write again, though its process may
        run on) or its process exited. What it committed is drained first."""
        alive = pid_alive(st.pid, self.proc_root)
        closed = st.ring.closed
        if alive and not closed and not final:
            st.gone_since = None
            return
        if st.ring.pending() > 0 and not final:
            # Give the writer's last commits a moment, then take what is
            # committed and let go of the rest.
            if st.gone_since is None:
                st.gone_since = time.monotonic()
            if time.monotonic() - st.gone_since < self.gone_grace:
                return
        if final and alive and not closed:
            return
        self._drain_ring(st)
        self._publish_ring_counters(st)
        st.ring.unlink()
        st.ring.close()
        del self.rings[fname]
        if not alive and not any(other.pid == st.pid for other in self.rings.values()):
            self.store.process_exited(st.pid)

    # -- thread ----------------------------------------------------------------
    def start(self):
        try:
            self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            self._wake = None
        self._thread = threading.Thread(target=self._run, name="graphsignal-poller", daemon=True)
        self._thread.start()

    def _run(self):
        watch = _DirWatch.open(self.shm_dir, self._wake[0] if self._wake is not None else None,
                               os.fsencode(self.prefix))
        try:
            while not self._halt.is_set():
                t0 = time.monotonic()
                # No serialization here, not even for readers waiting on /signals: the
                # drain's time is the workload's margin against a full ring, so the
                # JSON is the clock's (sidecar.clock) and the readers' own work
                try:
                    self.poll_once()
                except Exception as e:  # keep polling: one bad cycle must not end collection
                    self._warn_once(("cycle", type(e).__name__, str(e)),
                                    "poller cycle failed: %s: %s" % (type(e).__name__, e))
                delay = max(0.0, self.next_sleep - (time.monotonic() - t0))
                if watch is not None and not self.rings:
                    # nothing to drain, and inotify wakes us when a ring appears:
                    # sleep until the next retirement check (an idle sidecar's CPU
                    # is mostly these wakeups, 20 a second)
                    delay = max(delay, self.retire_interval - (time.monotonic() - (self._last_retire or t0)))
                # a ring that appears is drained at once: a new writer at full speed
                # fills a small ring in less than an interval
                if watch is None:
                    self._halt.wait(delay)
                elif watch.wait(delay):
                    # at most one cycle per MIN_INTERVAL, however busy the directory is
                    self._halt.wait(max(0.0, self.MIN_INTERVAL - (time.monotonic() - t0)))
        finally:
            if watch is not None:
                watch.close()

    def stop(self, final=True):
        """Stops the thread; with final, drains everything once more and
        retires the rings of writers that are gone."""
        self._halt.set()
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"x")  # out of a long inotify wait now
            except OSError:
                pass
        if self._thread is not None:
            # at SCHED_IDLE (sidecar.priority) on a host busy to the last core, the thread may
            # wait a while for the moment it needs to see the halt
            self._thread.join(self.STOP_WAIT)
            if self._thread.is_alive():
                # draining or closing the rings under it would race it: leave them, say so
                self._warn_once(("stop",), "the poller did not stop within %g s; the records still in the "
                                "rings are not drained" % self.STOP_WAIT)
                return
        if self._wake is not None:
            for fd in self._wake:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._wake = None
        if final:
            try:
                self.poll_once(final=True)
            except Exception as e:
                self._warn_once(("final",), "final drain failed: %s: %s" % (type(e).__name__, e))
        for st in self.rings.values():
            st.ring.close()

    def cleanup_all(self):
        """Unlinks every ring and marker of this run (the sidecar is
        exiting): our own files only, never a name another user took. A
        thread that did not stop keeps its mappings (unmapped under it, a
        drain would crash)."""
        running = self._thread is not None and self._thread.is_alive()
        for fname, st in list(self.rings.items()):
            st.ring.unlink()
            if not running:
                st.ring.close()
                del self.rings[fname]
        try:
            for fname in os.listdir(self.shm_dir):
                if fname.startswith(self.prefix):
                    remove_own(os.path.join(self.shm_dir, fname))  # never another user's file
        except OSError:
            pass


class _DirWatch:
    """inotify on the ring directory: wait() returns early when a file of
    this run (a name that starts with `prefix`) is created or moved in.
    Other files (other runs' rings, a DataLoader's shared memory) do not
    wake it. None where inotify is not available (then the poller just
    sleeps)."""

    IN_MOVED_TO, IN_CREATE, IN_Q_OVERFLOW = 0x80, 0x100, 0x4000
    _EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name

    def __init__(self, fd, wake_fd=None, prefix=None):
        self.fd = fd
        self.wake_fd = wake_fd  # readable: the poller is stopping
        self.prefix = prefix  # bytes, or None: any file wakes it

    @classmethod
    def open(cls, path, wake_fd=None, prefix=None):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(path), cls.IN_CREATE | cls.IN_MOVED_TO) < 0:
                os.close(fd)
                return None
            return cls(fd, wake_fd, prefix)
        except (OSError, AttributeError):
            return None

    def _ours(self, buf):
        """Whether a read of events names a file of this run (or lost some:
        the queue overflowed)."""
        off, ev = 0, self._EVENT
        while off + ev.size <= len(buf):
            _, mask, _, length = ev.unpack_from(buf, off)
            name = bytes(buf[off + ev.size:off + ev.size + length]).rstrip(b"\0")
            off += ev.size + length
            if mask & self.IN_Q_OVERFLOW or self.prefix is None or name.startswith(self.prefix):
                return True
        return False

    def wait(self, timeout):
        """True when a file of this run appeared (or stop() was called)
        within timeout seconds."""
        deadline = time.monotonic() + timeout
        fds = [self.fd] if self.wake_fd is None else [self.fd, self.wake_fd]
        try:
            while True:
                ready = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))[0]
                if not ready:
                    return False
                if self.wake_fd in ready:
                    return True
                ours = False
                try:
                    while True:
                        buf = os.read(self.fd, 65536)
                        if not buf:
                            break
                        ours = ours or self._ours(buf)
                except BlockingIOError:
                    pass
                if ours:
                    return True
                if time.monotonic() >= deadline:
                    return False
        except OSError:
            return False

    def close(self):
        try:
            os.close(self.fd)
        except OSError:
            pass
