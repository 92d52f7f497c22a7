"""Reader side of a ring: attach, validate, drain.

One Ring per shared-memory segment. Only the sidecar's poller thread reads;
the acquire load of write_index, the per-slot commit check and the release
store of read_index go through the cffi helper (Python cannot fence), and
numpy copies the committed slots in between.
"""
import errno
import mmap
import os
import stat
import time

import numpy as np

from graphsignal.rings import layout as L
from graphsignal.textsafe import clean

_W = L.HEADER_OFFSETS["write_index"]
_R = L.HEADER_OFFSETS["read_index"]
_EMPTY = np.empty(0, dtype=L.RECORD_DTYPE)
_WPR = L.RECORD_SIZE // 8  # 64-bit words per record


class RingError(Exception):
    """A segment that is not a ring this sidecar can read, or a ring that
    stopped making sense (then it is dropped)."""


# Bounds on what one ring can make the reader keep (a writer is untrusted:
# a bug or another process can send anything).
MAX_NAMES = 1 << 18  # names kept per ring; more are dropped and counted
MAX_NAME_ID = 1 << 24  # a name id above this is not one a writer hands out (ids count up from 1)
MAX_NAME_BYTES = 64 << 10  # longest name kept (kernel symbols are long, not this long)


# The names a writer's ring may take (probe.h's GRAPHSIGNAL_RING_NAME_ATTEMPTS):
# <prefix><pid>-<kind>, then .1 .. .3 after it while the name before is held by
# something that is not a ring of the writer's uid; a writer left without a
# ring leaves the marker <name>.none (GRAPHSIGNAL_RING_MARKER_SUFFIX) holding
# the reason.
NAME_ATTEMPTS = L.RING_NAME_ATTEMPTS
MARKER = L.RING_MARKER_SUFFIX[1:]  # the suffix without its dot
MARKER_MAX = 512  # bytes of a marker's reason read


def ascii_int(s):
    """int(s) for ASCII digits only, else None ('²'.isdigit() is true, int('²') raises)."""
    return int(s) if s.isascii() and s.isdigit() else None


def split_kind(tail):
    """A name's kind part -> (kind, slot): 'probe' -> ('probe', 0), 'probe.2'
    -> ('probe', 2), 'probe.none' -> ('probe', MARKER)."""
    kind, dot, suffix = tail.rpartition(".")
    if dot and kind:
        if suffix == MARKER:
            return kind, MARKER
        n = ascii_int(suffix)
        if n is not None:
            return kind, n
    return tail, 0


def parse_ring_file(name, prefix):
    """'<prefix><pid>-<kind>[.<n>|.none]' -> (pid, kind, slot), slot the
    name's place among the names a ring may take (0: the plain name) or
    MARKER; None for other names."""
    if not name.startswith(prefix):
        return None
    pid, _, tail = name[len(prefix):].partition("-")
    pid = ascii_int(pid)
    if pid is None or not tail:
        return None
    kind, slot = split_kind(tail)
    return pid, kind, slot


def parse_ring_name(name, prefix):
    """'gs-<run>-<pid>-<kind>[.<n>]' -> (pid, kind) or None (a marker is not a ring)."""
    parsed = parse_ring_file(name, prefix)
    if parsed is None or parsed[2] == MARKER:
        return None
    return parsed[0], parsed[1]


def _describe(path):
    """What holds path when it cannot be opened as a file of ours (an
    RingError), or None when that is not the reason."""
    name = os.path.basename(path)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return RingError("%s: a symlink, not a ring; not followed" % name)
    if stat.S_ISDIR(st.st_mode):
        return RingError("%s: a directory, not a ring" % name)
    if not stat.S_ISREG(st.st_mode):
        return RingError("%s: not a regular file" % name)
    if st.st_uid != os.geteuid():
        return RingError("%s: owned by uid %d, not by this sidecar's uid %d" % (name, st.st_uid, os.geteuid()))
    return None


