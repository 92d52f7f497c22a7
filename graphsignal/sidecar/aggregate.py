"""The aggregator: a pure function of the records of one ring into the
metric store, apart from files, threads and /proc (graphsignal.sidecar.poller
finds, drains and retires the rings and feeds their records here).

A batch of records is split by record type and aggregated with
vectorized numpy (bincount over dense keys, reduceat over sorted keys).
No Python code runs per record; Python loops run per distinct (name,
device) in a batch. A record that makes no sense is counted in
graphsignal_rejected_records{reason} and said once per ring and reason.
"""
import numpy as np

from graphsignal import histo
from graphsignal.rings import cuda_names
from graphsignal.rings import layout as L
from graphsignal.rings.reader import MAX_NAME_ID
from graphsignal.sidecar.grouping import Batch, compose, exact_bincount, group_sums
from graphsignal.sidecar.store import tags_key

# Calls counted by the CUPTI library's API callbacks, aggregated per thread
# (probe.h GRAPHSIGNAL_REC_*_SAMPLED, _SYNC_AGG). A record carries its number
# of calls; copy and memset times are estimates from sampled activity, tagged
# duration=sampled.
REC_MEMCPY_SAMPLED = L.REC_MEMCPY_SAMPLED
REC_MEMSET_SAMPLED = L.REC_MEMSET_SAMPLED
REC_SYNC_AGG = L.REC_SYNC_AGG
SAMPLED_TAGS = {"duration": "sampled"}

CUDA_PROFILES = ("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
                 "cuda_memset_nanoseconds", "cuda_sync_nanoseconds")

# The CUDA driver interposer (--cuda-trace light; probe.h GRAPHSIGNAL_REC_*_COUNT,
# _GRAPH_SAMPLED) counts without timing: launches, calls and bytes are exact;
# graph time is replays times the mean of the replays timed by event pairs
# (duration=sampled), the timed replays counted beside it; sync time is the
# host's, exact. Its profiles, each present once the device is seen:
LIGHT_PROFILES = (("cuda_kernel_launches", None), ("cuda_graphs_nanoseconds", SAMPLED_TAGS),
                  ("cuda_memcpy_calls", None), ("cuda_memset_calls", None), ("cuda_sync_nanoseconds", None))
TIMED_REPLAYS = "cuda_graph_timed_replays"

# -- what a ring's records can be refused for ---------------------------------
UNNAMED = "(unnamed)"  # the frame of records whose name never arrived (one frame, not one per id)
MAX_DEVICES = 128  # device ordinals per process (GPUs, MIG instances); a higher one is a bad record
MAX_RESOLVED = 1 << 17  # instruments per ring whose tags' key is kept (Aggregator._resolved)
MAX_KIND = 64  # CUPTI copy/memory/sync kinds are small enums

REJECT_REASONS = {
    "unknown_name": "records naming an id that was never sent (counted in the %s frame)" % UNNAMED,
    "unknown_instrument": "records for an instrument id that was never registered",
    "bad_type": "records of a type this sidecar does not know",
    "bad_field": "records with a field out of range",
    "names_over_cap": "names beyond the per-ring caps, or pointing outside the string area",
}
REJECTED_METRIC = "graphsignal_rejected_records"


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


