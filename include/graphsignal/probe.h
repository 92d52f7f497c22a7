/*
 * Copyright 2026 Graphsignal, Inc.
 *
 * Licensed under the Apache License, Version 2.0 (the "License");
 * you may not use this file except in compliance with the License.
 * You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

/*
 * graphsignal/probe.h -- GPU probes for host code, and the shared-memory
 * ring they (and the CUPTI injection library) write into.
 *
 * Part 1 (this part) is the ring: the single definition of the layout
 * between writers inside the workload and the graphsignal-run sidecar. The
 * Python side compiles this header through cffi and checks the sizes and
 * offsets it mirrors in its numpy dtype at attach time. The layout lives in
 * the probe header so that a vendored copy of this one file stands alone.
 *
 * Segment layout (one POSIX shared-memory file in /dev/shm, mode 0600):
 *
 *   [0, 256)                      graphsignal_ring_header
 *   [256, 256 + 32 * capacity)    graphsignal_ring_record slots
 *   [strings_offset, +strings_size) string area (names, symbols, tags)
 *
 * Protocol (many writers, one reader):
 *   - A writer reserves index w by CAS on write_index, but only while
 *     w - read_index < capacity; otherwise the record is dropped and
 *     `dropped` is incremented. Reserving never waits. Writers compare
 *     against read_hint, a copy of read_index on their own cache line, and
 *     load read_index itself only when the ring looks full by the copy
 *     (the reader's line is not touched on every reserve).
 *   - It fills slot (w & (capacity - 1)) and publishes it with a release
 *     store of seq = w + 1 (per-slot commit word, so threads may finish
 *     out of order).
 *   - The reader consumes indices read_index.. while slot.seq == index + 1
 *     (acquire), copies them, then release-stores read_index. An
 *     uncommitted slot stops the reader until it is committed.
 *   - Strings are appended to the string area (bump allocator) before a
 *     NAME record that carries (offset, length) is committed, so the release
 *     of the record also publishes the bytes.
 *
 * Self-contained: only the C library and POSIX. C99 and C++11 or newer.
 * With a strict -std=c99, include this header first (it then asks for
 * POSIX 2008) or define _POSIX_C_SOURCE=200809L yourself. Every symbol is prefixed graphsignal_ / GRAPHSIGNAL_.
 */
#ifndef GRAPHSIGNAL_PROBE_H
#define GRAPHSIGNAL_PROBE_H

/* Strict ISO modes (-std=c99, -std=c++11) hide POSIX; ask for it then only,
 * so that GNU/default modes keep every declaration the includer expects. */
#if defined(__STRICT_ANSI__) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRAPHSIGNAL_RING_MAGIC 0x31474e4952534721ULL /* "!GSRING1" */
#define GRAPHSIGNAL_RING_VERSION 1u
#define GRAPHSIGNAL_RING_HEADER_SIZE 256u
#define GRAPHSIGNAL_RECORD_SIZE 32u
/* Ring sizes. The whole segment is reserved (posix_fallocate) when it is
 * created, so a writer never faults on a page /dev/shm cannot back. The
 * workload's own shared memory (DataLoader workers, NCCL) comes first, so
 * rings live within a budget of /dev/shm (graphsignal_ring_room):
 *   - the floor: creating a ring never takes /dev/shm below half of its size
 *     free. A ring that would is made smaller, down to MIN_DEFAULT_CAPACITY
 *     records (or the capacity asked for, when smaller), an explicit
 *     GRAPHSIGNAL_RING_CAPACITY included; when not even that fits there is
 *     no ring (errno ENOSPC) and that writer runs unprofiled. Checked again
 *     once the memory is reserved (writers that start together all see the
 *     same free space): a ring that took /dev/shm below the floor is given
 *     back and made again smaller, a bounded number of times.
 *   - the share: the default capacity (graphsignal_ring_default_capacity) is
 *     the largest power of two, MIN_DEFAULT to DEFAULT records, whose segment
 *     takes at most 1/8 of the space free above the floor, so each ring
 *     leaves 7/8 of that room to the next: 16 writers on Docker's 64 MiB
 *     /dev/shm get 4096 to 65536 records each and leave about 37 MiB free.
 * A smaller ring drops more records when the sidecar falls behind; drops are
 * counted (header.dropped), never waited for. */
#define GRAPHSIGNAL_RING_DEFAULT_CAPACITY (1u << 19)     /* records: the largest default, 16 MiB */
#define GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY (1u << 12) /* records: the smallest the budget makes, 640 KiB */
#define GRAPHSIGNAL_RING_MIN_CAPACITY 64u                /* GRAPHSIGNAL_RING_CAPACITY's bounds */
#define GRAPHSIGNAL_RING_MAX_CAPACITY (1u << 26)         /* records: 2 GiB */
#define GRAPHSIGNAL_RING_DEFAULT_STRINGS 0u /* 0: string area sized from the capacity (ring_strings_for) */
#define GRAPHSIGNAL_RING_MAX_STRINGS (64u << 20) /* bytes */
#define GRAPHSIGNAL_SHM_DIR "/dev/shm"
#define GRAPHSIGNAL_RING_PREFIX "gs-"
#define GRAPHSIGNAL_RUN_ID_ENV "GRAPHSIGNAL_RUN_ID"
#define GRAPHSIGNAL_RING_CAPACITY_ENV "GRAPHSIGNAL_RING_CAPACITY"
#define GRAPHSIGNAL_RING_FLAG_CLOSED 1u
#define GRAPHSIGNAL_RING_FLOOR_DIV 2u /* the floor: rings leave 1/2 of /dev/shm free */
#define GRAPHSIGNAL_RING_SHARE_DIV 8u /* the share: a default ring takes 1/8 of the room above the floor */
/* The names a ring may take: <name>, then <name>.1 .. <name>.3 while the
 * name before is held by something that is not a ring of this uid
 * (another user's file, a symlink, a directory, a FIFO: taking a name must
 * cost profiling at most, never the workload). A writer left without a ring
 * leaves the marker <name>.none (mode 0600, its content the reason), so the
 * sidecar can say which process runs unprofiled. Older copies of this
 * header only ever make <name> (and dot-files): the fallback names and the
 * marker are distinct from anything they make. */
#define GRAPHSIGNAL_RING_NAME_ATTEMPTS 4 /* one digit: graphsignal_ring_open writes the suffix so */
#define GRAPHSIGNAL_RING_MARKER_SUFFIX ".none"

/* Writer kinds (header.kind); also the last part of the ring's name. */
#define GRAPHSIGNAL_KIND_TEST 0u
#define GRAPHSIGNAL_KIND_CUPTI 1u
#define GRAPHSIGNAL_KIND_PROBE 2u
#define GRAPHSIGNAL_KIND_ROCM 3u
#define GRAPHSIGNAL_KIND_NVTX 4u /* the CUPTI library's NVTX ranges (csrc/cupti/nvtx_ranges.h) */
#define GRAPHSIGNAL_KIND_INTERPOSE 5u /* the CUDA driver interposer of --cuda-trace light (csrc/interpose) */

