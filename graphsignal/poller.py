"""The poller: drain -> aggregate -> publish, on one thread.

Each cycle takes the committed range of every ring of the run as numpy
records, splits it by record type and aggregates with vectorized numpy
(bincount over dense keys, reduceat over sorted keys) into the metric
store. No Python code runs per record; Python loops run per distinct
(name, device) in a batch. Once a second it tells the store which
processes with series have exited. The store's history and prerendering
are the sidecar clock's (graphsignal.sidecar.clock), not the poller's.
"""
import ctypes
import logging
import os
import select
import threading
import time

import numpy as np

from graphsignal import cuda_names, histo
from graphsignal.report import Reporter
from graphsignal.rings import layout as L
from graphsignal.rings.reader import MAX_NAME_ID, MAX_NAMES, Ring, RingError, parse_ring_name

logger = logging.getLogger("graphsignal")

RANK_ENV = (
    ("rank", ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")),
    ("local_rank", ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")),
    ("world_size", ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
)

# Calls counted by the CUPTI library's API callbacks, aggregated per thread
# (probe.h GRAPHSIGNAL_REC_*_SAMPLED, _SYNC_AGG; tests/test_cupti_translation.py
# holds these to the header). A record carries its number of calls; copy and
# memset times are estimates from sampled activity, tagged duration=sampled.
REC_MEMCPY_SAMPLED = getattr(L, "REC_MEMCPY_SAMPLED", 14)
REC_MEMSET_SAMPLED = getattr(L, "REC_MEMSET_SAMPLED", 15)
REC_SYNC_AGG = getattr(L, "REC_SYNC_AGG", 16)
SAMPLED_TAGS = {"duration": "sampled"}

CUDA_PROFILES = ("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
                 "cuda_memset_nanoseconds", "cuda_sync_nanoseconds")

_EXACT_F64 = 1 << 53


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


def pid_alive(pid, proc_root="/proc"):
    """False for a pid that is gone or a zombie (exited, not yet reaped)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # state follows the ")" that ends the command name
    i = stat.rfind(b")")
    return not (i >= 0 and stat[i + 2:i + 3] in (b"Z", b"X"))


# -- vectorized grouping ------------------------------------------------------
def _exact_bincount(idx, values, n):
    """Per-bin sums of non-negative integer values, exact: a uint64 array
    while every sum provably fits in 53 bits (the common case), else an
    object array of Python ints (sums beyond 2**64 do not wrap)."""
    v = values.astype(np.uint64, copy=False)
    if v.size == 0:
        return np.zeros(n, dtype=np.uint64)
    if int(v.max()) * v.size < _EXACT_F64:
        return np.bincount(idx, weights=v.astype(np.float64), minlength=n).astype(np.uint64)
    lo_t = np.zeros(n, dtype=np.uint64)
    hi_t = np.zeros(n, dtype=np.uint64)
    step = 1 << 20  # chunk so each float64 partial stays exact (2**20 * 2**32 < 2**53)
    for s in range(0, v.size, step):
        vi, ii = v[s:s + step], idx[s:s + step]
        # each chunk's partials are below 2**52, so up to 4096 chunks add up in uint64 exactly
        lo_t += np.bincount(ii, weights=(vi & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=n).astype(np.uint64)
        hi_t += np.bincount(ii, weights=(vi >> np.uint64(32)).astype(np.float64), minlength=n).astype(np.uint64)
    out = np.empty(n, dtype=object)
    out[:] = [(h << 32) + lo for h, lo in zip(hi_t.tolist(), lo_t.tolist())]
    return out


def group(keys):
    """(unique keys, inverse index, counts) for non-negative int64 keys,
    by bincount when the key range is small, else by sort."""
    kmax = int(keys.max())
    if kmax < (1 << 22):
        counts = np.bincount(keys, minlength=kmax + 1)
        uniq = np.flatnonzero(counts)
        if uniq.size == kmax + 1:
            return uniq, keys, counts
        remap = np.zeros(kmax + 1, dtype=np.int64)
        remap[uniq] = np.arange(uniq.size)
        return uniq, remap[keys], counts[uniq]
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, inv.reshape(-1), np.bincount(inv.reshape(-1))


def group_sums(keys, *value_arrays):
    """(unique keys, counts, [sums per value array])."""
    uniq, inv, counts = group(keys)
    return uniq, counts, [_exact_bincount(inv, v, uniq.size) for v in value_arrays]


def _compose(a, b):
    """Dense int64 key from two non-negative integer columns; returns
    (key, width of b) so a = key // width, b = key % width."""
    width = int(b.max()) + 1 if b.size else 1
    if width == 1:  # the common case (one device): no arithmetic
        return a.astype(np.int64), 1
    return a.astype(np.int64) * width + b.astype(np.int64), width


class Batch:
    """The records of one type in a drained batch. Fields are taken on
    demand, each as one contiguous copy of just that field, instead of
    copying whole records per type."""

    __slots__ = ("recs", "mask", "_cache", "size")

    def __init__(self, recs, mask=None):
        self.recs, self.mask, self._cache = recs, mask, {}
        self.size = int(recs.size if mask is None else np.count_nonzero(mask))

    def __getitem__(self, field):
        v = self._cache.get(field)
        if v is None:
            v = self.recs[field] if self.mask is None else self.recs[field][self.mask]
            self._cache[field] = v
        return v


# -- per-ring state -------------------------------------------------------------
UNNAMED = "(unnamed)"  # the frame of records whose name never arrived (one frame, not one per id)
MAX_DEVICES = 128  # device ordinals per process (GPUs, MIG instances); a higher one is a bad record
MAX_KIND = 64  # CUPTI copy/memory/sync kinds are small enums

REJECT_REASONS = {
    "unknown_name": "records naming an id that was never sent (counted in the %s frame)" % UNNAMED,
    "unknown_instrument": "records for an instrument id that was never registered",
    "bad_type": "records of a type this sidecar does not know",
    "bad_field": "records with a field out of range",
    "names_over_cap": "names beyond the per-ring caps, or pointing outside the string area",
}
REJECTED_METRIC = "graphsignal_rejected_records"


class RingState:
    def __init__(self, ring, pid, kind_name, proc_root="/proc"):
        self.ring = ring
        self.pid = pid
        self.kind_name = kind_name
        self.base_tags = {"process.pid": str(pid)}
        self.base_tags.update(rank_tags(process_environ(pid, proc_root)))
        self.devices = {}  # ordinal -> uuid string
        self.instruments = {}  # name_id -> (type, name, tags)
        self.meta = {}
        self.gone_since = None
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


def parse_instrument(text):
    """'type\\x1fname[\\x1fkey\\x1evalue]...' -> (type, name, tags) or None."""
    parts = text.split("\x1f")
    if len(parts) < 2 or parts[0] not in ("gauge", "counter", "histogram", "profile") or not parts[1]:
        return None
    tags = {}
    for kv in parts[2:]:
        k, sep, v = kv.partition("\x1e")
        if sep and k:
            tags[k] = v
    return parts[0], parts[1], tags


class Poller:
    BATCH = 1 << 20  # records per drain (the scratch buffer is reused)
    MIN_INTERVAL = 0.002  # seconds: the shortest sleep while a ring fills fast

    def __init__(self, store, run_id, shm_dir="/dev/shm", interval=0.05, proc_root="/proc",
                 retire_interval=1.0, gone_grace=1.0, on_error=None):
        self.store = store
        self.prefix = "gs-%s-" % run_id
        self.shm_dir = shm_dir
        self.interval = interval
        self.proc_root = proc_root
        self.retire_interval = retire_interval
        self.gone_grace = gone_grace
        self.on_error = on_error
        self.rings = {}  # file name -> RingState
        self.bad = set()  # file names refused or dropped (logged once)
        self.records_total = 0
        self.cycles = 0
        self._halt = threading.Event()
        self._thread = None
        self._last_retire = None
        self._last_cycle = None
        self.reporter = Reporter(on_error=on_error)
        self._scratch = None
        self.next_sleep = interval

    # -- discovery -------------------------------------------------------------
    def discover(self):
        try:
            names = os.listdir(self.shm_dir)
        except OSError as e:
            self._warn_once("listdir", "cannot list %s: %s" % (self.shm_dir, e))
            return
        for fname in names:
            if fname in self.rings or fname in self.bad:
                continue
            parsed = parse_ring_name(fname, self.prefix)
            if parsed is None:
                continue
            pid, kind_name = parsed
            path = os.path.join(self.shm_dir, fname)
            try:
                ring = Ring(path)
            except (RingError, OSError, ValueError) as e:
                self.bad.add(fname)
                self._warn_once(fname, "skipping ring %s" % e)
                continue
            self.rings[fname] = RingState(ring, pid, kind_name, self.proc_root)

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
        self.cycles += 1
        if self._last_retire is None or now - self._last_retire >= self.retire_interval:
            self._last_retire = now
            self._retire_exited()

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
                self.aggregate(st, recs)
            except Exception as e:  # hostile records must cost this batch, not the ring or the poller
                self._warn_once(("aggregate", st.ring.name), "ring %s: a batch of %d records could not be "
                                "aggregated (%s: %s); it is lost" % (st.ring.name, recs.size, type(e).__name__, e))
            if recs.size < self.BATCH:
                break
        return total

    def _reject(self, st, reason, n, example):
        if n <= 0:
            return
        st.rejected[reason] = st.rejected.get(reason, 0) + int(n)
        if reason not in st.said:
            st.said.add(reason)
            self.reporter.say("ring %s: %s (%s); counted in %s{reason=%s}, not logged again" % (
                st.ring.name, example, REJECT_REASONS[reason], REJECTED_METRIC, reason))

    def _publish_ring_counters(self, st):
        tags = dict(st.base_tags, writer=st.kind_name)
        self.store.set_counter("graphsignal_dropped_records", tags, st.ring.dropped)
        if st.ring.strings_dropped or st.ring.skipped:
            self.store.set_counter("graphsignal_dropped_names", tags, st.ring.strings_dropped)
            self.store.set_counter("graphsignal_skipped_slots", tags, st.ring.skipped)
        if st.ring.names_dropped:
            self._reject(st, "names_over_cap", st.ring.names_dropped - st.rejected.get("names_over_cap", 0),
                         "more than %d names or %d name bytes" % (MAX_NAMES, st.ring._strings_size))
        for reason, n in st.rejected.items():
            self.store.set_counter(REJECTED_METRIC, dict(tags, reason=reason), n)

    def _maybe_retire(self, fname, st, final):
        if pid_alive(st.pid, self.proc_root) and not final:
            st.gone_since = None
            return
        if st.ring.pending() > 0 and not final:
            # Give a dead writer's last commits a moment, then take what is
            # committed and let go of the rest.
            if st.gone_since is None:
                st.gone_since = time.monotonic()
            if time.monotonic() - st.gone_since < self.gone_grace:
                return
        if final and pid_alive(st.pid, self.proc_root):
            return
        self._drain_ring(st)
        self._publish_ring_counters(st)
        st.ring.unlink()
        st.ring.close()
        del self.rings[fname]
        if not any(other.pid == st.pid for other in self.rings.values()):
            self.store.process_exited(st.pid)

    # -- aggregation -----------------------------------------------------------
    def aggregate(self, st, recs):
        types = recs["type"]
        tmin, tmax = int(types.min()), int(types.max())
        if tmin == tmax:
            groups = [(tmin, Batch(recs))]
        else:
            present = np.flatnonzero(np.bincount(types, minlength=256))
            # names first, so records in the same batch can use them
            order = sorted(present.tolist(), key=lambda t: (t != L.REC_NAME, t != L.REC_DEVICE, t))
            groups = [(t, Batch(recs, types == t)) for t in order]
        ts = self.store.clock()
        for t, g in groups:
            handler = self._handlers.get(t)
            if handler is not None:
                handler(self, st, g, ts)
            elif t != L.REC_TEST:
                self._reject(st, "bad_type", g.size, "record type %d" % t)

    # Records are checked per distinct key after grouping, never per record:
    # a hostile ring costs what its distinct keys cost, a normal one nothing.

    def _frame_name(self, st, nid, n, bad):
        """The name of id nid for n records, or UNNAMED (counted) when it
        was never sent."""
        name = st.ring.names.get(nid)
        if name is None:
            self._count(bad, "unknown_name", n, "name id %d" % nid)
            return UNNAMED
        return name

    def _instrument(self, st, nid, want):
        """(name, tags) of instrument nid if it is a `want`, else None."""
        inst = st.instruments.get(nid)
        if inst is None or inst[0] != want:
            return None
        return inst[1], dict(inst[2], **st.base_tags)

    def _count(self, bad, reason, n, example):
        c, ex = bad.get(reason, (0, example))
        bad[reason] = (c + n, ex)

    def _flush_bad(self, st, bad):
        for reason, (n, example) in bad.items():
            self._reject(st, reason, n, example)

    def _on_name(self, st, g, ts):
        for nid, sub, text in st.ring.learn_names(g.recs if g.mask is None else g.recs[g.mask]):
            if sub == L.NAME_INSTRUMENT:
                inst = parse_instrument(text)
                if inst is not None:
                    st.instruments[nid] = inst
                else:
                    st.instruments.pop(nid, None)
            else:
                st.instruments.pop(nid, None)

    def _on_device(self, st, g, ts):
        bad = {}
        for dev, nid in zip(g["device"].tolist(), g["name_id"].tolist()):
            if dev >= MAX_DEVICES:
                self._count(bad, "bad_field", 1, "device %d" % dev)
                continue
            st.devices[dev] = st.ring.names.get(nid)
            if st.ring.kind == L.KIND_CUPTI:
                # the device in use: its profiles are measured, even if empty
                for name in CUDA_PROFILES:
                    self.store.ensure_profile(name, st.device_tags(dev), ts)
        self._flush_bad(st, bad)

    def _on_meta(self, st, g, ts):
        for sub, value in zip(g["sub"].tolist(), g["value"].tolist()):
            st.meta[sub] = value
            if sub == L.META_CUDA_GRAPH_TRACE_MODE:
                self.store.set_gauge("cuda_graph_trace_mode", st.base_tags, int(value), ts)

    def _profile_by_name_device(self, metric, st, g, ts):
        key, width = _compose(g["name_id"], g["device"])
        uniq, counts, (sums,) = group_sums(key, g["value"])
        by_tags = {}
        bad = {}
        for k, c, s in zip(uniq.tolist(), counts.tolist(), sums.tolist()):
            nid, dev = divmod(k, width)
            if dev >= MAX_DEVICES:
                self._count(bad, "bad_field", c, "device %d" % dev)
                continue
            by_tags.setdefault(dev, []).append((self._frame_name(st, nid, c, bad), int(s), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile(metric, st.device_tags(dev), frames, ts)
        self._flush_bad(st, bad)

    def _on_kernel(self, st, g, ts):
        self._profile_by_name_device("cuda_kernels_nanoseconds", st, g, ts)

    def _on_graph(self, st, g, ts):
        self._profile_by_name_device("cuda_graphs_nanoseconds", st, g, ts)

    def _on_memcpy(self, st, g, ts):
        # key: copy kind, memory kinds (src | dst << 8), device
        k1, w1 = _compose(g["sub"], g["name_id"] & 0xFFFF)
        key, w2 = _compose(k1, g["device"])
        uniq, counts, (ns, nbytes) = group_sums(key, g["value"], g["extra"])
        bad = {}
        for k, c, t, b in zip(uniq.tolist(), counts.tolist(), ns.tolist(), nbytes.tolist()):
            dev = k % w2
            copy_kind, mem = divmod(k // w2, w1)
            if dev >= MAX_DEVICES or copy_kind >= MAX_KIND or (mem & 0xFF) >= MAX_KIND or (mem >> 8) >= MAX_KIND:
                self._count(bad, "bad_field", c, "memcpy kind %d, memory kinds 0x%x, device %d" % (copy_kind, mem, dev))
                continue
            kind = cuda_names.memcpy_kind(copy_kind)
            tags = st.device_tags(dev)
            host_mem = cuda_names.host_memory(copy_kind, mem & 0xFF, mem >> 8)
            if host_mem:
                tags["host_memory"] = host_mem
            self.store.add_profile("cuda_memcpy_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memcpy_bytes", dict(tags, kind=kind), int(b), ts)
        self._flush_bad(st, bad)

    def _on_memset(self, st, g, ts):
        key, width = _compose(g["sub"], g["device"])
        uniq, counts, (ns, nbytes) = group_sums(key, g["value"], g["extra"])
        bad = {}
        for k, c, t, b in zip(uniq.tolist(), counts.tolist(), ns.tolist(), nbytes.tolist()):
            mem, dev = divmod(k, width)
            if dev >= MAX_DEVICES or mem >= MAX_KIND:
                self._count(bad, "bad_field", c, "memory kind %d, device %d" % (mem, dev))
                continue
            kind = cuda_names.memory_kind(mem)
            tags = st.device_tags(dev)
            self.store.add_profile("cuda_memset_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memset_bytes", dict(tags, kind=kind), int(b), ts)
        self._flush_bad(st, bad)

    def _on_memcpy_sampled(self, st, g, ts):
        """Copies counted by API callbacks: name_id src | dst << 8 | calls << 16."""
        nid = g["name_id"]
        k1, w1 = _compose(g["sub"], nid & 0xFFFF)
        key, w2 = _compose(k1, g["device"])
        uniq, _, (ns, nbytes, calls) = group_sums(key, g["value"], g["extra"], nid >> 16)
        for k, t, b, c in zip(uniq.tolist(), ns.tolist(), nbytes.tolist(), calls.tolist()):
            dev = k % w2
            copy_kind, mem = divmod(k // w2, w1)
            kind = cuda_names.memcpy_kind(copy_kind)
            tags = st.device_tags(dev)
            host_mem = cuda_names.host_memory(copy_kind, mem & 0xFF, mem >> 8)
            if host_mem:
                tags["host_memory"] = host_mem
            tags.update(SAMPLED_TAGS)
            self.store.add_profile("cuda_memcpy_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memcpy_bytes", dict(tags, kind=kind), int(b), ts)

    def _on_memset_sampled(self, st, g, ts):
        """Memsets counted by API callbacks: name_id calls."""
        key, width = _compose(g["sub"], g["device"])
        uniq, _, (ns, nbytes, calls) = group_sums(key, g["value"], g["extra"], g["name_id"])
        for k, t, b, c in zip(uniq.tolist(), ns.tolist(), nbytes.tolist(), calls.tolist()):
            mem, dev = divmod(k, width)
            kind = cuda_names.memory_kind(mem)
            tags = dict(st.device_tags(dev), **SAMPLED_TAGS)
            self.store.add_profile("cuda_memset_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memset_bytes", dict(tags, kind=kind), int(b), ts)

    def _on_sync_agg(self, st, g, ts):
        """Syncs counted and timed by API callbacks: name_id calls, value host ns."""
        key, width = _compose(g["sub"], g["device"])
        uniq, _, (ns, calls) = group_sums(key, g["value"], g["name_id"])
        by_tags = {}
        for k, t, c in zip(uniq.tolist(), ns.tolist(), calls.tolist()):
            kind, dev = divmod(k, width)
            by_tags.setdefault(dev, []).append((cuda_names.sync_kind(kind), int(t), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile("cuda_sync_nanoseconds", st.device_tags(dev), frames, ts)

    def _on_sync(self, st, g, ts):
        key, width = _compose(g["sub"], g["device"])
        uniq, counts, (ns,) = group_sums(key, g["value"])
        by_tags = {}
        bad = {}
        for k, c, t in zip(uniq.tolist(), counts.tolist(), ns.tolist()):
            kind, dev = divmod(k, width)
            if dev >= MAX_DEVICES or kind >= MAX_KIND:
                self._count(bad, "bad_field", c, "sync kind %d, device %d" % (kind, dev))
                continue
            by_tags.setdefault(dev, []).append((cuda_names.sync_kind(kind), int(t), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile("cuda_sync_nanoseconds", st.device_tags(dev), frames, ts)
        self._flush_bad(st, bad)

    def _unknown_instrument(self, bad, want, nid, n):
        self._count(bad, "unknown_instrument", n, "record for unknown %s instrument %d" % (want, nid))

    def _on_gauge(self, st, g, ts):
        ids = g["name_id"]
        # last record per instrument wins
        rev_ids = ids[::-1]
        uniq, first_rev, counts = np.unique(rev_ids, return_index=True, return_counts=True)
        vals = g["value"][::-1][first_rev].view(np.float64)
        bad = {}
        for nid, v, c in zip(uniq.tolist(), vals.tolist(), counts.tolist()):
            inst = self._instrument(st, nid, "gauge")
            if inst is None:
                self._unknown_instrument(bad, "gauge", nid, c)
                continue
            self.store.set_gauge(inst[0], inst[1], v, ts)
        self._flush_bad(st, bad)

    def _on_counter(self, st, g, ts):
        uniq, counts, (sums,) = group_sums(g["name_id"].astype(np.int64), g["value"])
        bad = {}
        for nid, s, c in zip(uniq.tolist(), sums.tolist(), counts.tolist()):
            inst = self._instrument(st, nid, "counter")
            if inst is None:
                self._unknown_instrument(bad, "counter", nid, c)
                continue
            self.store.add_counter(inst[0], inst[1], int(s), ts)
        self._flush_bad(st, bad)

    def _on_histogram(self, st, g, ts):
        ids = g["name_id"].astype(np.int64)
        vals = g["value"]
        order = np.argsort(ids, kind="stable")
        ids_s, vals_s = ids[order], vals[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(ids_s)) + 1))
        uniq = ids_s[starts]
        counts = np.diff(np.append(starts, ids_s.size))
        insts = [self._instrument(st, nid, "histogram") for nid in uniq.tolist()]
        if None in insts:  # records of unknown instruments: counted, then left out before any bins
            bad = {}
            known = np.array([i is not None for i in insts])
            for nid, c, i in zip(uniq.tolist(), counts.tolist(), insts):
                if i is None:
                    self._unknown_instrument(bad, "histogram", nid, c)
            self._flush_bad(st, bad)
            keep = np.repeat(known, counts)
            ids_s, vals_s = ids_s[keep], vals_s[keep]
            if ids_s.size == 0:
                return
            uniq, counts = uniq[known], counts[known]
            insts = [i for i in insts if i is not None]
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        mins = np.minimum.reduceat(vals_s, starts)
        maxs = np.maximum.reduceat(vals_s, starts)
        inst_idx = np.repeat(np.arange(uniq.size), counts)
        sums = _exact_bincount(inst_idx, vals_s, uniq.size)
        bins = histo.bin_index(vals_s)
        if uniq.size * histo.NBINS <= 1 << 20:
            mat = np.bincount(inst_idx * histo.NBINS + bins, minlength=uniq.size * histo.NBINS)
            per = [mat[i * histo.NBINS:(i + 1) * histo.NBINS] for i in range(uniq.size)]
        else:
            # many instruments in one batch: only the bins they hit, never a dense instruments x bins matrix
            keys, kc = np.unique(inst_idx * histo.NBINS + bins, return_counts=True)
            owner = keys // histo.NBINS
            cut = np.searchsorted(owner, np.arange(uniq.size + 1))
            per = [((keys[cut[i]:cut[i + 1]] % histo.NBINS), kc[cut[i]:cut[i + 1]]) for i in range(uniq.size)]
        for i, inst in enumerate(insts):
            self.store.add_histogram_agg(inst[0], inst[1], int(counts[i]), int(sums[i]), int(mins[i]), int(maxs[i]),
                                         per[i], ts)

    def _on_histogram_agg(self, st, g, ts):
        """Pre-aggregated deltas from device probes (probe_cuda.h)."""
        sub, vals, extra = g["sub"], g["value"], g["extra"]
        ids = g["name_id"].astype(np.int64)
        order = np.argsort(ids, kind="stable")
        ids_s = ids[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(ids_s)) + 1, [ids_s.size]))
        sub_s, vals_s, extra_s = sub[order], vals[order], extra[order]
        bad = {}
        for j in range(starts.size - 1):
            a, b = int(starts[j]), int(starts[j + 1])
            nid = int(ids_s[a])
            inst = self._instrument(st, nid, "histogram")
            if inst is None:
                self._unknown_instrument(bad, "histogram", nid, b - a)
                continue
            sb, v, x = sub_s[a:b], vals_s[a:b], extra_s[a:b]
            cs = sb == L.AGG_COUNT_SUM
            mm = sb == L.AGG_MIN_MAX
            bn = sb == L.AGG_BIN
            out_of_range = bn & (x >= histo.NBINS)
            if out_of_range.any():
                self._count(bad, "bad_field", int(np.count_nonzero(out_of_range)),
                            "histogram bin %d" % int(x[out_of_range][0]))
                bn &= ~out_of_range
            count = histo.exact_sum(v[cs])
            if count == 0 and not bn.any():
                continue
            total = histo.exact_sum(x[cs])
            vmin = int(v[mm].min()) if mm.any() else None
            vmax = int(x[mm].max()) if mm.any() else None
            bins = x[bn].astype(np.int64)
            counts = np.bincount(bins, weights=v[bn].astype(np.float64), minlength=histo.NBINS)
            self.store.add_histogram_agg(inst[0], inst[1], count, total, vmin, vmax, counts.astype(np.int64), ts)
        self._flush_bad(st, bad)

    def _on_profile(self, st, g, ts):
        frame_ids = g["extra"]
        if frame_ids.size and int(frame_ids.max()) > MAX_NAME_ID:  # no writer hands out such an id
            frame_ids = np.where(frame_ids > MAX_NAME_ID, 0, frame_ids)
        key, width = _compose(g["name_id"], frame_ids)
        uniq, counts, (sums,) = group_sums(key, g["value"])
        frames = {}
        bad = {}
        for k, c, s in zip(uniq.tolist(), counts.tolist(), sums.tolist()):
            nid, fid = divmod(k, width)
            frames.setdefault(nid, []).append((self._frame_name(st, fid, c, bad), int(s), int(c)))
        for nid, fr in frames.items():
            inst = self._instrument(st, nid, "profile")
            if inst is None:
                self._unknown_instrument(bad, "profile", nid, sum(f[2] for f in fr))
                continue
            self.store.add_profile(inst[0], inst[1], fr, ts)
        self._flush_bad(st, bad)

    _handlers = {
        L.REC_NAME: _on_name,
        L.REC_DEVICE: _on_device,
        L.REC_META: _on_meta,
        L.REC_KERNEL: _on_kernel,
        L.REC_GRAPH: _on_graph,
        L.REC_MEMCPY: _on_memcpy,
        L.REC_MEMSET: _on_memset,
        L.REC_SYNC: _on_sync,
        L.REC_GAUGE: _on_gauge,
        L.REC_COUNTER: _on_counter,
        L.REC_HISTOGRAM: _on_histogram,
        L.REC_PROFILE: _on_profile,
        L.REC_HISTOGRAM_AGG: _on_histogram_agg,
        REC_MEMCPY_SAMPLED: _on_memcpy_sampled,
        REC_MEMSET_SAMPLED: _on_memset_sampled,
        REC_SYNC_AGG: _on_sync_agg,
    }

    # -- thread ----------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, name="graphsignal-poller", daemon=True)
        self._thread.start()

    def _run(self):
        watch = _DirWatch.open(self.shm_dir)
        try:
            while not self._halt.is_set():
                t0 = time.monotonic()
                try:
                    self.poll_once()
                except Exception as e:  # keep polling: one bad cycle must not end collection
                    self._warn_once(("cycle", type(e).__name__, str(e)),
                                    "poller cycle failed: %s: %s" % (type(e).__name__, e))
                delay = max(0.0, self.next_sleep - (time.monotonic() - t0))
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
        if self._thread is not None:
            self._thread.join(5)
        if final:
            try:
                self.poll_once(final=True)
            except Exception as e:
                self._warn_once(("final",), "final drain failed: %s: %s" % (type(e).__name__, e))
        for st in self.rings.values():
            st.ring.close()

    def cleanup_all(self):
        """Unlinks every ring of this run (the sidecar is exiting)."""
        for fname, st in list(self.rings.items()):
            st.ring.unlink()
            st.ring.close()
            del self.rings[fname]
        try:
            for fname in os.listdir(self.shm_dir):
                if fname.startswith(self.prefix):
                    try:
                        os.unlink(os.path.join(self.shm_dir, fname))
                    except OSError:
                        pass
        except OSError:
            pass


class _DirWatch:
    """inotify on the ring directory: wait() returns early when a file is
    created or moved in. None where inotify is not available (then the
    poller just sleeps)."""

    IN_MOVED_TO, IN_CREATE = 0x80, 0x100

    def __init__(self, fd):
        self.fd = fd

    @classmethod
    def open(cls, path):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return None
            if libc.inotify_add_watch(fd, os.fsencode(path), cls.IN_CREATE | cls.IN_MOVED_TO) < 0:
                os.close(fd)
                return None
            return cls(fd)
        except (OSError, AttributeError):
            return None

    def wait(self, timeout):
        """True when something appeared within timeout seconds."""
        try:
            ready = select.select([self.fd], [], [], timeout)[0]
            if ready:
                while os.read(self.fd, 65536):
                    pass
        except BlockingIOError:
            pass
        except OSError:
            return False
        return bool(ready)

    def close(self):
        try:
            os.close(self.fd)
        except OSError:
            pass
