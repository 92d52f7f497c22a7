"""Reader side of a ring: attach, validate, drain.

One Ring per shared-memory segment. Only the sidecar's poller thread reads;
the acquire load of write_index, the per-slot commit check and the release
store of read_index go through the cffi helper (Python cannot fence), and
numpy copies the committed slots in between.
"""
import mmap
import os
import time

import numpy as np

from graphsignal.rings import layout as L

_W = L.HEADER_OFFSETS["write_index"]
_R = L.HEADER_OFFSETS["read_index"]
_EMPTY = np.empty(0, dtype=L.RECORD_DTYPE)
_WPR = L.RECORD_SIZE // 8  # 64-bit words per record


class RingError(Exception):
    """A segment that is not a ring this sidecar can read."""


def parse_ring_name(name, prefix):
    """'gs-<run>-<pid>-<kind>' -> (pid, kind) or None."""
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix):]
    pid, _, kind = rest.partition("-")
    if not pid.isdigit() or not kind:
        return None
    return int(pid), kind


class Ring:
    """A mapped ring. stall_timeout: seconds an uncommitted slot may block
    the reader while later slots are committed before it is skipped (a
    writer thread that died between reserve and commit)."""

    def __init__(self, path, stall_timeout=5.0, clock=time.monotonic):
        self.path = path
        self.name = os.path.basename(path)
        self._clock = clock
        self.stall_timeout = stall_timeout
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < L.HEADER_SIZE:
                raise RingError("%s: %d bytes, smaller than a ring header" % (self.name, size))
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.size = size
        hdr = np.frombuffer(self._mm, dtype=L.HEADER_DTYPE, count=1).copy()[0]  # a copy: no view pins the map
        problem = self._validate(hdr, size)
        if problem:
            self._mm.close()
            raise RingError("%s: %s" % (self.name, problem))
        self.capacity = int(hdr["capacity"])
        self.kind = int(hdr["kind"])
        self.writer_pid = int(hdr["writer_pid"])
        self.start_ns = int(hdr["start_ns"])
        self._strings_offset = int(hdr["strings_offset"])
        self._strings_size = int(hdr["strings_size"])
        self._hdr = np.frombuffer(self._mm, dtype=L.HEADER_DTYPE, count=1)
        self._slots = np.frombuffer(self._mm, dtype=L.RECORD_DTYPE, count=self.capacity, offset=L.HEADER_SIZE)
        # the same slots as plain words: copying those is a straight memcpy,
        # several times faster than copying the structured records
        self._words = np.frombuffer(self._mm, dtype=np.uint64, count=self.capacity * _WPR, offset=L.HEADER_SIZE)
        self._cbuf = L.ffi.from_buffer("char[]", self._mm)
        self._mask = self.capacity - 1
        self.read_index = int(hdr["read_index"])
        self.names = {}
        self.skipped = 0
        self._stall_index = None
        self._stall_since = 0.0

    @staticmethod
    def _validate(hdr, size):
        if int(hdr["magic"]) != L.MAGIC:
            return "bad magic 0x%x (not a graphsignal ring, or not initialized)" % int(hdr["magic"])
        if int(hdr["version"]) != L.VERSION:
            return "ABI version %d, this sidecar reads version %d" % (int(hdr["version"]), L.VERSION)
        if int(hdr["header_size"]) != L.HEADER_SIZE or int(hdr["record_size"]) != L.RECORD_SIZE:
            return "header/record size %d/%d, expected %d/%d" % (
                int(hdr["header_size"]), int(hdr["record_size"]), L.HEADER_SIZE, L.RECORD_SIZE)
        cap = int(hdr["capacity"])
        if cap == 0 or cap & (cap - 1):
            return "capacity %d is not a power of two" % cap
        need = L.HEADER_SIZE + cap * L.RECORD_SIZE
        if int(hdr["strings_offset"]) != need or need + int(hdr["strings_size"]) > size:
            return "segment of %d bytes too small for capacity %d and %d string bytes" % (
                size, cap, int(hdr["strings_size"]))
        return None

    # -- header fields -------------------------------------------------------
    def _field(self, name):
        return int(self._hdr[name][0])

    @property
    def dropped(self):
        return self._field("dropped")

    @property
    def strings_dropped(self):
        return self._field("strings_dropped")

    @property
    def closed(self):
        return bool(self._field("flags") & L.FLAG_CLOSED)

    @property
    def write_index(self):
        return int(L.lib.gs_load_acquire(self._cbuf + _W))

    def pending(self):
        return self.write_index - self.read_index

    # -- draining ------------------------------------------------------------
    def drain(self, max_records=None, scratch=None):
        """Returns a copy of the committed records from read_index on (in
        index order, wrap-around handled) and releases their slots.

        scratch: an optional uint64 array to copy into (reused between
        drains to avoid fresh pages); the result is then a view of it,
        valid until the next drain into the same scratch."""
        r = self.read_index
        w = int(L.lib.gs_load_acquire(self._cbuf + _W))
        if w == r:
            self._stall_index = None
            return _EMPTY
        end = w if max_records is None else min(w, r + max_records)
        n = int(L.lib.gs_committed(self._cbuf, r, end))
        if n == 0:
            self._on_stall(r, w)
            return _EMPTY
        self._stall_index = None
        if scratch is not None and scratch.size < n * _WPR:
            n = scratch.size // _WPR
        i0 = r & self._mask
        first = min(n, self.capacity - i0)
        buf = scratch[:n * _WPR] if scratch is not None else np.empty(n * _WPR, dtype=np.uint64)
        buf[:first * _WPR] = self._words[i0 * _WPR:(i0 + first) * _WPR]
        if first < n:
            buf[first * _WPR:] = self._words[:(n - first) * _WPR]
        self._release(r + n)
        return buf.view(L.RECORD_DTYPE)

    def _release(self, new_read):
        self.read_index = new_read
        L.lib.gs_store_release(self._cbuf + _R, new_read)

    def _on_stall(self, r, w):
        now = self._clock()
        if self._stall_index != r:
            self._stall_index, self._stall_since = r, now
        elif now - self._stall_since >= self.stall_timeout:
            # A writer reserved this slot and never committed it (its thread
            # died mid-write): skip it so the rest of the ring flows again.
            self.skipped += 1
            self._stall_index = None
            self._release(r + 1)

    # -- names ---------------------------------------------------------------
    def string_at(self, offset, length):
        offset, length = int(offset), int(length)
        if offset < 0 or length < 0 or offset + length > self._strings_size:
            return None
        start = self._strings_offset + offset
        return self._mm[start:start + length].decode("utf-8", "replace")

    def learn_names(self, recs):
        """Records NAME records' strings in self.names; returns the names
        learned as [(id, sub, str)]."""
        learned = []
        for rid, sub, off, ln in zip(recs["name_id"].tolist(), recs["sub"].tolist(),
                                     recs["value"].tolist(), recs["extra"].tolist()):
            s = self.string_at(off, ln)
            if s is not None:
                self.names[rid] = s
                learned.append((rid, sub, s))
        return learned

    def close(self):
        self._hdr = self._slots = self._words = None
        self._cbuf = None
        try:
            self._mm.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes with it

    def unlink(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class Writer:
    """A writer for tests and benchmarks: the header's own C writer code,
    called through the helper."""

    def __init__(self, name, kind=L.KIND_TEST, capacity=L.DEFAULT_CAPACITY, strings_size=1 << 16):
        size = L.ffi.new("size_t*")
        self.h = L.lib.gs_ring_open(name.encode(), kind, capacity, strings_size, size)
        if self.h == L.ffi.NULL:
            raise OSError("cannot create ring %s" % name)
        self.size = size[0]

    def write(self, type_, sub=0, device=0, name_id=0, value=0, extra=0):
        return L.lib.gs_ring_write(self.h, type_, sub, device, name_id, value, extra)

    def reserve(self):
        idx = L.ffi.new("uint64_t*")
        slot = L.lib.gs_ring_reserve(self.h, idx)
        return (None, None) if slot == L.ffi.NULL else (slot, idx[0])

    def fill_commit(self, slot, index, type_, sub=0, device=0, name_id=0, value=0, extra=0):
        L.lib.gs_ring_fill(slot, type_, sub, device, name_id, value, extra)
        L.lib.gs_ring_commit(slot, index)

    def name(self, text, kind=L.NAME_PLAIN):
        nid = L.lib.gs_ring_new_name_id(self.h)
        b = text.encode()
        if not L.lib.gs_ring_send_name(self.h, nid, kind, b, len(b)):
            return 0
        return nid

    def close(self):
        L.lib.gs_ring_close(self.h)

    def unmap(self):
        if self.h is not None:
            L.lib.gs_munmap(self.h, self.size)
            self.h = None