/* Record types (record.type). The poller dispatches on these. */
#define GRAPHSIGNAL_REC_NAME 1u      /* name_id := string(value=offset, extra=length); sub = name kind */
#define GRAPHSIGNAL_REC_KERNEL 2u    /* name_id symbol, device, value ns */
#define GRAPHSIGNAL_REC_GRAPH 3u     /* name_id graph name, device, value ns */
#define GRAPHSIGNAL_REC_MEMCPY 4u    /* sub CUpti_ActivityMemcpyKind, name_id src | dst << 8 (CUpti_ActivityMemoryKind),
                                        device, value ns, extra bytes */
#define GRAPHSIGNAL_REC_MEMSET 5u    /* sub CUpti_ActivityMemoryKind, device, value ns, extra bytes */
#define GRAPHSIGNAL_REC_SYNC 6u      /* sub CUpti_ActivitySynchronizationType, device, value ns */
#define GRAPHSIGNAL_REC_GAUGE 7u     /* name_id instrument, value (double bits) */
#define GRAPHSIGNAL_REC_COUNTER 8u   /* name_id instrument, value delta */
#define GRAPHSIGNAL_REC_HISTOGRAM 9u /* name_id instrument, value */
#define GRAPHSIGNAL_REC_PROFILE 10u  /* name_id instrument, extra frame name id, value */
#define GRAPHSIGNAL_REC_META 11u     /* sub meta key, value; process-level facts */
#define GRAPHSIGNAL_REC_DEVICE 12u   /* device ordinal -> name_id of its UUID string */
#define GRAPHSIGNAL_REC_HISTOGRAM_AGG 13u /* name_id instrument; pre-aggregated deltas (probe_cuda.h):
                                             sub 1: value count, extra sum; sub 2: value min, extra max;
                                             sub 3: value count in bin `extra` (log-linear bins, below) */
/* Calls counted by the CUPTI library's API callbacks (its hybrid collection), aggregated per thread: */
#define GRAPHSIGNAL_REC_MEMCPY_SAMPLED 14u /* sub copy kind, device, name_id src | dst << 8 | calls << 16,
                                              value estimated ns (sampled copy durations), extra bytes */
#define GRAPHSIGNAL_REC_MEMSET_SAMPLED 15u /* sub memory kind, device, name_id calls, value estimated ns,
                                              extra bytes */
#define GRAPHSIGNAL_REC_SYNC_AGG 16u       /* sub sync type, device, name_id calls, value host ns (exact) */
#define GRAPHSIGNAL_REC_PROFILE_AGG 17u /* name_id instrument, extra frame name id | samples << 32, value sum:
                                           a profile frame's samples aggregated by the writer */
/* Counted by the CUDA driver interposer (--cuda-trace light), no CUPTI; per flush, the counts' growth: */
#define GRAPHSIGNAL_REC_KERNEL_COUNT 18u  /* name_id symbol, device, value launches */
#define GRAPHSIGNAL_REC_GRAPH_SAMPLED 19u /* name_id graph name, device, value estimated ns (replays x the mean
                                             of the timed ones), extra replays | timed replays << 32 */
#define GRAPHSIGNAL_REC_MEMCPY_COUNT 20u  /* sub CUpti_ActivityMemcpyKind, device, name_id src | dst << 8
                                             (CUpti_ActivityMemoryKind where the side is host memory: 1
                                             pageable, 2 pinned, 5 managed; else 0, and 0 from an interposer
                                             older than the field), value calls, extra bytes */
#define GRAPHSIGNAL_REC_MEMSET_COUNT 21u  /* device, value calls, extra bytes */
#define GRAPHSIGNAL_REC_TEST 200u    /* used by tests and benchmarks */

/* HISTOGRAM_AGG parts (sub). */
#define GRAPHSIGNAL_AGG_COUNT_SUM 1u
#define GRAPHSIGNAL_AGG_MIN_MAX 2u
#define GRAPHSIGNAL_AGG_BIN 3u

/* Log-linear histogram bins (the sidecar's, mirrored by device probes): values
 * below 32 have a bin each; above, each power of two splits into 32 bins. */
#define GRAPHSIGNAL_HIST_SUB_BITS 5
#define GRAPHSIGNAL_HIST_NBINS 1920

/* META record keys (sub). */
#define GRAPHSIGNAL_META_CUDA_GRAPH_TRACE_MODE 1u /* value 0: graph, 1: node */

/* Name kinds (NAME record sub). */
#define GRAPHSIGNAL_NAME_PLAIN 0u
#define GRAPHSIGNAL_NAME_INSTRUMENT 1u /* "type\x1fname[\x1fkey\x1evalue]..." type: gauge|counter|histogram|profile */

typedef struct graphsignal_ring_header {
  uint64_t magic;          /* GRAPHSIGNAL_RING_MAGIC, written last at creation */
  uint32_t version;        /* GRAPHSIGNAL_RING_VERSION */
  uint32_t header_size;    /* GRAPHSIGNAL_RING_HEADER_SIZE */
  uint32_t record_size;    /* GRAPHSIGNAL_RECORD_SIZE */
  uint32_t kind;           /* GRAPHSIGNAL_KIND_* */
  uint64_t capacity;       /* records, a power of two */
  uint64_t strings_offset; /* byte offset of the string area */
  uint64_t strings_size;   /* bytes */
  uint64_t writer_pid;
  uint64_t start_ns;       /* CLOCK_REALTIME at creation */
  /* cache line 1: written by writers */
  uint64_t write_index;
  uint64_t read_hint;      /* a read_index some writer loaded: never ahead of it (0 until one looks) */
  uint64_t pad_w[6];
  /* cache line 2: written by the reader */
  uint64_t read_index;
  uint64_t pad_r[7];
  /* cache line 3: counters */
  uint64_t dropped;         /* records dropped because the ring was full */
  uint64_t strings_used;    /* bump pointer of the string area */
  uint64_t strings_dropped; /* strings that did not fit */
  uint64_t next_name_id;    /* last name id handed out (ids start at 1) */
  uint64_t flags;           /* GRAPHSIGNAL_RING_FLAG_* */
  uint64_t pad_c[3];
} graphsignal_ring_header;

typedef struct graphsignal_ring_record {
  uint64_t seq;     /* commit word: index + 1 once the slot holds record `index` */
  uint8_t type;     /* GRAPHSIGNAL_REC_* */
  uint8_t sub;      /* sub-kind: copy kind, sync kind, instrument type... */
  uint16_t device;  /* device ordinal in the writer process */
  uint32_t name_id; /* interned name (0: none) */
  uint64_t value;   /* duration in ns, or the recorded value */
  uint64_t extra;   /* bytes, frame name id, ... */
} graphsignal_ring_record;

#if defined(__cplusplus) && __cplusplus >= 201103L
#define GRAPHSIGNAL_STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define GRAPHSIGNAL_STATIC_ASSERT(c, m) _Static_assert(c, m)
#else
#define GRAPHSIGNAL_CAT2_(a, b) a##b
#define GRAPHSIGNAL_CAT_(a, b) GRAPHSIGNAL_CAT2_(a, b)
#define GRAPHSIGNAL_STATIC_ASSERT(c, m) \
  typedef char GRAPHSIGNAL_CAT_(graphsignal_static_assert_, __LINE__)[(c) ? 1 : -1]
