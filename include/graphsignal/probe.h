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
 *     `dropped` is incremented. Reserving never waits.
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
#define GRAPHSIGNAL_RING_DEFAULT_CAPACITY (1u << 20) /* records: 32 MiB */
#define GRAPHSIGNAL_RING_DEFAULT_STRINGS (8u << 20)  /* bytes */
#define GRAPHSIGNAL_RING_PREFIX "gs-"
#define GRAPHSIGNAL_RUN_ID_ENV "GRAPHSIGNAL_RUN_ID"
#define GRAPHSIGNAL_RING_CAPACITY_ENV "GRAPHSIGNAL_RING_CAPACITY"
#define GRAPHSIGNAL_RING_FLAG_CLOSED 1u

/* Writer kinds (header.kind); also the last part of the ring's name. */
#define GRAPHSIGNAL_KIND_TEST 0u
#define GRAPHSIGNAL_KIND_CUPTI 1u
#define GRAPHSIGNAL_KIND_PROBE 2u
#define GRAPHSIGNAL_KIND_ROCM 3u

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
#define GRAPHSIGNAL_REC_HISTOGRAM_AGG 13u /* name_id instrument; pre-aggregated (see probe_cuda.h) */
#define GRAPHSIGNAL_REC_TEST 200u    /* used by tests and benchmarks */

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
  uint64_t pad_w[7];
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
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, read_index) == 128, "read_index line");
GRAPHSIGNAL_STATIC_ASSERT(offsetof(graphsignal_ring_header, dropped) == 192, "counters line");
GRAPHSIGNAL_STATIC_ASSERT(sizeof(graphsignal_ring_record) == GRAPHSIGNAL_RECORD_SIZE, "record size");

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

/* Non-zero when h is a ring this header version can write into. */
static inline int graphsignal_ring_valid(const graphsignal_ring_header* h, size_t mapped) {
  return h && __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == GRAPHSIGNAL_RING_MAGIC &&
         h->version == GRAPHSIGNAL_RING_VERSION && h->header_size == GRAPHSIGNAL_RING_HEADER_SIZE &&
         h->record_size == GRAPHSIGNAL_RECORD_SIZE && h->capacity && !(h->capacity & (h->capacity - 1)) &&
         graphsignal_ring_total_size(h->capacity, h->strings_size) <= mapped;
}

static inline graphsignal_ring_header* graphsignal_ring_map_fd(int fd, size_t* out_size) {
  struct stat st;
  void* p;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)GRAPHSIGNAL_RING_HEADER_SIZE) return NULL;
  p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return NULL;
  if (out_size) *out_size = (size_t)st.st_size;
  return (graphsignal_ring_header*)p;
}

/*
 * Opens the ring /dev/shm/<name>, creating it when it does not exist.
 * Creation is atomic: the segment is built under a temporary name and
 * linked into place, so a concurrent opener (another thread, or another
 * translation unit with its own copy of this header) sees either no ring or
 * a complete one. Returns NULL (and never aborts) on any failure.
 * capacity is rounded up to a power of two.
 */
