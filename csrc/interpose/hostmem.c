/* The registry of page-locked and managed host ranges (hostmem.h).
 *
 * Two copies of one sorted table, and a sequence counter `g_seq` whose low
 * bit names the copy readers search. A writer (under g_mu: writers are the
 * rare allocation calls) changes the copy readers are not told to use,
 * publishes it by moving the counter, then makes the same change to the
 * other one. At every moment the copy being written is not the one the
 * counter names, so a reader that loaded the counter before a write began
 * and searched while it ran sees the counter moved when it looks again,
 * and searches again: a reader never waits on a writer, and never trusts a
 * torn search. Every field is read and written with relaxed atomics (the
 * copies are read while written), the counter with acquire/release, and
 * indices are clamped to the table, so a torn read can cost a retry,
 * never a wild access. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hostmem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define RELAXED __ATOMIC_RELAXED
#define LOAD(p) __atomic_load_n(p, RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, RELAXED)
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct {
  uint32_t n;          /* ranges held */
  uint32_t unrecorded; /* pinned ranges live that did not fit */
  uintptr_t base[GS_HOSTMEM_MAX];
  uintptr_t end[GS_HOSTMEM_MAX]; /* exclusive */
  uint8_t cls[GS_HOSTMEM_MAX];
} table;

static table g_table[2];
static uint64_t g_seq; /* readers search g_table[g_seq & 1] */
static uint32_t g_unsure;
static uint64_t g_overflows, g_gave_up;
static uint32_t g_managed, g_mapped; /* managed and mapped ranges held: their frees skip the lock at 0 */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_say;
static uint32_t g_said; /* reasons said (bit 16: the full table) */

/* ---- readers ---- */

/* A search's answer: the class of every address in [lo, hi) (a range, or
 * the gap between two), valid while the counter stays at seq. */
typedef struct {
  uint64_t seq;
  uintptr_t lo, hi;
  int cls;
} answer;

/* Each thread's last answer: a workload copies from the same few buffers,
 * so most copies are answered by it, in a few instructions whatever the
 * table holds. seq starts at 0 with an empty span, so it answers nothing
 * until a search fills it. */
static __thread answer t_last __attribute__((tls_model("initial-exec")));