#endif
GRAPHSIGNAL_STATIC_ASSERT(sizeof(graphsignal_ring_header) == GRAPHSIGNAL_RING_HEADER_SIZE, "header size");
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, write_index) == 64, "write_index line");
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, read_hint) == 72, "read_hint on the writers' line");
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, read_index) == 128, "read_index line");
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, dropped) == 192, "counters line");
GRAPHSIGNAL_STATIC_ASSERT(sizeof(graphsignal_ring_record) == GRAPHSIGNAL_RECORD_SIZE, "record size");
GRAPHSIGNAL_STATIC_ASSERT(GRAPHSIGNAL_RING_NAME_ATTEMPTS <= 10, "ring name suffixes are one digit");

#if defined(__GNUC__) || defined(__clang__)
#define GRAPHSIGNAL_LIKELY(x) __builtin_expect(!!(x), 1)
#define GRAPHSIGNAL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GRAPHSIGNAL_MAYBE_UNUSED __attribute__((unused))
#else
#define GRAPHSIGNAL_LIKELY(x) (x)
#define GRAPHSIGNAL_UNLIKELY(x) (x)
#define GRAPHSIGNAL_MAYBE_UNUSED
#endif

/* Wall-clock nanoseconds (CLOCK_REALTIME), the epoch the payload uses. */
static inline uint64_t graphsignal_ring_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline graphsignal_ring_record* graphsignal_ring_slots(graphsignal_ring_header* h) {
  return (graphsignal_ring_record*)((char*)h + GRAPHSIGNAL_RING_HEADER_SIZE);
}

static inline size_t graphsignal_ring_total_size(uint64_t capacity, uint64_t strings_size) {
  return (size_t)(GRAPHSIGNAL_RING_HEADER_SIZE + capacity * GRAPHSIGNAL_RECORD_SIZE + strings_size);
}

/* The string area that goes with `capacity` records: half the record area,
 * 512 KiB to 4 MiB. */
static inline uint64_t graphsignal_ring_strings_for(uint64_t capacity) {
  uint64_t s = capacity * GRAPHSIGNAL_RECORD_SIZE / 2;
  return s < (512u << 10) ? (512u << 10) : s > (4u << 20) ? (4u << 20) : s;
}

/* Non-zero when h is a ring this header version can write into. */
static inline int graphsignal_ring_valid(const graphsignal_ring_header* h, size_t mapped) {
  return h && __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == GRAPHSIGNAL_RING_MAGIC &&
         h->version == GRAPHSIGNAL_RING_VERSION && h->header_size == GRAPHSIGNAL_RING_HEADER_SIZE &&
         h->record_size == GRAPHSIGNAL_RECORD_SIZE && h->capacity && !(h->capacity & (h->capacity - 1)) &&
         h->capacity <= GRAPHSIGNAL_RING_MAX_CAPACITY && h->strings_size <= GRAPHSIGNAL_RING_MAX_STRINGS &&
         h->strings_offset == GRAPHSIGNAL_RING_HEADER_SIZE + h->capacity * GRAPHSIGNAL_RECORD_SIZE &&
         graphsignal_ring_total_size(h->capacity, h->strings_size) <= mapped;
}

/* Maps an opened ring file, which must be a regular file of ours. */
static inline graphsignal_ring_header* graphsignal_ring_map_fd(int fd, size_t* out_size) {
  struct stat st;
  void* p;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size < (off_t)GRAPHSIGNAL_RING_HEADER_SIZE)
    return NULL;
  p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return NULL;
  if (out_size) *out_size = (size_t)st.st_size;
  return (graphsignal_ring_header*)p;
}

#define GRAPHSIGNAL_RING_ROOM_UNKNOWN ((int64_t)(~(uint64_t)0 >> 1)) /* INT64_MAX */

/* What creating a ring may reserve now: the bytes /dev/shm has free above
 * its floor (half its size), negative below it; GRAPHSIGNAL_RING_ROOM_UNKNOWN
 * when statvfs cannot tell (posix_fallocate still refuses what does not fit). */
static inline int64_t graphsignal_ring_room(void) {
  struct statvfs vfs;
  uint64_t total, avail;
  if (statvfs(GRAPHSIGNAL_SHM_DIR, &vfs) != 0 || vfs.f_blocks == 0 || vfs.f_frsize == 0)
    return GRAPHSIGNAL_RING_ROOM_UNKNOWN;
  total = (uint64_t)vfs.f_blocks * (uint64_t)vfs.f_frsize;
  avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
  if (total > (uint64_t)GRAPHSIGNAL_RING_ROOM_UNKNOWN) return GRAPHSIGNAL_RING_ROOM_UNKNOWN;
  return (int64_t)avail - (int64_t)(total / GRAPHSIGNAL_RING_FLOOR_DIV);
}

/* Why a writer has no ring (errno from graphsignal_ring_open), for its one
 * line and its marker. */
static inline const char* graphsignal_ring_error_text(int err) {
  if (err == EEXIST)
    return "every name it may take in " GRAPHSIGNAL_SHM_DIR " is held by something that is not its ring"
           " (another user's file, a symlink, a directory)";
  if (err == ENOSPC) return "No space left on device within the ring budget (rings leave half of " GRAPHSIGNAL_SHM_DIR
                            " free for the workload)";
  return strerror(err);
}

/* What holds a name (graphsignal_ring_attach_). */
#define GRAPHSIGNAL_RING_ABSENT_ 0 /* nothing: the name is free */
#define GRAPHSIGNAL_RING_TAKEN_ 1  /* something that is not a ring of ours */
#define GRAPHSIGNAL_RING_FAILED_ 2 /* nothing could be told (out of descriptors or memory): errno */
#define GRAPHSIGNAL_RING_BUDGET_TRIES_ 4 /* reservations that may find the floor crossed by others meanwhile */

/* The ring at path when it is one of this uid's; else NULL and *fate.
 * Never follows a symlink and never blocks (a FIFO opens at once). */
static inline graphsignal_ring_header* graphsignal_ring_attach_(const char* path, size_t* out_size, int* fate) {
  size_t size = 0;
  graphsignal_ring_header* h;
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    *fate = errno == ENOENT                                         ? GRAPHSIGNAL_RING_ABSENT_
            : (errno == EMFILE || errno == ENFILE || errno == ENOMEM) ? GRAPHSIGNAL_RING_FAILED_
                                                                      : GRAPHSIGNAL_RING_TAKEN_;
    return NULL;
  }
  h = graphsignal_ring_map_fd(fd, &size);
  close(fd);
  if (h && graphsignal_ring_valid(h, size)) {
    *out_size = size;
    return h;
  }
  if (h) munmap(h, size);
  *fate = GRAPHSIGNAL_RING_TAKEN_;
  return NULL;
}

/* Creates the ring /dev/shm/<name> (path): built under a temporary name,
 * its memory reserved within the budget (see GRAPHSIGNAL_RING_FLOOR_DIV),
 * then linked into place. NULL with errno EEXIST when something took the
 * name (or the temporary one) meanwhile, ENOSPC when not even the smallest
 * ring fits the budget. */