static inline graphsignal_ring_header* graphsignal_ring_open(const char* name, uint32_t kind, uint64_t capacity,
                                                             uint64_t strings_size, size_t* out_size) {
  char path[256], tmp[300];
  int fd;
  size_t size = 0;
  uint64_t cap = 1;
  graphsignal_ring_header* h;
  if (!name || strlen(name) > 200) return NULL;
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    h = graphsignal_ring_map_fd(fd, &size);
    close(fd);
    if (h && graphsignal_ring_valid(h, size)) {
      if (out_size) *out_size = size;
      return h;
    }
    if (h) munmap(h, size);
    return NULL;
  }
  while (cap < capacity && cap < (1ull << 40)) cap <<= 1;
  size = graphsignal_ring_total_size(cap, strings_size);
  snprintf(tmp, sizeof tmp, "/dev/shm/.%s.tmp%ld.%p", name, (long)getpid(), (void*)&fd);
  fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    unlink(tmp);
    return NULL;
  }
  h = (graphsignal_ring_header*)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if ((void*)h == MAP_FAILED) {
    unlink(tmp);
    return NULL;
  }
  h->version = GRAPHSIGNAL_RING_VERSION;
  h->header_size = GRAPHSIGNAL_RING_HEADER_SIZE;
  h->record_size = GRAPHSIGNAL_RECORD_SIZE;
  h->kind = kind;
  h->capacity = cap;
  h->strings_offset = GRAPHSIGNAL_RING_HEADER_SIZE + cap * GRAPHSIGNAL_RECORD_SIZE;
  h->strings_size = strings_size;
  h->writer_pid = (uint64_t)getpid();
  h->start_ns = graphsignal_ring_realtime_ns();
  __atomic_store_n(&h->magic, GRAPHSIGNAL_RING_MAGIC, __ATOMIC_RELEASE);
  if (link(tmp, path) != 0) {
    /* Someone else created it first: use theirs. */
    unlink(tmp);
    munmap(h, size);
    return errno == EEXIST ? graphsignal_ring_open(name, kind, capacity, strings_size, out_size) : NULL;
  }
  unlink(tmp);
  if (out_size) *out_size = size;
  return h;
}

/*
 * Reserves the next slot. Returns NULL when the ring is full (the record is
 * counted in `dropped`); never waits. The caller fills the slot and calls
 * graphsignal_ring_commit(slot, *index).
 */
static inline graphsignal_ring_record* graphsignal_ring_reserve(graphsignal_ring_header* h, uint64_t* index) {
  const uint64_t cap = h->capacity;
  uint64_t w = __atomic_load_n(&h->write_index, __ATOMIC_RELAXED);
  for (;;) {
    /* acquire: the reader finished copying the slot before it moved past it */
    uint64_t r = __atomic_load_n(&h->read_index, __ATOMIC_ACQUIRE);
    if (GRAPHSIGNAL_UNLIKELY(w - r >= cap)) {
      __atomic_fetch_add(&h->dropped, 1, __ATOMIC_RELAXED);
      return NULL;
    }
    if (GRAPHSIGNAL_LIKELY(__atomic_compare_exchange_n(&h->write_index, &w, w + 1, 1, __ATOMIC_RELAXED,
                                                       __ATOMIC_RELAXED)))
      break;
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
 * NAME record points at them. Returns 0 when the string area or the ring is
 * full (counted); the caller may try again later.
 */
static inline int graphsignal_ring_send_name(graphsignal_ring_header* h, uint32_t id, uint8_t name_kind,
                                             const char* bytes, size_t len) {
  uint64_t off = __atomic_fetch_add(&h->strings_used, (uint64_t)len, __ATOMIC_RELAXED);
  if (off + len > h->strings_size) {
    __atomic_fetch_add(&h->strings_dropped, 1, __ATOMIC_RELAXED);
    return 0;
  }
  memcpy((char*)h + h->strings_offset + off, bytes, len);
  return graphsignal_ring_write(h, GRAPHSIGNAL_REC_NAME, name_kind, 0, id, off, (uint64_t)len);
}

/* Marks the ring closed: the writer will not write again (clean exit). */
static inline void graphsignal_ring_close(graphsignal_ring_header* h) {
  __atomic_fetch_or(&h->flags, (uint64_t)GRAPHSIGNAL_RING_FLAG_CLOSED, __ATOMIC_RELEASE);
}

/* Ring capacity from the environment (set by graphsignal-run), or the default. */
static inline uint64_t graphsignal_ring_env_capacity(void) {
  const char* s = getenv(GRAPHSIGNAL_RING_CAPACITY_ENV);
  uint64_t v = s ? (uint64_t)strtoull(s, NULL, 10) : 0;
  return v >= 64 ? v : GRAPHSIGNAL_RING_DEFAULT_CAPACITY;
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GRAPHSIGNAL_PROBE_H */
