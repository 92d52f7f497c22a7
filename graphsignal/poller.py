"""The poller: drain -> aggregate -> publish, on one thread.

Each cycle takes the committed range of every ring of the run as numpy
records, splits it by record type and aggregates with vectorized numpy
(bincount over dense keys, reduceat over sorted keys) into the metric
store. No Python code runs per record; Python loops run per distinct
(name, device) in a batch. Once a second it appends a cumulative snapshot
to the store's history, so windows are differences of two snapshots.
"""
import logging
import os
import threading
import time

import numpy as np

from graphsignal import cuda_names, histo
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Ring, RingError, parse_ring_name

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
    """Per-bin sums of non-negative integer values as uint64 (exact while
    a bin's sum stays below 2**64)."""
    v = values.astype(np.uint64, copy=False)
    if v.size == 0:
        return np.zeros(n, dtype=np.uint64)
    if int(v.max()) * v.size < _EXACT_F64:
        return np.bincount(idx, weights=v.astype(np.float64), minlength=n).astype(np.uint64)
    out = np.zeros(n, dtype=np.uint64)
    step = 1 << 20  # chunk so each float64 partial stays exact (2**20 * 2**32 < 2**53)
    for s in range(0, v.size, step):
        vi, ii = v[s:s + step], idx[s:s + step]
        lo = np.bincount(ii, weights=(vi & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=n)
        hi = np.bincount(ii, weights=(vi >> np.uint64(32)).astype(np.float64), minlength=n)
        out += (hi.astype(np.uint64) << np.uint64(32)) + lo.astype(np.uint64)
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

    def device_tags(self, ordinal):
        tags = dict(self.base_tags)
        uuid = self.devices.get(ordinal)
        tags["device.cuda_index"] = str(ordinal)  # the CUDA ordinal in this process (NVML's device.index differs)
        if uuid:
            tags["device.uuid"] = uuid
        return tags

    def name(self, name_id):
        n = self.ring.names.get(name_id)
        return n if n is not None else "<unnamed %d>" % name_id


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

    def __init__(self, store, run_id, shm_dir="/dev/shm", interval=0.05, proc_root="/proc",
                 history_interval=1.0, gone_grace=1.0, on_error=None):
        self.store = store
        self.prefix = "gs-%s-" % run_id
        self.shm_dir = shm_dir
        self.interval = interval
        self.proc_root = proc_root
        self.history_interval = history_interval
        self.gone_grace = gone_grace
        self.on_error = on_error
        self.rings = {}  # file name -> RingState
        self.bad = set()  # file names refused (logged once)
        self.records_total = 0
        self.cycles = 0
        self._halt = threading.Event()
        self._thread = None
        self._last_history = None
        self._warned = set()
        self._scratch = None

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
        if key in self._warned:
            return
        self._warned.add(key)
        logger.warning("graphsignal: %s", msg)
        if self.on_error:
            self.on_error(msg)

    # -- one cycle -------------------------------------------------------------
    def poll_once(self, final=False):
        self.discover()
        for fname, st in list(self.rings.items()):
            self._drain_ring(st)
            self._publish_ring_counters(st)
            self._maybe_retire(fname, st, final)
        self.cycles += 1
        self.store.prerender()
        now = time.monotonic()
        if self._last_history is None or now - self._last_history >= self.history_interval:
            self._last_history = now
            self.store.take_history()

    def _drain_ring(self, st):
        # Drain in bounded batches so one busy ring cannot starve the rest
        # and batch memory stays small.
        if self._scratch is None:
            self._scratch = np.empty(self.BATCH * (L.RECORD_SIZE // 8), dtype=np.uint64)
        for _ in range(64):
            recs = st.ring.drain(max_records=self.BATCH, scratch=self._scratch)
            if recs.size == 0:
                return
            self.records_total += int(recs.size)
            self.aggregate(st, recs)
            if recs.size < self.BATCH:
                return

    def _publish_ring_counters(self, st):
        tags = dict(st.base_tags, writer=st.kind_name)
        self.store.set_counter("graphsignal_dropped_records", tags, st.ring.dropped)
        if st.ring.strings_dropped or st.ring.skipped:
            self.store.set_counter("graphsignal_dropped_names", tags, st.ring.strings_dropped)
            self.store.set_counter("graphsignal_skipped_slots", tags, st.ring.skipped)

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

    def _on_name(self, st, g, ts):
        for nid, sub, text in st.ring.learn_names(g.recs if g.mask is None else g.recs[g.mask]):
            if sub == L.NAME_INSTRUMENT:
                inst = parse_instrument(text)
                if inst is not None:
                    st.instruments[nid] = inst

    def _on_device(self, st, g, ts):
        for dev, nid in zip(g["device"].tolist(), g["name_id"].tolist()):
            st.devices[dev] = st.ring.names.get(nid)
            if st.ring.kind == L.KIND_CUPTI:
                # the device is in use: its profiles are measured, even if empty
                for name in CUDA_PROFILES:
                    self.store.ensure_profile(name, st.device_tags(dev), ts)

    def _on_meta(self, st, g, ts):
        for sub, value in zip(g["sub"].tolist(), g["value"].tolist()):
            st.meta[sub] = value
            if sub == L.META_CUDA_GRAPH_TRACE_MODE:
                self.store.set_gauge("cuda_graph_trace_mode", st.base_tags, int(value), ts)

    def _profile_by_name_device(self, metric, st, g, ts):
        key, width = _compose(g["name_id"], g["device"])
        uniq, counts, (sums,) = group_sums(key, g["value"])
        by_tags = {}
        for k, c, s in zip(uniq.tolist(), counts.tolist(), sums.tolist()):
            by_tags.setdefault(k % width, []).append((st.name(k // width), int(s), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile(metric, st.device_tags(dev), frames, ts)

    def _on_kernel(self, st, g, ts):
        self._profile_by_name_device("cuda_kernels_nanoseconds", st, g, ts)

    def _on_graph(self, st, g, ts):
        self._profile_by_name_device("cuda_graphs_nanoseconds", st, g, ts)

    def _on_memcpy(self, st, g, ts):
        # key: copy kind, memory kinds (src | dst << 8), device
        k1, w1 = _compose(g["sub"], g["name_id"] & 0xFFFF)
        key, w2 = _compose(k1, g["device"])
        uniq, counts, (ns, nbytes) = group_sums(key, g["value"], g["extra"])
        for k, c, t, b in zip(uniq.tolist(), counts.tolist(), ns.tolist(), nbytes.tolist()):
            dev = k % w2
            copy_kind, mem = divmod(k // w2, w1)
            kind = cuda_names.memcpy_kind(copy_kind)
            tags = st.device_tags(dev)
            host_mem = cuda_names.host_memory(copy_kind, mem & 0xFF, mem >> 8)
            if host_mem:
                tags["host_memory"] = host_mem
            self.store.add_profile("cuda_memcpy_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memcpy_bytes", dict(tags, kind=kind), int(b), ts)

    def _on_memset(self, st, g, ts):
        key, width = _compose(g["sub"], g["device"])
        uniq, counts, (ns, nbytes) = group_sums(key, g["value"], g["extra"])
        for k, c, t, b in zip(uniq.tolist(), counts.tolist(), ns.tolist(), nbytes.tolist()):
            mem, dev = divmod(k, width)
            kind = cuda_names.memory_kind(mem)
            tags = st.device_tags(dev)
            self.store.add_profile("cuda_memset_nanoseconds", tags, [(kind, int(t), int(c))], ts)
            self.store.add_counter("cuda_memset_bytes", dict(tags, kind=kind), int(b), ts)

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
        for k, c, t in zip(uniq.tolist(), counts.tolist(), ns.tolist()):
            kind, dev = divmod(k, width)
            by_tags.setdefault(dev, []).append((cuda_names.sync_kind(kind), int(t), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile("cuda_sync_nanoseconds", st.device_tags(dev), frames, ts)

    def _instrument(self, st, nid, want):
        inst = st.instruments.get(nid)
        if inst is None or inst[0] != want:
            self._warn_once(("inst", st.ring.name, nid), "ring %s: record for unknown %s instrument %d"
                            % (st.ring.name, want, nid))
            return None
        return inst[1], dict(inst[2], **st.base_tags)

    def _on_gauge(self, st, g, ts):
        ids = g["name_id"]
        # last record per instrument wins
        rev_ids = ids[::-1]
        uniq, first_rev = np.unique(rev_ids, return_index=True)
        vals = g["value"][::-1][first_rev].view(np.float64)
        for nid, v in zip(uniq.tolist(), vals.tolist()):
            inst = self._instrument(st, nid, "gauge")
            if inst:
                self.store.set_gauge(inst[0], inst[1], v, ts)

    def _on_counter(self, st, g, ts):
        uniq, counts, (sums,) = group_sums(g["name_id"].astype(np.int64), g["value"])
        for nid, s in zip(uniq.tolist(), sums.tolist()):
            inst = self._instrument(st, nid, "counter")
            if inst:
                self.store.add_counter(inst[0], inst[1], int(s), ts)

    def _on_histogram(self, st, g, ts):
        ids = g["name_id"].astype(np.int64)
        vals = g["value"]
        order = np.argsort(ids, kind="stable")
        ids_s, vals_s = ids[order], vals[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(ids_s)) + 1))
        uniq = ids_s[starts]
        mins = np.minimum.reduceat(vals_s, starts)
        maxs = np.maximum.reduceat(vals_s, starts)
        inst_idx = np.repeat(np.arange(uniq.size), np.diff(np.append(starts, ids_s.size)))
        sums = _exact_bincount(inst_idx, vals_s, uniq.size)
        counts = np.diff(np.append(starts, ids_s.size))
        bins = histo.bin_index(vals_s)
        mat = np.bincount(inst_idx * histo.NBINS + bins, minlength=uniq.size * histo.NBINS)
        mat = mat.reshape(uniq.size, histo.NBINS)
        for i, nid in enumerate(uniq.tolist()):
            inst = self._instrument(st, nid, "histogram")
            if inst:
                self.store.add_histogram_agg(inst[0], inst[1], int(counts[i]), int(sums[i]), int(mins[i]),
                                             int(maxs[i]), mat[i], ts)

    def _on_histogram_agg(self, st, g, ts):
        """Pre-aggregated deltas from device probes (probe_cuda.h)."""
        ids = g["name_id"].astype(np.int64)
        sub = g["sub"]
        vals, extra = g["value"], g["extra"]
        for nid in np.unique(ids).tolist():
            inst = self._instrument(st, nid, "histogram")
            if not inst:
                continue
            mine = ids == nid
            cs = mine & (sub == L.AGG_COUNT_SUM)
            mm = mine & (sub == L.AGG_MIN_MAX)
            bn = mine & (sub == L.AGG_BIN)
            count = histo.exact_sum(vals[cs])
            if count == 0 and not bn.any():
                continue
            total = histo.exact_sum(extra[cs])
            vmin = int(vals[mm].min()) if mm.any() else None
            vmax = int(extra[mm].max()) if mm.any() else None
            bins = extra[bn].astype(np.int64)
            ok = bins < histo.NBINS
            counts = np.bincount(bins[ok], weights=vals[bn][ok].astype(np.float64), minlength=histo.NBINS)
            self.store.add_histogram_agg(inst[0], inst[1], count, total, vmin, vmax, counts.astype(np.int64), ts)

    def _on_profile(self, st, g, ts):
        key, width = _compose(g["name_id"], g["extra"])
        uniq, counts, (sums,) = group_sums(key, g["value"])
        frames = {}
        for k, c, s in zip(uniq.tolist(), counts.tolist(), sums.tolist()):
            frames.setdefault(k // width, []).append((st.name(k % width), int(s), int(c)))
        for nid, fr in frames.items():
            inst = self._instrument(st, nid, "profile")
            if inst:
                self.store.add_profile(inst[0], inst[1], fr, ts)

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
        while not self._halt.is_set():
            t0 = time.monotonic()
            try:
                self.poll_once()
            except Exception as e:  # keep polling: one bad cycle must not end collection
                self._warn_once(("cycle", type(e).__name__, str(e)),
                                "poller cycle failed: %s: %s" % (type(e).__name__, e))
            self._halt.wait(max(0.0, self.interval - (time.monotonic() - t0)))

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