static inline graphsignal_ring_header* graphsignal_ring_create_(const char* name, const char* path, uint32_t kind,
                                                                uint64_t cap, uint64_t strings_size,
                                                                size_t* out_size) {
  char tmp[320];
  int fd = -1, err = ENOSPC, attempt;
  const uint64_t min_cap = cap < GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY ? cap : GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY;
  uint64_t strings = strings_size;
  size_t size = 0;
  int64_t room;
  graphsignal_ring_header* h;
  snprintf(tmp, sizeof tmp, GRAPHSIGNAL_SHM_DIR "/.%s.tmp%ld.%p", name, (long)getpid(), (void*)&fd);
  for (attempt = 0; attempt < GRAPHSIGNAL_RING_BUDGET_TRIES_; attempt++) {
    room = graphsignal_ring_room();
    for (;;) {
      strings = strings_size ? strings_size : graphsignal_ring_strings_for(cap);
      size = graphsignal_ring_total_size(cap, strings);
      if (cap <= min_cap || room < 0 || (uint64_t)size <= (uint64_t)room) break;
      cap >>= 1;
    }
    if (room < 0 || (uint64_t)size > (uint64_t)room) {
      err = ENOSPC;
      break;
    }
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) return NULL; /* errno: EEXIST when the temporary name is taken too */
    /* exactly 0600 whatever the umask: the sidecar accepts nothing else */
    err = fchmod(fd, 0600) != 0 ? errno : 0;
    if (!err && ftruncate(fd, (off_t)size) != 0) err = errno;
    if (!err) err = posix_fallocate(fd, 0, (off_t)size);
    if (!err && graphsignal_ring_room() < 0) err = ENOSPC; /* others took their share meanwhile */
    if (!err) break;
    close(fd);
    fd = -1;
    unlink(tmp);
    if (err != ENOSPC) break;
  }
  if (fd < 0) {
    errno = err;
    return NULL;
  }
  h = (graphsignal_ring_header*)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  close(fd);
  if ((void*)h == MAP_FAILED) {
    unlink(tmp);
    errno = err;
    return NULL;
  }
  h->version = GRAPHSIGNAL_RING_VERSION;
  h->header_size = GRAPHSIGNAL_RING_HEADER_SIZE;
  h->record_size = GRAPHSIGNAL_RECORD_SIZE;
  h->kind = kind;
  h->capacity = cap;
  h->strings_offset = GRAPHSIGNAL_RING_HEADER_SIZE + cap * GRAPHSIGNAL_RECORD_SIZE;
  h->strings_size = strings;
  h->writer_pid = (uint64_t)getpid();
  h->start_ns = graphsignal_ring_realtime_ns();
  __atomic_store_n(&h->magic, GRAPHSIGNAL_RING_MAGIC, __ATOMIC_RELEASE);
  if (link(tmp, path) != 0) {
    err = errno;
    unlink(tmp);
    munmap(h, size);
    errno = err;
    return NULL;
  }
  unlink(tmp);
  *out_size = size;
  return h;
}

/* Leaves /dev/shm/<name>.none saying why this writer has no ring, for the
 * sidecar; never through a symlink, never over an existing file, and a
 * failure changes nothing. */
static inline void graphsignal_ring_leave_marker_(const char* name, int err) {
  char path[272], tmp[320];
  const char* why = graphsignal_ring_error_text(err);
  int fd = -1;
  snprintf(path, sizeof path, GRAPHSIGNAL_SHM_DIR "/%s" GRAPHSIGNAL_RING_MARKER_SUFFIX, name);
  snprintf(tmp, sizeof tmp, GRAPHSIGNAL_SHM_DIR "/.%s" GRAPHSIGNAL_RING_MARKER_SUFFIX ".tmp%ld.%p", name,
           (long)getpid(), (void*)&fd);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return;
  if (fchmod(fd, 0600) == 0) {
    if (write(fd, why, strlen(why)) < 0) { /* a full /dev/shm: an empty marker still names the process */
    }
    if (link(tmp, path) != 0) { /* taken: the sidecar sees what holds it instead */
    }
  }
  close(fd);
  unlink(tmp);
}

/*
 * Opens this process's ring /dev/shm/<name>, creating it when it does not
 * exist. Creation is atomic: the segment is built under a temporary name
 * and linked into place, so a concurrent opener (another thread, or
 * another translation unit with its own copy of this header) sees either
 * no ring or a complete one. A name held by anything but a ring of this
 * uid is passed over for the next of GRAPHSIGNAL_RING_NAME_ATTEMPTS names
 * (<name>.1 ...), each tried at most twice; when all are taken there is no
 * ring (errno EEXIST). Its memory is reserved up front within the /dev/shm
 * budget (posix_fallocate; see GRAPHSIGNAL_RING_FLOOR_DIV): a ring that does
 * not fit is made smaller, and when not even the smallest fits there is no
 * ring (errno ENOSPC), never a ring whose pages fault later. Without a ring
 * the marker <name>.none says why. Returns NULL (and never aborts, loops
 * without bound or waits) on any failure, with errno set; the caller runs
 * unprofiled and should not call again for every record. capacity is
 * rounded up to a power of two (at most GRAPHSIGNAL_RING_MAX_CAPACITY);
 * strings_size 0 takes graphsignal_ring_strings_for(capacity).
 */
static inline graphsignal_ring_header* graphsignal_ring_open(const char* name, uint32_t kind, uint64_t capacity,
                                                             uint64_t strings_size, size_t* out_size) {
  char path[272], cand[216];
  int i, fate = GRAPHSIGNAL_RING_ABSENT_, err = EEXIST;
  size_t size = 0;
  uint64_t cap = 1;
  graphsignal_ring_header* h = NULL;
  if (!name || strlen(name) > 200 || strchr(name, '/')) {
    errno = EINVAL;
    return NULL;
  }
  while (cap < capacity && cap < GRAPHSIGNAL_RING_MAX_CAPACITY) cap <<= 1;
  if (strings_size > GRAPHSIGNAL_RING_MAX_STRINGS) strings_size = GRAPHSIGNAL_RING_MAX_STRINGS;
  for (i = 0; i < GRAPHSIGNAL_RING_NAME_ATTEMPTS && !h; i++) {
    /* <name> or <name>.<i>, copied by length (at most 200 + 2 bytes): a
     * "%s" into these buffers warns under gcc's -Wformat-truncation, which
     * cannot see the length check above, and breaks -Werror builds */
    size_t n = strlen(name), dir = sizeof(GRAPHSIGNAL_SHM_DIR "/") - 1;
    memcpy(cand, name, n);
    if (i > 0) {
      cand[n++] = '.';
      cand[n++] = (char)('0' + i);
    }
    cand[n] = 0;
    memcpy(path, GRAPHSIGNAL_SHM_DIR "/", dir);
    memcpy(path + dir, cand, n + 1);
    h = graphsignal_ring_attach_(path, &size, &fate);
    if (!h && fate == GRAPHSIGNAL_RING_ABSENT_) {
      h = graphsignal_ring_create_(cand, path, kind, cap, strings_size, &size);
      /* EEXIST: made meanwhile, by another thread or copy of this header (then it is ours) or not */
      if (!h && errno == EEXIST) h = graphsignal_ring_attach_(path, &size, &fate);
      else if (!h) fate = GRAPHSIGNAL_RING_FAILED_;
    }
    if (!h && fate == GRAPHSIGNAL_RING_FAILED_) {
      err = errno;
      break;
    }
  }
  if (h) {
    if (out_size) *out_size = size;
    return h;
  }
  graphsignal_ring_leave_marker_(name, err);
  errno = err;
  return NULL;
}

