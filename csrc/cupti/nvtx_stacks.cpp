// Push/pop stacks and start/end ranges (nvtx_stacks.h): the workload's
// threads' side, lock-free after a thread's first range; ids, depths and
// thread counts from the workload checked before use.
#include "nvtx_stacks.h"

#include <time.h>

#include <new>

namespace graphsignal {
namespace cupti {
namespace nvtx {

namespace {

constexpr int kSlots = 256;  // per thread: path -> time and count

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct StackEntry {
  uint32_t path;
  uint16_t domain;
  uint64_t start;
};

struct TableSlot {
  std::atomic<uint32_t> key{0};  // a path index; 0: free
  std::atomic<uint64_t> ns{0}, count{0};
  uint64_t sent_ns = 0, sent_count = 0;  // the harvest's
};

}  // namespace

struct ThreadState {
  Stacks* owner = nullptr;
  std::atomic<int> depth{0};
  uint32_t overflow = 0;  // pushes beyond kMaxDepth still open
  StackEntry stack[kMaxDepth];
  PathCache cache;
  TableSlot slots[kSlots];
  ThreadState* next_all = nullptr;
  ThreadState* next_free = nullptr;
};

struct Stacks::Open {
  std::atomic<uint64_t> tag{2};  // generation << 1 | open
  uint64_t start = 0;
  uint32_t path = 0;
};

namespace {
thread_local ThreadState* tl_state = nullptr;
thread_local bool tl_refused = false;  // over kMaxThreads: this thread is not measured
}  // namespace

Stacks::Stacks(PathTable* paths, Problems* problems) : paths_(paths), problems_(problems) {
  open_ = new (std::nothrow) Open[kOpenRanges];
  key_ok_ = pthread_key_create(&key_, thread_exit) == 0;
}

// -- threads ------------------------------------------------------------------------
ThreadState* Stacks::thread_state() {
  ThreadState* ts = tl_state;
  if (ts) return ts;
  if (tl_refused) return nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (free_) {
      ts = free_;
      free_ = ts->next_free;
    } else if (live_threads_ < kMaxThreads) {
      ts = new (std::nothrow) ThreadState();
      if (ts) {
        ts->owner = this;
        ts->next_all = threads_.load(std::memory_order_relaxed);
        threads_.store(ts, std::memory_order_release);  // under mu_: the only writer
      }
    }
    if (ts) live_threads_++;
  }
  if (!ts) {
    tl_refused = true;
    problems_->count(kThreadsOverCap);
    return nullptr;
  }
  pthread_setspecific(key_, ts);  // thread_exit returns it to the free list
  tl_state = ts;
  return ts;
}

void Stacks::thread_exit(void* state) {
  auto* ts = static_cast<ThreadState*>(state);
  if (!ts) return;
  Stacks* s = ts->owner;
  // a fork child touches none of it: mu_ may have been held by a parent thread at the fork
  if (s->forked_.load(std::memory_order_relaxed)) return;
  int open = ts->depth.load(std::memory_order_relaxed) + static_cast<int>(ts->overflow);
  if (open > 0) s->problems_->count(kOpenAtExit, static_cast<uint64_t>(open));
  ts->depth.store(0, std::memory_order_relaxed);
  ts->overflow = 0;
  tl_state = nullptr;
  // Its table keeps what it counted (the harvest takes the differences),
  // and the next thread that takes it adds to the same sums.
  std::lock_guard<std::mutex> g(s->mu_);
  ts->next_free = s->free_;
  s->free_ = ts;
  s->live_threads_--;
}

// -- push/pop -----------------------------------------------------------------------
uint32_t Stacks::current_path() {
  ThreadState* ts = tl_state;
  if (!ts) return 0;
  int depth = ts->depth.load(std::memory_order_relaxed);
  return depth > 0 ? ts->stack[depth - 1].path : 0;
}

int Stacks::push(uint16_t domain, Text* t) {
  ThreadState* ts = thread_state();
  if (!ts) return -1;
  int depth = ts->depth.load(std::memory_order_relaxed);
  if (depth >= kMaxDepth) {
    ts->overflow++;
    problems_->count(kTooDeep);
    return depth + static_cast<int>(ts->overflow) - 1;
  }
  uint32_t parent = 0;
  for (int i = depth - 1; i >= 0; i--) {
    if (ts->stack[i].domain == domain) {
      parent = ts->stack[i].path;
      break;
    }
  }
  if (!t->hash) t->hash = hash_bytes(t->bytes, t->len);
  uint32_t path = paths_->lookup(&ts->cache, domain, parent, *t);
  StackEntry& e = ts->stack[depth];
  e.path = path;
  e.domain = domain;
  e.start = now_ns();  // last: the lookup is not the range's time
  ts->depth.store(depth + 1, std::memory_order_relaxed);
  return depth;
}

int Stacks::pop(uint16_t domain) {
  uint64_t now = now_ns();  // first: what follows is not the range's time
  ThreadState* ts = tl_state;
  if (!ts) {
    if (!tl_refused) problems_->count(kUnbalancedPop);
    return -1;
  }
  if (ts->overflow) {
    ts->overflow--;
    return kMaxDepth + static_cast<int>(ts->overflow);
  }
  int depth = ts->depth.load(std::memory_order_relaxed);
  int i = depth - 1;
  while (i >= 0 && ts->stack[i].domain != domain) i--;
  if (i < 0) {
    problems_->count(kUnbalancedPop);
    return -1;
  }
  StackEntry e = ts->stack[i];
  for (int j = i; j < depth - 1; j++) ts->stack[j] = ts->stack[j + 1];  // another domain's ranges stay open
  ts->depth.store(depth - 1, std::memory_order_relaxed);
  add_host(ts, e.path, now > e.start ? now - e.start : 0);
  return depth - 1;
}

void Stacks::add_host(ThreadState* ts, uint32_t path, uint64_t ns) {
  if (!path) return;  // no path could be made (out of memory)
  if (ts) {
    uint32_t h = (path * 2654435761u) >> 24;  // 8 bits: kSlots
    for (int k = 0; k < kSlots; k++) {
      TableSlot& s = ts->slots[(h + k) & (kSlots - 1)];
      uint32_t key = s.key.load(std::memory_order_relaxed);
      if (key != path) {
        if (key) continue;
        s.key.store(path, std::memory_order_release);  // only this thread fills its table
      }
      // one writer: plain stores, no read-modify-write; the count last
      s.ns.store(s.ns.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
      s.count.store(s.count.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      return;
    }
  }
  paths_->add_host(path, ns);  // the thread's table is full: the path's shared sums
}

// -- start/end ----------------------------------------------------------------------
uint64_t Stacks::start_range(uint16_t domain, Text* t) {
  ThreadState* ts = thread_state();
  if (!t->hash) t->hash = hash_bytes(t->bytes, t->len);
  uint32_t path = paths_->lookup(ts ? &ts->cache : nullptr, domain, 0, *t);
  uint32_t first = open_next_.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t k = 0; k < 64; k++) {
    uint32_t slot = (first + k) & (kOpenRanges - 1);
    Open& o = open_[slot];
    uint64_t tag = o.tag.load(std::memory_order_relaxed);
    if (tag & 1) continue;
    if (!o.tag.compare_exchange_strong(tag, tag | 1, std::memory_order_acquire, std::memory_order_relaxed)) continue;
    o.path = path;
    o.start = now_ns();
    // generation << 16 | slot + 1: never 0, which NVTX reads as no range
    return (tag >> 1) << 16 | (slot + 1);
  }
  problems_->count(kRangeTableFull);
  return 0;
}

void Stacks::end_range(uint64_t id) {
  uint64_t now = now_ns();
  if (!id) return;  // a start that was not tracked (counted then)
  uint64_t slot = (id & 0xFFFF) - 1, gen = id >> 16;
  if (slot >= kOpenRanges) {
    problems_->count(kBadRangeEnd);
    return;
  }
  Open& o = open_[slot];
  uint64_t tag = gen << 1 | 1;
  if (o.tag.load(std::memory_order_acquire) != tag) {
    problems_->count(kBadRangeEnd);
    return;
  }
  uint64_t start = o.start;
  uint32_t path = o.path;
  // the fields are read before the slot is let go; a second end of the same id loses the race and is counted
  if (!o.tag.compare_exchange_strong(tag, (gen + 1) << 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    problems_->count(kBadRangeEnd);
    return;
  }
  add_host(thread_state(), path, now > start ? now - start : 0);
}

// -- the flusher's side -------------------------------------------------------------
void Stacks::harvest(uint32_t n_paths, uint64_t* pend_ns, uint64_t* pend_count) {
  for (ThreadState* ts = threads_.load(std::memory_order_acquire); ts; ts = ts->next_all) {
    for (TableSlot& s : ts->slots) {
      uint32_t key = s.key.load(std::memory_order_acquire);
      if (!key || key >= n_paths) continue;
      uint64_t c = s.count.load(std::memory_order_acquire), ns = s.ns.load(std::memory_order_relaxed);
      pend_count[key] += c - s.sent_count;
      pend_ns[key] += ns - s.sent_ns;
      s.sent_count = c, s.sent_ns = ns;
    }
  }
}

uint64_t Stacks::open_now() const {
  uint64_t open = 0;
  for (ThreadState* ts = threads_.load(std::memory_order_acquire); ts; ts = ts->next_all)
    open += static_cast<uint64_t>(ts->depth.load(std::memory_order_relaxed)) + ts->overflow;
  for (uint32_t i = 0; i < kOpenRanges; i++) open += open_[i].tag.load(std::memory_order_relaxed) & 1;
  return open;
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