class Aggregator:
    """Aggregates the records of rings into `store`; `reporter` (a
    graphsignal.report.Reporter) says each kind of rejected record once
    per ring. A ring's own state (its names, devices, instruments, tags
    and counts of rejected records) is the RingState passed with its
    records (graphsignal.sidecar.poller)."""

    def __init__(self, store, reporter):
        self.store = store
        self.reporter = reporter

    def reject(self, st, reason, n, example):
        if n <= 0:
            return
        st.rejected[reason] = st.rejected.get(reason, 0) + int(n)
        if reason not in st.said:
            st.said.add(reason)
            self.reporter.say("ring %s: %s (%s); counted in %s{reason=%s}, not logged again" % (
                st.ring.name, example, REJECT_REASONS[reason], REJECTED_METRIC, reason))

    def aggregate(self, st, recs):
        """Writes a batch of one ring's records (st: its RingState) into the store."""
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
                self.reject(st, "bad_type", g.size, "record type %d" % t)

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
            self.reject(st, reason, n, example)

    def _resolved(self, st, nid, want):
        """_instrument's (name, tags) and the store's key of those tags,
        kept per ring until the name id is sent again: a workload with
        thousands of counters pays for sorting their tags once, not on
        every batch (the drain's time is what keeps the ring from filling)."""
        r = st.resolved.get(nid)
        if r is None or r[0] != want:
            inst = self._instrument(st, nid, want)
            if inst is None:
                return None
            if len(st.resolved) >= MAX_RESOLVED:
                st.resolved.clear()
            r = st.resolved[nid] = (want, inst[0], inst[1], tags_key(inst[1]))
        return r[1:]

    def _on_name(self, st, g, ts):
        for nid, sub, text in st.ring.learn_names(g.recs if g.mask is None else g.recs[g.mask]):
            st.resolved.pop(nid, None)
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
            elif st.ring.kind == L.KIND_INTERPOSE:
                for name, extra in LIGHT_PROFILES:
                    self.store.ensure_profile(name, dict(st.device_tags(dev), **(extra or {})), ts)
        self._flush_bad(st, bad)

    def _on_meta(self, st, g, ts):
        for sub, value in zip(g["sub"].tolist(), g["value"].tolist()):
            st.meta[sub] = value
            if sub == L.META_CUDA_GRAPH_TRACE_MODE:
                self.store.set_gauge("cuda_graph_trace_mode", st.base_tags, int(value), ts)

    def _profile_by_name_device(self, metric, st, g, ts):
        key, width = compose(g["name_id"], g["device"])
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

    # Copy, memset and sync records come exact (activity records) or counted
    # by the API callbacks (the sampled types); both pass the same checks.

    def _memcpy_keys(self, st, g, *values):
        """[(copy kind, memory kinds src | dst << 8, device, records, sums
        of values...)] per distinct key of copy records; a key with a field
        out of range is counted (bad_field), not returned."""
        k1, w1 = compose(g["sub"], g["name_id"] & 0xFFFF)
        key, w2 = compose(k1, g["device"])
        uniq, counts, sums = group_sums(key, *values)
        out = []
        bad = {}
        for k, c, *s in zip(uniq.tolist(), counts.tolist(), *(x.tolist() for x in sums)):
            dev = k % w2
            copy_kind, mem = divmod(k // w2, w1)
            if dev >= MAX_DEVICES or copy_kind >= MAX_KIND or (mem & 0xFF) >= MAX_KIND or (mem >> 8) >= MAX_KIND:
                self._count(bad, "bad_field", c, "memcpy kind %d, memory kinds 0x%x, device %d" % (copy_kind, mem, dev))
                continue
            out.append((copy_kind, mem, dev, c, *s))
        self._flush_bad(st, bad)
        return out

    def _kind_device_keys(self, st, g, what, *values):
        """[(kind, device, records, sums of values...)] per distinct (sub,
        device) of memset or sync records (`what` names the kind in the
        line said); a key out of range is counted (bad_field), not returned."""
        key, width = compose(g["sub"], g["device"])
        uniq, counts, sums = group_sums(key, *values)
        out = []
        bad = {}
        for k, c, *s in zip(uniq.tolist(), counts.tolist(), *(x.tolist() for x in sums)):
            kind, dev = divmod(k, width)
            if dev >= MAX_DEVICES or kind >= MAX_KIND:
                self._count(bad, "bad_field", c, "%s %d, device %d" % (what, kind, dev))
                continue
            out.append((kind, dev, c, *s))
        self._flush_bad(st, bad)
        return out

    @staticmethod
    def _copy_tags(st, copy_kind, mem, dev):
        """A copy's device tags, and host_memory (pinned, pageable, managed)
        where a side is host memory whose kind the record says."""
        tags = st.device_tags(dev)
        host_mem = cuda_names.host_memory(copy_kind, mem & 0xFF, mem >> 8)
        if host_mem:
            tags["host_memory"] = host_mem
        return tags

    def _add_copy(self, st, copy_kind, mem, dev, ns, nbytes, calls, ts, extra_tags=None):
        kind = cuda_names.memcpy_kind(copy_kind)
        tags = self._copy_tags(st, copy_kind, mem, dev)
        if extra_tags:
            tags.update(extra_tags)
        self.store.add_profile("cuda_memcpy_nanoseconds", tags, [(kind, int(ns), int(calls))], ts)
        self.store.add_counter("cuda_memcpy_bytes", dict(tags, kind=kind), int(nbytes), ts)

    def _add_memset(self, st, mem, dev, ns, nbytes, calls, ts, extra_tags=None):
        kind = cuda_names.memory_kind(mem)
        tags = st.device_tags(dev)
        if extra_tags:
            tags.update(extra_tags)
        self.store.add_profile("cuda_memset_nanoseconds", tags, [(kind, int(ns), int(calls))], ts)
        self.store.add_counter("cuda_memset_bytes", dict(tags, kind=kind), int(nbytes), ts)

    def _add_syncs(self, st, keys, ts):
        """keys: [(sync kind, device, ns, calls)]; one profile per device."""
        by_tags = {}
        for kind, dev, t, c in keys:
            by_tags.setdefault(dev, []).append((cuda_names.sync_kind(kind), int(t), int(c)))
        for dev, frames in by_tags.items():
            self.store.add_profile("cuda_sync_nanoseconds", st.device_tags(dev), frames, ts)

    def _on_memcpy(self, st, g, ts):
        for copy_kind, mem, dev, c, t, b in self._memcpy_keys(st, g, g["value"], g["extra"]):
            self._add_copy(st, copy_kind, mem, dev, t, b, c, ts)

    def _on_memset(self, st, g, ts):
        for mem, dev, c, t, b in self._kind_device_keys(st, g, "memory kind", g["value"], g["extra"]):
            self._add_memset(st, mem, dev, t, b, c, ts)

    def _on_sync(self, st, g, ts):
        keys = self._kind_device_keys(st, g, "sync kind", g["value"])
        self._add_syncs(st, [(kind, dev, t, c) for kind, dev, c, t in keys], ts)

    def _on_memcpy_sampled(self, st, g, ts):
        """Copies counted by API callbacks: name_id src | dst << 8 | calls << 16."""
        keys = self._memcpy_keys(st, g, g["value"], g["extra"], g["name_id"] >> 16)
        for copy_kind, mem, dev, _, t, b, calls in keys:
            self._add_copy(st, copy_kind, mem, dev, t, b, calls, ts, SAMPLED_TAGS)

    def _on_memset_sampled(self, st, g, ts):
        """Memsets counted by API callbacks: name_id calls."""
        for mem, dev, _, t, b, calls in self._kind_device_keys(st, g, "memory kind", g["value"], g["extra"],
                                                               g["name_id"]):
            self._add_memset(st, mem, dev, t, b, calls, ts, SAMPLED_TAGS)

    def _on_sync_agg(self, st, g, ts):
        """Syncs counted and timed by API callbacks: name_id calls, value host ns."""
        keys = self._kind_device_keys(st, g, "sync kind", g["value"], g["name_id"])
        self._add_syncs(st, [(kind, dev, t, calls) for kind, dev, _, t, calls in keys], ts)

    # -- the interposer's counts (--cuda-trace light) --
    def _on_kernel_count(self, st, g, ts):
        """Launches per kernel symbol: name_id symbol, value launches."""
        key, width = compose(g["name_id"], g["device"])
        uniq, _, (sums,) = group_sums(key, g["value"])
        by_dev = {}
        bad = {}
        for k, n in zip(uniq.tolist(), sums.tolist()):
            nid, dev = divmod(k, width)
            if dev >= MAX_DEVICES:
                self._count(bad, "bad_field", 1, "device %d" % dev)
                continue
            by_dev.setdefault(dev, []).append((self._frame_name(st, nid, 1, bad), int(n), int(n)))
        for dev, frames in by_dev.items():
            self.store.add_profile("cuda_kernel_launches", st.device_tags(dev), frames, ts)
        self._flush_bad(st, bad)

    def _on_graph_sampled(self, st, g, ts):
        """Replays per graph: value estimated ns, extra replays | timed << 32."""
        extra = g["extra"]
        key, width = compose(g["name_id"], g["device"])
        uniq, _, (ns, replays, timed) = group_sums(key, g["value"], extra & np.uint64(0xFFFFFFFF),
                                                   extra >> np.uint64(32))
        by_dev = {}
        bad = {}
        for k, t, n, m in zip(uniq.tolist(), ns.tolist(), replays.tolist(), timed.tolist()):
            nid, dev = divmod(k, width)
            if dev >= MAX_DEVICES:
                self._count(bad, "bad_field", 1, "device %d" % dev)
                continue
            frames, timed_sum = by_dev.setdefault(dev, ([], [0]))
            if n or t:  # the estimate also grows alone, when the mean of the timed replays does
                frames.append((self._frame_name(st, nid, 1, bad), int(t), int(n)))
            timed_sum[0] += int(m)
        for dev, (frames, timed_sum) in by_dev.items():
            tags = st.device_tags(dev)
            if frames:
                self.store.add_profile("cuda_graphs_nanoseconds", dict(tags, **SAMPLED_TAGS), frames, ts)
            self.store.add_counter(TIMED_REPLAYS, tags, timed_sum[0], ts)
        self._flush_bad(st, bad)

    def _on_memcpy_count(self, st, g, ts):
        """Copies per kind and host memory: sub copy kind, name_id src | dst
        << 8 (CUpti_ActivityMemoryKind, as MEMCPY records carry them; 0 from
        an interposer that did not say), value calls, extra bytes. Tagged
        host_memory as the CUPTI collection's copies are (_add_copy)."""
        for copy_kind, mem, dev, _, calls, nbytes in self._memcpy_keys(st, g, g["value"], g["extra"]):
            name = cuda_names.memcpy_kind(copy_kind)
            tags = self._copy_tags(st, copy_kind, mem, dev)
            self.store.add_profile("cuda_memcpy_calls", tags, [(name, int(calls), int(calls))], ts)
            self.store.add_counter("cuda_memcpy_bytes", dict(tags, kind=name), int(nbytes), ts)

    def _on_memset_count(self, st, g, ts):
        """Memsets: value calls, extra bytes (the memory's kind unknown):
        cuda_memset_calls (a count profile) and cuda_memset_bytes by kind."""
        for kind, dev, _, calls, nbytes in self._kind_device_keys(st, g, "memory kind", g["value"], g["extra"]):
            name = cuda_names.memory_kind(kind)
            tags = st.device_tags(dev)
            self.store.add_profile("cuda_memset_calls", tags, [(name, int(calls), int(calls))], ts)
            self.store.add_counter("cuda_memset_bytes", dict(tags, kind=name), int(nbytes), ts)

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
        adds = []
        for nid, s, c in zip(uniq.tolist(), sums.tolist(), counts.tolist()):
            inst = self._resolved(st, nid, "counter")
            if inst is None:
                self._unknown_instrument(bad, "counter", nid, c)
                continue
            adds.append((inst, int(s)))
        self.store.add_counters(adds, ts)
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
        sums = exact_bincount(inst_idx, vals_s, uniq.size)
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
        """Profile samples, one a record: extra frame id, value the sample."""
        key, width = compose(g["name_id"], _frame_ids(g["extra"]))
        uniq, counts, (sums,) = group_sums(key, g["value"])
        self._add_profiles(st, uniq, width, sums, counts, ts)

    def _on_profile_agg(self, st, g, ts):
        """Profile frames the writer aggregated (the CUPTI library's NVTX
        ranges): extra frame id | samples << 32, value their sum."""
        extra = g["extra"]
        key, width = compose(g["name_id"], _frame_ids(extra & np.uint64(0xFFFFFFFF)))
        uniq, _, (sums, samples) = group_sums(key, g["value"], extra >> np.uint64(32))
        self._add_profiles(st, uniq, width, sums, samples, ts)

    def _add_profiles(self, st, uniq, width, sums, samples, ts):
        """One profile per instrument from the sums and samples per
        (instrument, frame) key."""
        frames = {}
        bad = {}
        for k, s, c in zip(uniq.tolist(), sums.tolist(), samples.tolist()):
            nid, fid = divmod(k, width)
            frames.setdefault(nid, []).append((self._frame_name(st, fid, int(c), bad), int(s), int(c)))
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
        L.REC_MEMCPY_SAMPLED: _on_memcpy_sampled,
        L.REC_MEMSET_SAMPLED: _on_memset_sampled,
        L.REC_SYNC_AGG: _on_sync_agg,
        L.REC_PROFILE_AGG: _on_profile_agg,
        L.REC_KERNEL_COUNT: _on_kernel_count,
        L.REC_GRAPH_SAMPLED: _on_graph_sampled,
        L.REC_MEMCPY_COUNT: _on_memcpy_count,
        L.REC_MEMSET_COUNT: _on_memset_count,
    }


def _frame_ids(ids):
    """A profile's frame ids; one no writer hands out (past MAX_NAME_ID) is
    0, the unnamed frame."""
    if ids.size and int(ids.max()) > MAX_NAME_ID:
        return np.where(ids > MAX_NAME_ID, 0, ids)
    return ids