/*
 * Reserves the next slot. Returns NULL when the ring is full (the record is
 * counted in `dropped`); never waits. The caller fills the slot and calls
 * graphsignal_ring_commit(slot, *index).
 *
 * The room is checked against read_hint (Erik Rigtorp's SPSCQueue caches
 * its read index the same way): it sits on the writers' own cache line, so
 * a reserve reads no line the reader writes. Only when the ring looks full
 * by the hint is read_index loaded (acquire) and the hint refreshed. The
 * hint is only ever a value read_index had, and read_index only grows, so
 * a stale hint makes the ring look fuller than it is, never emptier: a
 * record is dropped only after a fresh read_index says the ring is full.
 * Ordering: the reader release-stores read_index after copying the slots
 * below it; a writer acquires it, release-stores it as the hint, and a
 * writer that uses the hint acquires that store, so whoever overwrites a
 * slot happens after the reader's copy of it.
 */
static inline graphsignal_ring_record* graphsignal_ring_reserve(graphsignal_ring_header* h, uint64_t* index) {
  const uint64_t cap = h->capacity;
  uint64_t w = __atomic_load_n(&h->write_index, __ATOMIC_RELAXED);
  uint64_t r = __atomic_load_n(&h->read_hint, __ATOMIC_ACQUIRE);
  for (;;) {
    if (GRAPHSIGNAL_UNLIKELY(w - r >= cap)) {
      /* Full by the hint: the reader's own index. Acquire: the reader
       * finished copying the slot before it moved past it. */
      uint64_t fresh = __atomic_load_n(&h->read_index, __ATOMIC_ACQUIRE);
      if (fresh != r) {
        r = fresh;
        __atomic_store_n(&h->read_hint, r, __ATOMIC_RELEASE);
      }
      if (w - r >= cap) {
        /* w was loaded before r: other writers and the reader may both have
         * moved on since (then w < r, and w - r wrapped). Only a ring that
         * is still full with a fresh write index drops the record. */
        uint64_t w2 = __atomic_load_n(&h->write_index, __ATOMIC_RELAXED);
        if (w2 != w) {
          w = w2;
          continue;
        }
        __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
        return NULL;
      }
    }
    if (GRAPHSIGNAL_LIKELY(__atomic_compare_exchange_n(&h->write_index, &w, w + 1, 1, __ATOMIC_RELAXED,
                                                       __ATOMIC_RELAXED)))
      break;
    /* another writer took w (w is now the current index): it may have
     * refreshed the hint on the way, and the hint's line is the one just read */
    r = __atomic_load_n(&h->read_hint, __ATOMIC_ACQUIRE);
  }
  *index = w;
  return graphsignal_ring_slots(h) + (w & (cap - 1));
}

static inline void graphsignal_ring_commit(graphsignal_ring_record* slot, uint64_t index) {
  __atomic_store_n(&slot->seq, index + 1, __ATOMIC_RELEASE);
}

/* Writes one record; returns 0 when it was dropped. */
static inline int graphsignal_ring_write(graphsignal_ring_header* h, uint8_t type, uint8_t sub, uint16_t device,
                                         uint32_t name_id, uint64_t value, uint64_t extra) {
  uint64_t index;
  graphsignal_ring_record* s = graphsignal_ring_reserve(h, &index);
  if (GRAPHSIGNAL_UNLIKELY(!s)) return 0;
  s->type = type;
  s->sub = sub;
  s->device = device;
  s->name_id = name_id;
  s->value = value;
  s->extra = extra;
  graphsignal_ring_commit(s, index);
  return 1;
}

/* A fresh name id for this ring (never 0). */
static inline uint32_t graphsignal_ring_new_name_id(graphsignal_ring_header* h) {
  return (uint32_t)(__atomic_add_fetch(&h->next_name_id, 1, __ATOMIC_RELAXED));
}

/*
 * Sends (id -> bytes) to the reader: bytes go to the string area, then a
 * NAME record points at them. With *id == 0 a fresh id is taken once the
 * slot is reserved (so failed attempts use up no ids) and stored in *id.
 * Returns 0 when the ring is full (counted in `dropped`; nothing is used
 * up, so the caller may try again later) or when the string area is full
 * (counted in `strings_dropped`; that will not change).
 */
static inline int graphsignal_ring_put_name(graphsignal_ring_header* h, uint32_t* id, uint8_t name_kind,
                                            const char* bytes, size_t len) {
  uint64_t index, off;
  graphsignal_ring_record* s;
  if ((uint64_t)len > h->strings_size) {
    __atomic_fetch_add(&h->strings_dropped, 1, __ATOMIC_RELAXED);
    return 0;
  }
  /* the slot first: a full ring must not use up string bytes */
  s = graphsignal_ring_reserve(h, &index);
  if (GRAPHSIGNAL_UNLIKELY(!s)) return 0;
  off = __atomic_fetch_add(&h->strings_used, (uint64_t)len, __ATOMIC_RELAXED);
  s->type = GRAPHSIGNAL_REC_NAME;
  s->sub = name_kind;
  s->device = 0;
  if (off + len > h->strings_size) {
    /* the reserved slot must still be committed: a name of id 0 is nothing */
    __atomic_fetch_add(&h->strings_dropped, 1, __ATOMIC_RELAXED);
    s->name_id = 0;
    s->value = 0;
    s->extra = 0;
    graphsignal_ring_commit(s, index);
    return 0;
  }
  memcpy((char*)h + h->strings_offset + off, bytes, len);
  if (!*id) *id = graphsignal_ring_new_name_id(h);
  s->name_id = *id;
  s->value = off;
  s->extra = (uint64_t)len;
  graphsignal_ring_commit(s, index);
  return 1;
}

/* graphsignal_ring_put_name with a given id; returns 0 when it was not sent. */
static inline int graphsignal_ring_send_name(graphsignal_ring_header* h, uint32_t id, uint8_t name_kind,
                                             const char* bytes, size_t len) {
  return id ? graphsignal_ring_put_name(h, &id, name_kind, bytes, len) : 0;
}

/* Non-zero while the string area has room for len more bytes. */
static inline int graphsignal_ring_strings_room(const graphsignal_ring_header* h, size_t len) {
  return __atomic_load_n(&h->strings_used, __ATOMIC_RELAXED) + (uint64_t)len <= h->strings_size;
}

/* Marks the ring closed: the writer will not write again (clean exit). */
static inline void graphsignal_ring_close(graphsignal_ring_header* h) {
  __atomic_fetch_or(&h->flags, (uint64_t)GRAPHSIGNAL_RING_FLAG_CLOSED, __ATOMIC_RELEASE);
}

/* The default capacity for this /dev/shm now: the largest power of two,
 * MIN_DEFAULT to DEFAULT records, whose segment takes at most 1/SHARE_DIV of
 * the space free above the floor (see GRAPHSIGNAL_RING_FLOOR_DIV). */
static inline uint64_t graphsignal_ring_default_capacity(void) {
  int64_t room = graphsignal_ring_room();
  uint64_t share, cap = GRAPHSIGNAL_RING_DEFAULT_CAPACITY;
  if (room == GRAPHSIGNAL_RING_ROOM_UNKNOWN) return 1u << 16; /* 3 MiB; the reservation says whether it fits */
  share = room > 0 ? (uint64_t)room / GRAPHSIGNAL_RING_SHARE_DIV : 0;
  while (cap > GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY &&
         (uint64_t)graphsignal_ring_total_size(cap, graphsignal_ring_strings_for(cap)) > share)
    cap >>= 1;
  return cap;
}