def _open_own(path, flags):
    """Opens a regular file of our own uid with mode 0600, never through a
    symlink and never waiting (a FIFO); RingError for anything else.
    Returns (fd, stat)."""
    name = os.path.basename(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENOENT:
            why = _describe(path)
            if why is not None:
                raise why
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RingError("%s: not a regular file" % name)
        if st.st_uid != os.geteuid():
            raise RingError("%s: owned by uid %d, not by this sidecar's uid %d" % (name, st.st_uid, os.geteuid()))
        if stat.S_IMODE(st.st_mode) != 0o600:
            raise RingError("%s: mode %o, a ring is 0600" % (name, stat.S_IMODE(st.st_mode)))
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def read_marker(path):
    """The reason a writer left in its marker (<ring name>.none: it has no
    ring), control characters escaped; RingError when the marker is not a
    file of ours (another user's, a symlink...)."""
    fd, _ = _open_own(path, os.O_RDONLY)
    try:
        data = os.read(fd, MARKER_MAX)
    finally:
        os.close(fd)
    return clean(data.decode("utf-8", "replace")).strip()


def _open_checked(path):
    """Opens a ring file for reading and writing its read index: never
    through a symlink, only a regular file of our own uid with mode 0600
    whose pages are all reserved (a sparse segment can fault its reader).
    Returns (fd, size)."""
    fd, st = _open_own(path, os.O_RDWR)
    try:
        name = os.path.basename(path)
        if st.st_size < L.HEADER_SIZE:
            raise RingError("%s: %d bytes, smaller than a ring header" % (name, st.st_size))
        # Writers reserve every page (posix_fallocate). SEEK_HOLE cannot tell
        # (tmpfs reports reserved, never written pages as holes); the blocks
        # the file holds can.
        if st.st_blocks * 512 < st.st_size:
            raise RingError("%s: not reserved (%d of %d bytes backed); its pages could fault" % (
                name, st.st_blocks * 512, st.st_size))
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


class Ring:
    """A mapped ring. stall_timeout: seconds an uncommitted slot may block
    the reader while later slots are committed before it is skipped (a
    writer thread that died between reserve and commit).

    The header is validated once, here; afterwards only this object's own
    copies of capacity, sizes and offsets are used, and the one index read
    from shared memory (write_index) is checked against them on every
    drain: a ring that stops making sense raises RingError."""

    def __init__(self, path, stall_timeout=5.0, clock=time.monotonic):
        self.path = path
        self.name = os.path.basename(path)
        self._clock = clock
        self.stall_timeout = stall_timeout
        fd, size = _open_checked(path)
        try:
            self._mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept: each drain checks that the file was not cut short under the map
        self.size = size
        hdr = np.frombuffer(self._mm, dtype=L.HEADER_DTYPE, count=1).copy()[0]  # a copy: no view pins the map
        problem = self._validate(hdr, size)
        if problem:
            self._mm.close()
            os.close(fd)
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
        self._cslots = self._cbuf + L.HEADER_SIZE
        self._mask = self.capacity - 1
        self.read_index = int(hdr["read_index"])
        w = int(hdr["write_index"])
        if not 0 <= w - self.read_index <= self.capacity:
            self.close()
            raise RingError("%s: write index %d and read index %d are %d apart, capacity %d" % (
                self.name, w, self.read_index, w - self.read_index, self.capacity))
        self.names = {}
        self.name_bytes = 0
        self.names_dropped = 0  # NAME records refused: over the caps, or pointing outside the string area
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
        if cap == 0 or cap & (cap - 1) or cap > L.MAX_CAPACITY:
            return "capacity %d is not a power of two up to %d" % (cap, L.MAX_CAPACITY)
        need = L.HEADER_SIZE + cap * L.RECORD_SIZE
        if int(hdr["strings_size"]) > L.MAX_STRINGS:
            return "string area of %d bytes, more than %d" % (int(hdr["strings_size"]), L.MAX_STRINGS)
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
        """Records written and not read yet (0 when the index makes no sense)."""
        n = self.write_index - self.read_index
        return n if 0 <= n <= self.capacity else 0

    def _check(self):
        """The write index (acquire), checked against our own read index and
        capacity, and the file still as large as our map."""
        w = int(L.lib.gs_load_acquire(self._cbuf + _W))
        if not 0 <= w - self.read_index <= self.capacity:
            raise RingError("%s: write index %d is %d records from the read index %d, capacity %d; "
                            "the ring no longer makes sense and is dropped" % (
                                self.name, w, w - self.read_index, self.read_index, self.capacity))
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            size = -1
        if size < self.size:
            raise RingError("%s: cut from %d to %d bytes under the reader; dropped" % (self.name, self.size, size))
        return w

    # -- draining ------------------------------------------------------------
    def drain(self, max_records=None, scratch=None):
        """Returns a copy of the committed records from read_index on (in
        index order, wrap-around handled) and releases their slots.

        scratch: an optional uint64 array to copy into (reused between
        drains to avoid fresh pages); the result is then a view of it,
        valid until the next drain into the same scratch."""
        r = self.read_index
        w = self._check()
        if w == r:
            self._stall_index = None
            return _EMPTY
        end = w if max_records is None else min(w, r + max_records)
        n = int(L.lib.gs_committed(self._cslots, self._mask, r, end))
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
        learned as [(id, sub, str)]. Names beyond MAX_NAMES (or longer than
        MAX_NAME_BYTES, or with an id no writer hands out, or outside the
        string area) are counted in names_dropped, not kept. A NAME record
        of id 0 is a writer's placeholder for a name that did not fit."""
        learned = []
        for rid, sub, off, ln in zip(recs["name_id"].tolist(), recs["sub"].tolist(),
                                     recs["value"].tolist(), recs["extra"].tolist()):
            if rid == 0:
                continue
            known = rid in self.names
            if rid > MAX_NAME_ID or ln > MAX_NAME_BYTES or (
                    not known and (len(self.names) >= MAX_NAMES or self.name_bytes + ln > self._strings_size)):
                self.names_dropped += 1
                continue
            s = self.string_at(off, ln)
            if s is None:
                self.names_dropped += 1
                continue
            if known:
                self.name_bytes -= len(self.names[rid])
            self.names[rid] = s
            self.name_bytes += len(s)
            learned.append((rid, sub, s))
        return learned

    def close(self):
        self._hdr = self._slots = self._words = None
        self._cbuf = self._cslots = None
        try:
            self._mm.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes with it
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

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