static void search(const table* t, uintptr_t a, answer* out) {
  uint32_t n = LOAD(&t->n), lo = 0, hi;
  if (n > GS_HOSTMEM_MAX) n = GS_HOSTMEM_MAX;
  hi = n;
  while (lo < hi) { /* the first range whose base is above a */
    uint32_t mid = lo + (hi - lo) / 2;
    if (LOAD(&t->base[mid]) <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  out->lo = lo > 0 ? LOAD(&t->end[lo - 1]) : 0;
  out->hi = lo < n ? LOAD(&t->base[lo]) : UINTPTR_MAX;
  if (lo > 0 && a < out->lo) { /* inside the range before */
    int c = LOAD(&t->cls[lo - 1]);
    out->hi = out->lo;
    out->lo = LOAD(&t->base[lo - 1]);
    out->cls = c < GS_MEM_CLASSES ? c : GS_MEM_NONE;
    return;
  }
  out->cls = LOAD(&t->unrecorded) || LOAD(&g_unsure) ? GS_MEM_NONE : GS_MEM_PAGEABLE;
}

int gs_hostmem_class(const void* p) {
  uintptr_t a = (uintptr_t)p;
  answer* last = &t_last;
  int i;
  for (i = 0; i < GS_HOSTMEM_TRIES; i++) {
    answer got;
    uint64_t s = __atomic_load_n(&g_seq, __ATOMIC_ACQUIRE);
    if (s == last->seq && a >= last->lo && a < last->hi) return last->cls;
    search(&g_table[s & 1], a, &got);
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the search's loads before the second look */
    if (LOAD(&g_seq) == s) {
      got.seq = s;
      *last = got;
      return got.cls;
    }
  }
  __atomic_fetch_add(&g_gave_up, 1, RELAXED);
  return GS_MEM_NONE;
}

/* ---- writers: one change, made to both copies (the same function of the
 * same table gives the same result) ---- */

enum { OP_ADD, OP_REMOVE, OP_REMOVE_WITHIN };
typedef struct {
  int op;
  uintptr_t base, end;
  int cls;
} change;

enum { R_DONE = 0, R_FULL = 1, R_ABSENT = 2 };

static void remove_at(table* t, uint32_t i) {
  uint32_t n = t->n;
  for (; i + 1 < n; i++) {
    STORE(&t->base[i], t->base[i + 1]);
    STORE(&t->end[i], t->end[i + 1]);
    STORE(&t->cls[i], t->cls[i + 1]);
  }
  STORE(&t->n, n - 1);
}

/* the index of the first range whose base is >= a */
static uint32_t lower_bound(const table* t, uintptr_t a) {
  uint32_t lo = 0, hi = t->n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (t->base[mid] < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int apply(table* t, const change* c) {
  uint32_t i, n;
  switch (c->op) {
    case OP_ADD:
      /* ranges it overlaps are gone (the driver just page-locked this
       * memory, so they were ended by a call not followed here) */
      i = lower_bound(t, c->base);
      if (i > 0 && t->end[i - 1] > c->base) i--;
      while (i < t->n && t->base[i] < c->end) remove_at(t, i);
      n = t->n;
      if (n >= GS_HOSTMEM_MAX) return R_FULL;
      for (i = n; i > 0 && t->base[i - 1] > c->base; i--) {
        STORE(&t->base[i], t->base[i - 1]);
        STORE(&t->end[i], t->end[i - 1]);
        STORE(&t->cls[i], t->cls[i - 1]);
      }
      STORE(&t->base[i], c->base);
      STORE(&t->end[i], c->end);
      STORE(&t->cls[i], (uint8_t)c->cls);
      STORE(&t->n, n + 1);
      return R_DONE;
    case OP_REMOVE:
      i = lower_bound(t, c->base);
      if (i < t->n && t->base[i] == c->base && (c->cls == GS_MEM_NONE || t->cls[i] == c->cls)) {
        remove_at(t, i);
        return R_DONE;
      }
      return R_ABSENT;
    default: /* OP_REMOVE_WITHIN: the ranges of class cls whose base is in [base, end) */
      n = 0;
      i = lower_bound(t, c->base);
      while (i < t->n && t->base[i] < c->end) {
        if (t->cls[i] == c->cls) {
          remove_at(t, i);
          n++;
        } else {
          i++;
        }
      }
      return n ? R_DONE : R_ABSENT;
  }
}

static void say(uint32_t bit, const char* text) {
  const char* level;
  if (!g_say || (g_said & bit)) return;
  g_said |= bit;
  level = getenv("GRAPHSIGNAL_LOG_LEVEL");
  if (level && (!strcasecmp(level, "error") || !strcasecmp(level, "critical"))) return;
  fprintf(stderr, "graphsignal-interpose[%ld] warning: %s\n", (long)getpid(), text);
}

static void mark_unsure(int why) {
  if (!why) return;
  __atomic_fetch_or(&g_unsure, (uint32_t)why, RELAXED);
  /* answers given before (each thread's last one) hold until the counter moves */
  __atomic_store_n(&g_seq, LOAD(&g_seq) + 2, __ATOMIC_RELEASE);
  {
    static const struct { uint32_t bit; const char* text; } why_text[] = {
        {GS_UNSURE_UNBOUND, "a page-locking CUDA entry point was handed out uncounted: copies from host memory "
                            "the interposer did not see page-locked are counted with host_memory unknown"},
        {GS_UNSURE_POOL, "a CUDA memory pool on the host or of managed memory was created: copies from host memory "
                         "the interposer did not see page-locked are counted with host_memory unknown"},
        {GS_UNSURE_FULL, "more managed or mapped host ranges than the interposer holds: copies from host memory "
                         "outside the ranges it holds are counted with host_memory unknown"},
        {GS_UNSURE_MAP, "the location of a mapped CUDA allocation could not be asked: copies from host memory "
                        "the interposer did not see page-locked are counted with host_memory unknown"},
    };
    size_t i;
    for (i = 0; i < sizeof why_text / sizeof why_text[0]; i++)
      if (why & why_text[i].bit) say(why_text[i].bit, why_text[i].text);
  }
}

/* Makes the change to both copies (under g_mu); the result of the first. */
static int publish(const change* c) {
  uint64_t s = LOAD(&g_seq);
  int r = apply(&g_table[(s + 1) & 1], c); /* the copy readers are not told to use */
  if (r != R_ABSENT) {
    __atomic_store_n(&g_seq, s + 1, __ATOMIC_RELEASE); /* readers now search the changed copy */
    __atomic_thread_fence(__ATOMIC_RELEASE);           /* ... before the other one changes */
    apply(&g_table[s & 1], c);
  }
  return r;
}

/* the unrecorded count in both copies, published as a change is */
static void set_unrecorded(uint32_t v) {
  uint64_t s = LOAD(&g_seq);
  STORE(&g_table[(s + 1) & 1].unrecorded, v);
  __atomic_store_n(&g_seq, s + 1, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  STORE(&g_table[s & 1].unrecorded, v);
}

static void add(uintptr_t base, size_t size, int cls, uint32_t* held) {
  change c = {OP_ADD, base, base + size, cls};
  if (!size || c.end < base) return; /* nothing, or a range that wraps: not a range the driver made */
  pthread_mutex_lock(&g_mu);
  if (publish(&c) == R_FULL) {
    __atomic_fetch_add(&g_overflows, 1, RELAXED);
    if (cls == GS_MEM_PINNED && !held) {
      set_unrecorded(g_table[0].unrecorded + 1);
      say(16, "more than " STR(GS_HOSTMEM_MAX) " page-locked host ranges live at once: copies from host memory "
              "outside the ranges the interposer holds are counted with host_memory unknown until the ones it "
              "missed are freed");
    } else {
      mark_unsure(GS_UNSURE_FULL);
    }
  } else if (held) {
    __atomic_fetch_add(held, 1, RELAXED);
  }
  pthread_mutex_unlock(&g_mu);
}

void gs_hostmem_pinned(const void* base, size_t size) { add((uintptr_t)base, size, GS_MEM_PINNED, NULL); }

void gs_hostmem_unpinned(const void* base) {
  change c = {OP_REMOVE, (uintptr_t)base, 0, GS_MEM_PINNED};
  pthread_mutex_lock(&g_mu);
  /* the driver ended a page-locked range the table does not hold: one it had no room for */
  if (publish(&c) == R_ABSENT && g_table[0].unrecorded) set_unrecorded(g_table[0].unrecorded - 1);
  pthread_mutex_unlock(&g_mu);
}

void gs_hostmem_managed(uintptr_t base, size_t size) { add(base, size, GS_MEM_MANAGED, &g_managed); }

void gs_hostmem_freed(uintptr_t base) {
  change c = {OP_REMOVE, base, 0, GS_MEM_MANAGED};
  if (!LOAD(&g_managed)) return; /* cuMemFree of device memory: no lock */
  pthread_mutex_lock(&g_mu);
  if (publish(&c) == R_DONE) __atomic_fetch_sub(&g_managed, 1, RELAXED);
  pthread_mutex_unlock(&g_mu);
}

void gs_hostmem_mapped(uintptr_t base, size_t size, int on_host) {
  if (on_host < 0) {
    pthread_mutex_lock(&g_mu);
    mark_unsure(GS_UNSURE_MAP);
    pthread_mutex_unlock(&g_mu);
  } else if (on_host) {
    add(base, size, GS_MEM_PINNED, &g_mapped);
  }
}

void gs_hostmem_unmapped(uintptr_t base, size_t size) {
  change c = {OP_REMOVE_WITHIN, base, base + size, GS_MEM_PINNED};
  uint32_t n0;
  if (!LOAD(&g_mapped)) return; /* device mappings: no lock */
  if (c.end < base) c.end = UINTPTR_MAX;
  pthread_mutex_lock(&g_mu);
  n0 = g_table[0].n;
  if (publish(&c) == R_DONE) {
    uint32_t gone = n0 - g_table[0].n;
    __atomic_fetch_sub(&g_mapped, gone <= g_mapped ? gone : g_mapped, RELAXED);
  }
  pthread_mutex_unlock(&g_mu);
}

void gs_hostmem_unsure(int why) {
  pthread_mutex_lock(&g_mu);
  mark_unsure(why);
  pthread_mutex_unlock(&g_mu);
}

const char* gs_hostmem_class_name(int cls) {
  static const char* names[GS_MEM_CLASSES] = {"unknown", "pageable", "pinned", "managed"};
  return cls >= 0 && cls < GS_MEM_CLASSES ? names[cls] : "unknown";
}

/* Without the writers' lock: the report reads this at exit, where a
 * writer may still be running (or, in a forked child, may have held the
 * lock in the parent); a change in flight can make it one off. */
void gs_hostmem_get_stats(gs_hostmem_stats* out) {
  const table* t = &g_table[__atomic_load_n(&g_seq, __ATOMIC_ACQUIRE) & 1];
  out->ranges = LOAD(&t->n);
  out->unrecorded = LOAD(&t->unrecorded);
  out->unsure = LOAD(&g_unsure);
  out->overflows = LOAD(&g_overflows);
  out->gave_up = LOAD(&g_gave_up);
}

/* A child forked while a writer held the lock would wait on it forever at
 * its first page-locking call: it starts with the lock free (its copy of
 * the table may then be mid-change; CUDA is not usable in such a child). */
static void child_after_fork(void) { pthread_mutex_init(&g_mu, NULL); }

__attribute__((constructor)) static void gs_hostmem_setup(void) { pthread_atfork(NULL, NULL, child_after_fork); }

void gs_hostmem_say(int on) { __atomic_store_n(&g_say, on, RELAXED); }