/* GRAPHSIGNAL_RING_CAPACITY (records, GRAPHSIGNAL_RING_MIN_CAPACITY to
 * GRAPHSIGNAL_RING_MAX_CAPACITY) or 0 when it is unset or not such a
 * number; graphsignal-run checks it (one line) before the workload starts. */
static inline uint64_t graphsignal_ring_env_capacity_value(void) {
  const char* s = getenv(GRAPHSIGNAL_RING_CAPACITY_ENV);
  uint64_t v = 0;
  if (!s || !*s) return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > GRAPHSIGNAL_RING_MAX_CAPACITY) return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  return v >= GRAPHSIGNAL_RING_MIN_CAPACITY && v <= GRAPHSIGNAL_RING_MAX_CAPACITY ? v : 0;
}

/* Ring capacity from the environment, or the default for this /dev/shm. */
static inline uint64_t graphsignal_ring_env_capacity(void) {
  uint64_t v = graphsignal_ring_env_capacity_value();
  return v ? v : graphsignal_ring_default_capacity();
}

/*
 * Builds the ring name for this process and writer kind:
 * gs-<run id>-<pid>-<kind>. Returns 0 outside graphsignal-run (no run id).
 */
static inline int graphsignal_ring_name(char* out, size_t n, const char* kind_name) {
  const char* run = getenv(GRAPHSIGNAL_RUN_ID_ENV);
  int k;
  if (!run || !*run || strlen(run) > 64) return 0;
  k = snprintf(out, n, GRAPHSIGNAL_RING_PREFIX "%s-%ld-%s", run, (long)getpid(), kind_name);
  return k > 0 && (size_t)k < n;
}


/* ========================================================================
 * Part 2: probes.
 *
 *   static graphsignal_probe_entry* g_batch_ns;
 *   g_batch_ns = graphsignal_probe_register(
 *       "myengine_batch_duration_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
 *   uint64_t t0 = graphsignal_now_ns();
 *   ... work ...
 *   graphsignal_record(g_batch_ns, graphsignal_now_ns() - t0);
 *
 * Under graphsignal-run (GRAPHSIGNAL_RUN_ID in the environment) registering
 * creates this process's probe ring, /dev/shm/gs-<run>-<pid>-probe (or a
 * fallback name, see GRAPHSIGNAL_RING_NAME_ATTEMPTS), and every record call
 * is one ring write: a CAS on the write index, four stores and a
 * release store, lock-free, never waiting (a full ring drops and counts).
 * Outside graphsignal-run registration returns an inert entry, no shared
 * memory is created, and a record call is one predictable branch. NULL
 * entries are safe to record into.
 *
 * Values: histograms, counters and profiles take unsigned 64-bit integers
 * (nanoseconds, bytes, counts); the sidecar sums them exactly and reports
 * histogram count/sum/min/max exactly and p50/p95/p99 within 1.6%. Gauges
 * take doubles; the last value set wins.
 *
 * Processes: each process that records has its own ring (a forked child
 * re-registers its instruments in its own ring on its first record), and
 * its metrics carry its process.pid tag.
 *
 * Several translation units may include this header: each keeps its own
 * registry and they share the process's ring.
 * ======================================================================== */

/* Instrument types. */
typedef enum graphsignal_probe_type {
  GRAPHSIGNAL_GAUGE = 1,     /* last value set (double) */
  GRAPHSIGNAL_COUNTER = 2,   /* cumulative sum of added values */
  GRAPHSIGNAL_HISTOGRAM = 3, /* distribution: count, sum, min, max, quantiles */
  GRAPHSIGNAL_PROFILE = 4    /* value and samples per named frame (up to 250 frames shown, the largest) */
} graphsignal_probe_type;

#define GRAPHSIGNAL_PROBE_MAX_TAGS 16
#define GRAPHSIGNAL_PROBE_FRAME_SLOTS 16384 /* distinct frame names per process; beyond: "(other)" */

struct graphsignal_probe_state_;

/* A registered instrument. Treat as opaque. */
typedef struct graphsignal_probe_entry {
  graphsignal_ring_header* ring;          /* NULL: inert */
  uint64_t id_epoch;                      /* fork epoch << 32 | instrument id in `ring` */
  struct graphsignal_probe_state_* state; /* the registry that owns the entry */
  int type;
  char* def; /* "type\x1fname[\x1fkey\x1evalue]..." as sent to the sidecar */
  size_t def_len;
  struct graphsignal_probe_entry* next;
  void* device_data; /* used by probe_cuda.h / probe_rocm.h */
  uint64_t def_hash;
} graphsignal_probe_entry;

/* id_epoch's epoch while an entry has no id in the current ring yet (its
 * name did not fit into a full ring): the next record retries. No fork
 * epoch takes this value. */
#define GRAPHSIGNAL_PROBE_UNBOUND_ 0xFFFFFFFFu

typedef struct graphsignal_probe_frame_slot_ {
  uint64_t hash;     /* 0: empty; published last */
  uint64_t id_epoch; /* fork epoch << 32 | frame name id */
  char* name;
} graphsignal_probe_frame_slot_;

typedef struct graphsignal_probe_state_ {
  pthread_mutex_t lock;
  int mode; /* 0: not decided yet, 1: collecting, -1: inert */
  int atfork_registered;
  uint32_t epoch; /* bumped in a forked child */
  uint32_t ring_epoch;
  graphsignal_ring_header* ring;
  graphsignal_probe_entry* entries;
  graphsignal_probe_frame_slot_* frames;
  uint32_t other_frame_id;
  uint32_t other_frame_epoch;
  graphsignal_probe_entry inert;
  /* entries by definition (open addressing, at most half full), so that
   * registering n instruments costs O(n), not O(n^2) */
  graphsignal_probe_entry** table;
  size_t table_size;
  size_t table_used;
  int ring_tried; /* this epoch's ring was attempted (a failure is not retried per registration) */
} graphsignal_probe_state_;

static inline graphsignal_probe_state_* graphsignal_probe_state_get_(void) {
  static graphsignal_probe_state_ s = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, NULL, NULL, NULL, 0, 0,
                                       {NULL, 0, NULL, 0, NULL, 0, NULL, NULL, 0}, NULL, 0, 0, 0};
  return &s;
}

/* Monotonic nanoseconds (CLOCK_MONOTONIC), for durations. */
static inline uint64_t graphsignal_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void graphsignal_probe_atfork_child_(void) {
  graphsignal_probe_state_* st = graphsignal_probe_state_get_();
  /* The parent's ring stays mapped but is no longer ours: the child gets its
   * own ring, lazily, on its first record. */
  pthread_mutex_init(&st->lock, NULL);
  st->epoch++;
  if (st->epoch == GRAPHSIGNAL_PROBE_UNBOUND_) st->epoch = 0;
  st->ring = NULL;
}

/* Creates this process's probe ring if needed; call with the lock held. */
static inline graphsignal_ring_header* graphsignal_probe_ring_locked_(graphsignal_probe_state_* st) {
  char name[256];
  size_t size = 0;
  if (st->ring_epoch == st->epoch && (st->ring || st->ring_tried)) return st->ring;
  st->ring = NULL;
  st->ring_tried = 1;
  st->ring_epoch = st->epoch;
  if (!graphsignal_ring_name(name, sizeof name, "probe")) return NULL;
  st->ring = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_PROBE, graphsignal_ring_env_capacity(),
                                   GRAPHSIGNAL_RING_DEFAULT_STRINGS, &size);
  st->ring_epoch = st->epoch;
  return st->ring;
}

/* Gives e an id in the current ring (after registration or a fork). Returns
 * 0 without a ring. When the ring is full the entry stays unbound and its
 * next record tries again; when the string area is full the entry goes
 * inert (the sidecar counts the names that did not fit). */
static inline int graphsignal_probe_bind_locked_(graphsignal_probe_state_* st, graphsignal_probe_entry* e) {
  graphsignal_ring_header* h = graphsignal_probe_ring_locked_(st);
  uint32_t id;
  if (!h) return 0;
  e->ring = h;
  if (!graphsignal_ring_strings_room(h, e->def_len)) {
    __atomic_fetch_add(&h->strings_dropped, 1, __ATOMIC_RELAXED);
    e->ring = NULL;
    return 1;
  }
  id = 0;
  if (!graphsignal_ring_put_name(h, &id, GRAPHSIGNAL_NAME_INSTRUMENT, e->def, e->def_len)) {
    if (!graphsignal_ring_strings_room(h, e->def_len)) e->ring = NULL;
    __atomic_store_n(&e->id_epoch, (uint64_t)GRAPHSIGNAL_PROBE_UNBOUND_ << 32, __ATOMIC_RELEASE);
    return 1;
  }
  __atomic_store_n(&e->id_epoch, ((uint64_t)st->epoch << 32) | id, __ATOMIC_RELEASE);
  return 1;
}

/* Binds e in the current ring; non-zero when it has an id there. A retry
 * after a full ring never waits for the lock (the record is dropped). */
static inline int graphsignal_probe_refresh_(graphsignal_probe_entry* e) {
  graphsignal_probe_state_* st = e->state;
  uint64_t ie = __atomic_load_n(&e->id_epoch, __ATOMIC_ACQUIRE);
  if ((uint32_t)(ie >> 32) == GRAPHSIGNAL_PROBE_UNBOUND_) {
    if (pthread_mutex_trylock(&st->lock) != 0) return 0;
  } else {
    pthread_mutex_lock(&st->lock);
  }
  if ((uint32_t)(__atomic_load_n(&e->id_epoch, __ATOMIC_ACQUIRE) >> 32) != st->epoch)
    graphsignal_probe_bind_locked_(st, e);
  ie = __atomic_load_n(&e->id_epoch, __ATOMIC_ACQUIRE);
  pthread_mutex_unlock(&st->lock);
  return e->ring != NULL && (uint32_t)(ie >> 32) == st->epoch;
}

static inline void graphsignal_probe_def_append_(char* buf, size_t* n, size_t cap, const char* s) {
  for (; s && *s && *n + 1 < cap; s++)
    if (*s != '\x1f' && *s != '\x1e') buf[(*n)++] = *s; /* separators cannot appear inside a field */
}

static inline uint64_t graphsignal_probe_hash_bytes_(const char* s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

/* The registered entry with this definition, or NULL; with the lock held. */
static inline graphsignal_probe_entry* graphsignal_probe_find_locked_(graphsignal_probe_state_* st, const char* def,
                                                                      size_t n, uint64_t h) {
  size_t i;
  if (!st->table) return NULL;
  for (i = (size_t)h & (st->table_size - 1); st->table[i]; i = (i + 1) & (st->table_size - 1)) {
    graphsignal_probe_entry* e = st->table[i];
    if (e->def_hash == h && e->def_len == n && memcmp(e->def, def, n) == 0) return e;
  }
  return NULL;
}

/* Adds e to the table (growing it); 0 when out of memory. */
static inline int graphsignal_probe_insert_locked_(graphsignal_probe_state_* st, graphsignal_probe_entry* e) {
  size_t i;
  if ((st->table_used + 1) * 2 > st->table_size) {
    size_t size = st->table_size ? st->table_size * 2 : 256, j;
    graphsignal_probe_entry** t = (graphsignal_probe_entry**)calloc(size, sizeof *t);
    if (!t) return 0;
    for (j = 0; j < st->table_size; j++) {
      graphsignal_probe_entry* x = st->table[j];
      if (!x) continue;
      for (i = (size_t)x->def_hash & (size - 1); t[i]; i = (i + 1) & (size - 1)) {
      }
      t[i] = x;
    }
    free(st->table);
    st->table = t;
    st->table_size = size;
  }
  for (i = (size_t)e->def_hash & (st->table_size - 1); st->table[i]; i = (i + 1) & (st->table_size - 1)) {
  }
  st->table[i] = e;
  st->table_used++;
  return 1;
}

/*
 * Registers an instrument and returns its entry; idempotent per (name, type,
 * tags) within a translation unit. name: the metric name, with its unit
 * (e.g. "myengine_batch_duration_nanoseconds"). tag_keys/tag_values: ntags
 * strings each (up to 16), or NULL, NULL, 0. Outside graphsignal-run the
 * entry is inert. Returns NULL only for invalid arguments; recording into
 * NULL is a no-op. Takes a lock: call it at initialization, not per record.
 */
static inline graphsignal_probe_entry* graphsignal_probe_register(const char* name, graphsignal_probe_type type,
                                                                  const char** tag_keys, const char** tag_values,
                                                                  size_t ntags) {
  static const char* const type_names[] = {"", "gauge", "counter", "histogram", "profile"};
  graphsignal_probe_state_* st = graphsignal_probe_state_get_();
  graphsignal_probe_entry* e;
  char def[4096];
  size_t n = 0, i;
  uint64_t hash;
  if (!name || !*name || (int)type < GRAPHSIGNAL_GAUGE || (int)type > GRAPHSIGNAL_PROFILE ||
      ntags > GRAPHSIGNAL_PROBE_MAX_TAGS || (ntags && (!tag_keys || !tag_values)))
    return NULL;
  pthread_mutex_lock(&st->lock);
  if (st->mode == 0) {
    const char* run = getenv(GRAPHSIGNAL_RUN_ID_ENV);
    st->mode = (run && *run) ? 1 : -1;
    if (st->mode == 1 && !st->atfork_registered) {
      pthread_atfork(NULL, NULL, graphsignal_probe_atfork_child_);
      st->atfork_registered = 1;
    }
  }
  if (st->mode < 0) {
    pthread_mutex_unlock(&st->lock);
    return &st->inert;
  }
  graphsignal_probe_def_append_(def, &n, sizeof def, type_names[type]);
  def[n++] = '\x1f';
  graphsignal_probe_def_append_(def, &n, sizeof def, name);
  for (i = 0; i < ntags; i++) {
    if (!tag_keys[i] || !*tag_keys[i] || n + 2 >= sizeof def) continue;
    def[n++] = '\x1f';
    graphsignal_probe_def_append_(def, &n, sizeof def, tag_keys[i]);
    if (n + 1 >= sizeof def) break;
    def[n++] = '\x1e';
    graphsignal_probe_def_append_(def, &n, sizeof def, tag_values[i]);
  }
  hash = graphsignal_probe_hash_bytes_(def, n);
  e = graphsignal_probe_find_locked_(st, def, n, hash);
  if (!e) {
    e = (graphsignal_probe_entry*)calloc(1, sizeof *e);
    if (e) e->def = (char*)malloc(n);
    if (!e || !e->def) {
      if (e) free(e);
      pthread_mutex_unlock(&st->lock);
      return &st->inert;
    }
    memcpy(e->def, def, n);
    e->def_len = n;
    e->def_hash = hash;
    e->type = (int)type;
    e->state = st;
    e->id_epoch = (uint64_t)GRAPHSIGNAL_PROBE_UNBOUND_ << 32; /* unbound until bind */
    if (graphsignal_probe_bind_locked_(st, e) && graphsignal_probe_insert_locked_(st, e)) {
      e->next = st->entries;
      st->entries = e;
    } else {
      /* no ring (shared memory unavailable): stay inert, say so once */
      static int warned;
      if (!warned) {
        warned = 1;
        fprintf(stderr, "graphsignal: probes inactive: cannot create the probe ring in " GRAPHSIGNAL_SHM_DIR
                        ": %s\n", graphsignal_ring_error_text(errno));
      }
      free(e->def);
      free(e);
      e = &st->inert;
    }
  }
  pthread_mutex_unlock(&st->lock);
  return e;
}

static inline void graphsignal_probe_emit_(graphsignal_probe_entry* e, uint8_t type, uint64_t v, uint64_t extra) {
  uint64_t ie = __atomic_load_n(&e->id_epoch, __ATOMIC_RELAXED);
  if (GRAPHSIGNAL_UNLIKELY((uint32_t)(ie >> 32) != e->state->epoch)) {
    if (!graphsignal_probe_refresh_(e)) return;
    ie = __atomic_load_n(&e->id_epoch, __ATOMIC_ACQUIRE);
  }
  graphsignal_ring_write(e->ring, type, 0, 0, (uint32_t)ie, v, extra);
}

/* Records one value into a histogram. */
static inline void graphsignal_record(graphsignal_probe_entry* e, uint64_t value) {
  if (e == NULL || e->ring == NULL) return;
  graphsignal_probe_emit_(e, GRAPHSIGNAL_REC_HISTOGRAM, value, 0);
}

/* Adds to a counter. */
static inline void graphsignal_add(graphsignal_probe_entry* e, uint64_t delta) {
  if (e == NULL || e->ring == NULL) return;
  graphsignal_probe_emit_(e, GRAPHSIGNAL_REC_COUNTER, delta, 0);
}

/* Sets a gauge. */
static inline void graphsignal_set(graphsignal_probe_entry* e, double value) {
  uint64_t bits;
  if (e == NULL || e->ring == NULL) return;
  memcpy(&bits, &value, sizeof bits);
  graphsignal_probe_emit_(e, GRAPHSIGNAL_REC_GAUGE, bits, 0);
}

static inline uint64_t graphsignal_probe_hash_(const char* s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h | 1; /* never 0: 0 marks an empty slot */
}

/* Interns a frame name for the current ring (slow path, under the lock).
 * Returns 0 when the name could not be sent (a full ring: the record is
 * dropped and the next use tries again). */
static inline uint32_t graphsignal_probe_frame_locked_(graphsignal_probe_state_* st, const char* name, uint64_t h) {
  graphsignal_ring_header* ring = graphsignal_probe_ring_locked_(st);
  const uint64_t mask = GRAPHSIGNAL_PROBE_FRAME_SLOTS - 1;
  uint64_t i = h & mask, k;
  uint32_t id = 0;
  if (!ring) return 0;
  if (!st->frames) {
    st->frames = (graphsignal_probe_frame_slot_*)calloc(GRAPHSIGNAL_PROBE_FRAME_SLOTS, sizeof *st->frames);
    if (!st->frames) return 0;
  }
  for (k = 0; k < 64; k++, i = (i + 1) & mask) {
    graphsignal_probe_frame_slot_* slot = &st->frames[i];
    if (slot->hash == h && strcmp(slot->name, name) == 0) {
      if ((uint32_t)(slot->id_epoch >> 32) != st->epoch) { /* forked, or not sent yet: this ring has not seen it */
        if (!graphsignal_ring_put_name(ring, &id, GRAPHSIGNAL_NAME_PLAIN, name, strlen(name))) return 0;
        __atomic_store_n(&slot->id_epoch, ((uint64_t)st->epoch << 32) | id, __ATOMIC_RELEASE);
      }
      return (uint32_t)slot->id_epoch;
    }
    if (slot->hash == 0) {
      size_t len = strlen(name);
      char* copy;
      if (!graphsignal_ring_put_name(ring, &id, GRAPHSIGNAL_NAME_PLAIN, name, len)) return 0;
      copy = (char*)malloc(len + 1);
      if (!copy) return 0;
      memcpy(copy, name, len + 1);
      slot->name = copy;
      slot->id_epoch = ((uint64_t)st->epoch << 32) | id;
      __atomic_store_n(&slot->hash, h, __ATOMIC_RELEASE); /* publish */
      return id;
    }
  }
  /* table full around this hash: fold into one "(other)" frame */
  if (!st->other_frame_id || st->other_frame_epoch != st->epoch) {
    if (!graphsignal_ring_put_name(ring, &id, GRAPHSIGNAL_NAME_PLAIN, "(other)", 7)) return 0;
    st->other_frame_id = id;
    st->other_frame_epoch = st->epoch;
  }
  return st->other_frame_id;
}

/*
 * Adds value to the frame `frame_name` of a profile instrument (e.g. time
 * per operation). Frame names are interned once per process: the first use
 * of a name takes a lock, later uses a lock-free hash lookup.
 */
static inline void graphsignal_profile_add_by_name(graphsignal_probe_entry* e, const char* frame_name,
                                                   uint64_t value) {
  graphsignal_probe_state_* st;
  graphsignal_probe_frame_slot_* frames;
  uint64_t h, i, k;
  uint32_t id = 0;
  const uint64_t mask = GRAPHSIGNAL_PROBE_FRAME_SLOTS - 1;
  if (e == NULL || e->ring == NULL || !frame_name) return;
  st = e->state;
  h = graphsignal_probe_hash_(frame_name);
  frames = (graphsignal_probe_frame_slot_*)__atomic_load_n(&st->frames, __ATOMIC_ACQUIRE);
  if (frames) {
    for (k = 0, i = h & mask; k < 64; k++, i = (i + 1) & mask) {
      uint64_t sh = __atomic_load_n(&frames[i].hash, __ATOMIC_ACQUIRE);
      if (sh == 0) break;
      if (sh == h && strcmp(frames[i].name, frame_name) == 0) {
        uint64_t ie = __atomic_load_n(&frames[i].id_epoch, __ATOMIC_ACQUIRE);
        if ((uint32_t)(ie >> 32) == st->epoch) id = (uint32_t)ie;
        break;
      }
    }
  }
  if (!id) {
    pthread_mutex_lock(&st->lock);
    id = graphsignal_probe_frame_locked_(st, frame_name, h);
    pthread_mutex_unlock(&st->lock);
    if (!id) return;
  }
  graphsignal_probe_emit_(e, GRAPHSIGNAL_REC_PROFILE, value, id);
}

/* The entry's type (GRAPHSIGNAL_*), or 0 for NULL and inert entries. */
static inline int graphsignal_probe_type_of(const graphsignal_probe_entry* e) {
  return (e && e->ring) ? e->type : 0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GRAPHSIGNAL_PROBE_H */
