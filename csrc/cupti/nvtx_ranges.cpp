#include "nvtx_ranges.h"

#include <dlfcn.h>
#include <graphsignal/probe.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <new>

#include "log.h"
#include "nvtx_gpu.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

namespace {

constexpr int kCacheSlots = 256;  // per thread: (parent, name) -> path
constexpr int kSlots = 256;       // per thread: path -> time and count
constexpr uint64_t kRingCapacity = 1u << 14;   // records (GRAPHSIGNAL_RING_CAPACITY wins): one per frame and flush
constexpr uint64_t kRingStrings = 1u << 20;    // bytes: every frame's path, with room to spare
constexpr uint32_t kPathSlots = 2 * kMaxPaths + kMaxDomains + 2;  // named, "<path>/...", "(other)" per domain
constexpr size_t kTableSize = 2 * kMaxPaths;   // open addressing over the named paths
constexpr int kMaxSendAttempts = 4;            // a name the string area refuses is not retried forever

enum Kind : uint8_t { kNamed = 0, kOther = 1, kDeeper = 2 };

// The metric families (SKILL.md names them; the sidecar adds process.pid).
const char kHostMetric[] = "nvtx_ranges_nanoseconds";
const char kGpuMetric[] = "nvtx_range_gpu_nanoseconds";
const char kMarksMetric[] = "nvtx_marks";
const char kDroppedMetric[] = "graphsignal_nvtx_dropped";

const char* const kProblemNames[kProblemCount] = {
    "unbalanced_pop",   "too_deep",      "names_over_cap",  "name_truncated", "range_table_full",
    "bad_range_end",    "domains_over_cap", "strings_over_cap", "open_at_exit", "threads_over_cap"};

const char* const kProblemText[kProblemCount] = {
    "an NVTX pop with no range open in its domain on that thread",
    "NVTX ranges nested deeper than 128 on one thread (their time is not measured)",
    "more than 4096 distinct NVTX range paths: the rest are counted in the frame \"(other)\"",
    "an NVTX range name longer than 128 bytes (cut)",
    "more than 4096 NVTX start/end ranges open at once (the rest are not measured)",
    "an NVTX range end for an id that is not open (unknown, or ended already)",
    "more than 63 NVTX domains: the rest are counted in the domain \"(other)\"",
    "more than 16384 registered NVTX strings: the rest read \"(other)\"",
    "NVTX ranges still open when their thread or the process ended (not measured)",
    "more than 4096 threads using NVTX at once: the rest are not measured"};

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// len cut back to the last whole UTF-8 character.
size_t utf8_whole(const char* s, size_t len) {
  size_t i = len, back = 0;
  while (i > 0 && back < 4 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) i--, back++;
  if (i == 0) return len;
  uint8_t lead = static_cast<uint8_t>(s[i - 1]);
  size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
  return (i - 1) + need > len ? i - 1 : len;
}

// A name as a frame shows it: no control bytes, and no '/' (the path
// separator) inside a name.
size_t sanitize(char* out, const char* in, size_t len) {
  for (size_t i = 0; i < len; i++) {
    uint8_t c = static_cast<uint8_t>(in[i]);
    out[i] = c < 0x20 || c == 0x7f ? '?' : c == '/' ? '|' : static_cast<char>(c);
  }
  return len;
}

char* copy_of(const char* s, size_t n) {
  char* p = new (std::nothrow) char[n + 1];
  if (p) {
    if (n) memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

uint64_t mix(uint64_t h, uint64_t a, uint64_t b) {
  h ^= a * 0x9E3779B97F4A7C15ull;
  h ^= b * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  return h * 0xD6E8FEB86659FD93ull;
}

unsigned flush_ms_from_env() {
  // The library's flush period (the CUPTI collector's variable; graphsignal-run
  // checks its range before the workload starts).
  const char* s = getenv("GRAPHSIGNAL_CUPTI_FLUSH_MS");
  if (!s || !*s) return 1000;
  char* end = nullptr;
  unsigned long v = strtoul(s, &end, 10);
  return end && !*end && v >= 10 && v <= 60000 ? static_cast<unsigned>(v) : 1000;
}

}  // namespace

struct Domain {
  char name[64];
  uint32_t len = 0;
  int index = 0;
  std::atomic<uint64_t> marks{0};
  uint32_t other_path = 0;  // its "(other)" frame (under mu_)
  // the flusher's
  uint64_t sent_marks = 0;
  uint32_t host_inst = 0, gpu_inst = 0, marks_inst = 0;
  int inst_attempts = 0;
};

struct StringReg {
  uint64_t hash;
  uint32_t len;
  uint16_t domain;
  char bytes[kMaxName];
};

struct PathEntry {
  uint32_t index = 0, parent = 0;
  uint16_t domain = 0;
  uint8_t kind = kNamed;
  uint8_t depth = 0;  // levels: 1 at the top
  uint64_t hash = 0;  // of raw
  uint32_t raw_len = 0, text_len = 0;
  char* raw = nullptr;   // the name as NVTX gave it (cut), for identity
  char* text = nullptr;  // the frame: "outer/inner"
  std::atomic<uint32_t> deeper{0};  // "<this>/..." once made
  // time not in a thread's table (its table was full), and GPU time
  std::atomic<uint64_t> host_ns{0}, host_count{0}, gpu_ns{0}, gpu_count{0};
  // the flusher's
  uint64_t sent_host_ns = 0, sent_host_count = 0, sent_gpu_ns = 0, sent_gpu_count = 0;
  uint32_t ring_id = 0;
  bool named = false;
  int attempts = 0;
};

struct StackEntry {
  uint32_t path;
  uint16_t domain;
  uint64_t start;
};

struct CacheSlot {
  uint64_t hash;
  uint32_t parent;
  uint16_t domain;
  uint16_t len;
  const PathEntry* entry;
};

struct TableSlot {
  std::atomic<uint32_t> key{0};  // a path index; 0: free
  std::atomic<uint64_t> ns{0}, count{0};
  uint64_t sent_ns = 0, sent_count = 0;  // the flusher's
};

struct ThreadState {
  std::atomic<int> depth{0};
  uint32_t overflow = 0;  // pushes beyond kMaxDepth still open
  StackEntry stack[kMaxDepth];
  CacheSlot cache[kCacheSlots] = {};
  TableSlot slots[kSlots];
  ThreadState* next_all = nullptr;
  ThreadState* next_free = nullptr;
};

struct Ranges::Open {
  std::atomic<uint64_t> tag{2};  // generation << 1 | open
  uint64_t start = 0;
  uint32_t path = 0;
};

std::atomic<Ranges*> Ranges::instance_{nullptr};
std::atomic<bool> Ranges::forked_{false};

namespace {
thread_local ThreadState* tl_state = nullptr;
thread_local bool tl_refused = false;  // over kMaxThreads: this thread is not measured
}  // namespace

uint64_t Ranges::hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n) memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h | 1;  // 0 means "not computed"
}

Ranges::Ranges(graphsignal_ring_header* ring, bool gpu, unsigned flush_ms)
    : sink_(ring), pid_(getpid()), gpu_wanted_(gpu), flush_ms_(flush_ms) {
  domains_ = new (std::nothrow) Domain[kMaxDomains];
  paths_ = new (std::nothrow) PathEntry*[kPathSlots]();
  table_size_ = kTableSize;
  table_ = new (std::nothrow) PathEntry*[kTableSize]();
  open_ = new (std::nothrow) Open[kOpenRanges];
  pend_ns_ = new (std::nothrow) uint64_t[kPathSlots]();
  pend_count_ = new (std::nothrow) uint64_t[kPathSlots]();
  if (domains_) {
    default_domain_ = &domains_[0];
    for (int i = 0; i < kMaxDomains; i++) domains_[i].index = i;
    memcpy(domains_[0].name, "default", 7);
    domains_[0].len = 7;
    memcpy(domains_[kMaxDomains - 1].name, "(other)", 7);
    domains_[kMaxDomains - 1].len = 7;
  }
  key_ok_ = pthread_key_create(&key_, thread_exit) == 0;
}

Ranges* Ranges::start() {
  static std::mutex start_mu;
  static bool tried = false;
  std::lock_guard<std::mutex> g(start_mu);
  if (tried) return get();
  tried = true;
  const char* mode = getenv("GRAPHSIGNAL_NVTX");
  bool gpu = false;
  if (mode && *mode) {
    if (!strcasecmp(mode, "0") || !strcasecmp(mode, "off") || !strcasecmp(mode, "false") ||
        !strcasecmp(mode, "no")) {
      log(Level::kDebug, "GRAPHSIGNAL_NVTX=%s: NVTX ranges are not collected", mode);
      return nullptr;
    }
    gpu = !strcasecmp(mode, "gpu");
    if (!gpu && strcasecmp(mode, "1") && strcasecmp(mode, "on") && strcasecmp(mode, "true") &&
        strcasecmp(mode, "yes"))
      log(Level::kWarning, "GRAPHSIGNAL_NVTX=%s is not on, off or gpu; using on", mode);
  }
  char name[256];
  if (!graphsignal_ring_name(name, sizeof name, "nvtx")) {
    log(Level::kDebug, "not running under graphsignal-run (no %s); NVTX ranges are not collected",
        GRAPHSIGNAL_RUN_ID_ENV);
    return nullptr;
  }
  uint64_t cap = graphsignal_ring_env_capacity_value();
  size_t size = 0;
  graphsignal_ring_header* ring =
      graphsignal_ring_open(name, GRAPHSIGNAL_KIND_NVTX, cap ? cap : kRingCapacity, kRingStrings, &size);
  if (!ring) {
    int err = errno;
    log(Level::kWarning, "cannot create /dev/shm/%s: %s; NVTX ranges are not collected", name,
        graphsignal_ring_error_text(err));
    return nullptr;
  }
  Ranges* r = new (std::nothrow) Ranges(ring, gpu, flush_ms_from_env());
  if (!r || !r->domains_ || !r->paths_ || !r->table_ || !r->open_ || !r->pend_ns_ || !r->pend_count_ ||
      !r->key_ok_) {
    log(Level::kWarning, "out of memory; NVTX ranges are not collected");
    graphsignal_ring_close(ring);
    return nullptr;  // what was allocated stays: this runs once
  }
  // From now on a thread, an atexit handler and thread-exit destructors
  // point into this library: it must never be unloaded (NVTX unloads an
  // injection library whose InitializeInjectionNvtx2 fails, and CUDA may
  // not hold it in a program without CUDA).
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&Ranges::at_exit), &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  instance_.store(r, std::memory_order_release);
  r->launch_thread();
  atexit(at_exit);
  pthread_atfork(nullptr, nullptr, on_fork_child);
  log(Level::kInfo, "collecting NVTX ranges%s", gpu ? " and the GPU time of the kernels launched inside" : "");
  return r;
}

void Ranges::launch_thread() {
  pthread_t t;
  {
    std::lock_guard<std::mutex> g(ctl_mu_);
    thread_done_ = false;
  }
  if (pthread_create(&t, nullptr, flusher_main, this) == 0) {
    pthread_detach(t);  // never joined: at exit it is asked to stop, and waited for a bounded time
  } else {
    std::lock_guard<std::mutex> g(ctl_mu_);
    thread_done_ = true;
    log(Level::kWarning, "no NVTX flush thread; NVTX ranges are sent at exit only");
  }
}

void* Ranges::flusher_main(void* self) {
  static_cast<Ranges*>(self)->flusher_loop();
  return nullptr;
}

void Ranges::flusher_loop() {
  std::unique_lock<std::mutex> lk(ctl_mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(flush_ms_), [this] { return stopping_; });
    if (stopping_) break;
    lk.unlock();
    flush(false);
    lk.lock();
  }
  thread_done_ = true;
  lk.unlock();
  cv_.notify_all();
}

void Ranges::on_fork_child() { forked_.store(true, std::memory_order_relaxed); }

void Ranges::at_exit() {
  Ranges* r = instance_.load(std::memory_order_acquire);
  if (!r || forked_.load(std::memory_order_relaxed) || getpid() != r->pid_) return;
  {
    std::unique_lock<std::mutex> lk(r->ctl_mu_);
    r->stopping_ = true;
    r->cv_.notify_all();
    // a flush in progress finishes first; bounded: exit never hangs on the profiler
    r->cv_.wait_for(lk, std::chrono::seconds(2), [r] { return r->thread_done_; });
  }
  r->flush(true);
}

// -- threads ------------------------------------------------------------------------
ThreadState* Ranges::thread_state() {
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
        ts->next_all = threads_.load(std::memory_order_relaxed);
        threads_.store(ts, std::memory_order_release);  // under mu_: the only writer
      }
    }
    if (ts) live_threads_++;
  }
  if (!ts) {
    tl_refused = true;
    count(kThreadsOverCap);
    return nullptr;
  }
  pthread_setspecific(key_, ts);  // thread_exit returns it to the free list
  tl_state = ts;
  return ts;
}

void Ranges::thread_exit(void* state) {
  auto* ts = static_cast<ThreadState*>(state);
  Ranges* r = instance_.load(std::memory_order_acquire);
  // a fork child touches none of it: mu_ may have been held by a parent thread at the fork
  if (!ts || !r || forked_.load(std::memory_order_relaxed)) return;
  int open = ts->depth.load(std::memory_order_relaxed) + static_cast<int>(ts->overflow);
  if (open > 0) r->count(kOpenAtExit, static_cast<uint64_t>(open));
  ts->depth.store(0, std::memory_order_relaxed);
  ts->overflow = 0;
  tl_state = nullptr;
  // Its table keeps what it counted (the flusher sends the differences),
  // and the next thread that takes it adds to the same sums.
  std::lock_guard<std::mutex> g(r->mu_);
  ts->next_free = r->free_;
  r->free_ = ts;
  r->live_threads_--;
}

// -- names ---------------------------------------------------------------------------
Domain* Ranges::checked(const void* handle) {
  if (!handle) return &domains_[0];
  auto p = reinterpret_cast<uintptr_t>(handle), base = reinterpret_cast<uintptr_t>(domains_);
  if (p < base || p >= base + sizeof(Domain) * kMaxDomains || (p - base) % sizeof(Domain)) return &domains_[0];
  return const_cast<Domain*>(static_cast<const Domain*>(handle));
}

Domain* Ranges::domain(const char* utf8, size_t len) {
  if (!utf8) return &domains_[0];
  char name[sizeof(Domain::name)];
  len = utf8_whole(utf8, len < sizeof name ? len : sizeof name);
  sanitize(name, utf8, len);
  std::lock_guard<std::mutex> g(mu_);
  int n = n_domains_.load(std::memory_order_relaxed);
  for (int i = 1; i < n; i++)
    if (domains_[i].len == len && !memcmp(domains_[i].name, name, len)) return &domains_[i];
  if (n >= kMaxDomains - 1) {
    count(kDomainsOverCap);
    return &domains_[kMaxDomains - 1];
  }
  memcpy(domains_[n].name, name, len);
  domains_[n].len = static_cast<uint32_t>(len);
  n_domains_.store(n + 1, std::memory_order_release);
  return &domains_[n];
}

StringReg* Ranges::register_string(Domain* d, const char* utf8, size_t len) {
  if (len > kMaxName) len = utf8_whole(utf8, kMaxName);  // the caller counted the cut
  uint64_t h = hash_bytes(utf8, len);
  std::lock_guard<std::mutex> g(mu_);
  StringReg* strings = strings_.load(std::memory_order_relaxed);
  if (!strings) {
    strings = new (std::nothrow) StringReg[kMaxStrings + 1];
    if (!strings) return nullptr;
    StringReg& other = strings[kMaxStrings];
    memcpy(other.bytes, "(other)", 7);
    other.len = 7;
    other.hash = hash_bytes(other.bytes, 7);
    other.domain = 0;
    strings_.store(strings, std::memory_order_release);
  }
  uint16_t dom = static_cast<uint16_t>(d->index);
  for (uint32_t i = 0; i < n_strings_; i++) {  // registrations are rare and few: a scan keeps them unique
    StringReg& s = strings[i];
    if (s.hash == h && s.len == len && s.domain == dom && !memcmp(s.bytes, utf8, len)) return &s;
  }
  if (n_strings_ >= kMaxStrings) {
    count(kStringsOverCap);
    return &strings[kMaxStrings];
  }
  StringReg& s = strings[n_strings_];
  memcpy(s.bytes, utf8, len);
  s.len = static_cast<uint32_t>(len);
  s.hash = h;
  s.domain = dom;
  n_strings_++;
  return &s;
}

bool Ranges::text_of(const void* handle, Text* out) {
  // set once, before any handle into it was handed out
  const StringReg* base = strings_.load(std::memory_order_acquire);
  auto p = reinterpret_cast<uintptr_t>(handle), b = reinterpret_cast<uintptr_t>(base);
  if (!base || p < b || p >= b + sizeof(StringReg) * (kMaxStrings + 1) || (p - b) % sizeof(StringReg)) return false;
  const StringReg* s = static_cast<const StringReg*>(handle);
  out->bytes = s->bytes;
  out->len = s->len;
  out->hash = s->hash;
  return true;
}

// -- paths ---------------------------------------------------------------------------
PathEntry* Ranges::make_path(Domain* d, uint32_t parent, int kind, const char* raw, size_t raw_len) {
  uint32_t idx = n_paths_.load(std::memory_order_relaxed);
  if (idx >= kPathSlots) return nullptr;
  PathEntry* e = new (std::nothrow) PathEntry();
  if (!e) return nullptr;
  const PathEntry* pe = parent ? paths_[parent] : nullptr;
  char text[kMaxPathBytes + 8];
  size_t n = 0;
  if (pe) {
    memcpy(text, pe->text, pe->text_len);
    n = pe->text_len;
    text[n++] = '/';
  }
  if (kind == kDeeper) {
    memcpy(text + n, "...", 3);
    n += 3;
  } else if (kind == kOther) {
    memcpy(text, "(other)", 7);
    n = 7;
  } else if (raw_len == 0) {
    memcpy(text + n, "(no message)", 12);
    n += 12;
  } else {
    size_t room = n < kMaxPathBytes ? kMaxPathBytes - n : 0;
    size_t take = utf8_whole(raw, raw_len < room ? raw_len : room);
    n += sanitize(text + n, raw, take);
  }
  e->index = idx;
  e->parent = kind == kOther ? 0 : parent;
  e->domain = static_cast<uint16_t>(d->index);
  e->kind = static_cast<uint8_t>(kind);
  e->depth = static_cast<uint8_t>(pe && kind != kOther ? pe->depth + 1 : 1);
  e->hash = raw ? hash_bytes(raw, raw_len) : 0;
  e->raw = copy_of(raw ? raw : "", raw_len);
  e->raw_len = static_cast<uint32_t>(raw_len);
  e->text = copy_of(text, n);
  e->text_len = static_cast<uint32_t>(n);
  if (!e->raw || !e->text) {
    delete[] e->raw;
    delete[] e->text;
    delete e;
    return nullptr;
  }
  paths_[idx] = e;
  n_paths_.store(idx + 1, std::memory_order_release);  // the flusher reads entries below this
  return e;
}

uint32_t Ranges::other_path(Domain* d) {
  if (!d->other_path) {
    PathEntry* e = make_path(d, 0, kOther, nullptr, 0);
    if (e) d->other_path = e->index;
  }
  return d->other_path;
}

uint32_t Ranges::lookup_slow(Domain* d, uint32_t parent, const Text& t) {
  std::lock_guard<std::mutex> g(mu_);
  PathEntry* pe = parent ? paths_[parent] : nullptr;
  if (pe && pe->kind == kDeeper) return parent;
  if (pe && pe->depth >= kMaxPathDepth) {
    uint32_t deeper = pe->deeper.load(std::memory_order_relaxed);
    if (!deeper) {
      PathEntry* e = make_path(d, parent, kDeeper, nullptr, 0);
      if (!e) return parent;
      deeper = e->index;
      pe->deeper.store(deeper, std::memory_order_release);
    }
    return deeper;
  }
  size_t mask = table_size_ - 1;
  size_t i = static_cast<size_t>(mix(t.hash, parent, static_cast<uint64_t>(d->index))) & mask;
  for (size_t k = 0; k < table_size_; k++, i = (i + 1) & mask) {
    PathEntry* e = table_[i];
    if (!e) break;
    if (e->hash == t.hash && e->parent == parent && e->domain == d->index && e->raw_len == t.len &&
        !memcmp(e->raw, t.bytes, t.len))
      return e->index;
  }
  if (n_named_ >= kMaxPaths) {
    count(kNamesOverCap);
    return other_path(d);
  }
  PathEntry* e = make_path(d, parent, kNamed, t.bytes, t.len);
  if (!e) return other_path(d);
  table_[i] = e;  // i: the free slot the probe stopped at (the table is never more than half full)
  n_named_++;
  return e->index;
}

uint32_t Ranges::lookup(ThreadState* ts, Domain* d, uint32_t parent, const Text& t) {
  if (parent) {
    // a parent at the depth cap: its children fold into "<parent>/..." (made once, then read here)
    const PathEntry* pe = paths_[parent];
    if (pe->kind == kDeeper) return parent;
    if (pe->depth >= kMaxPathDepth) {
      uint32_t deeper = pe->deeper.load(std::memory_order_acquire);
      if (deeper) return deeper;
    }
  }
  CacheSlot* c = nullptr;
  if (ts) {
    c = &ts->cache[mix(t.hash, parent, static_cast<uint64_t>(d->index)) & (kCacheSlots - 1)];
    const PathEntry* e = c->entry;
    if (e && c->hash == t.hash && c->parent == parent && c->domain == d->index && c->len == t.len &&
        !memcmp(e->raw, t.bytes, t.len))
      return e->index;
  }
  uint32_t idx = lookup_slow(d, parent, t);
  const PathEntry* e = paths_[idx];
  if (c && e && e->kind == kNamed && e->parent == parent && e->raw_len == t.len) {
    c->hash = t.hash;
    c->parent = parent;
    c->domain = static_cast<uint16_t>(d->index);
    c->len = static_cast<uint16_t>(t.len);
    c->entry = e;
  }
  return idx;
}

// -- ranges -------------------------------------------------------------------------
uint32_t Ranges::current_path() {
  ThreadState* ts = tl_state;
  if (!ts) return 0;
  int depth = ts->depth.load(std::memory_order_relaxed);
  return depth > 0 ? ts->stack[depth - 1].path : 0;
}

int Ranges::push(Domain* d, Text* t) {
  ThreadState* ts = thread_state();
  if (!ts) return -1;
  if (gpu_wanted_ && !first_range_.load(std::memory_order_relaxed) && !first_range_.exchange(true))
    note_first_range();
  int depth = ts->depth.load(std::memory_order_relaxed);
  if (depth >= kMaxDepth) {
    ts->overflow++;
    count(kTooDeep);
    return depth + static_cast<int>(ts->overflow) - 1;
  }
  uint32_t parent = 0;
  for (int i = depth - 1; i >= 0; i--) {
    if (ts->stack[i].domain == d->index) {
      parent = ts->stack[i].path;
      break;
    }
  }
  if (!t->hash) t->hash = hash_bytes(t->bytes, t->len);
  uint32_t path = lookup(ts, d, parent, *t);
  StackEntry& e = ts->stack[depth];
  e.path = path;
  e.domain = static_cast<uint16_t>(d->index);
  e.start = now_ns();  // last: the lookup is not the range's time
  ts->depth.store(depth + 1, std::memory_order_relaxed);
  return depth;
}

int Ranges::pop(Domain* d) {
  uint64_t now = now_ns();  // first: what follows is not the range's time
  ThreadState* ts = tl_state;
  if (!ts) {
    if (!tl_refused) count(kUnbalancedPop);
    return -1;
  }
  if (ts->overflow) {
    ts->overflow--;
    return kMaxDepth + static_cast<int>(ts->overflow);
  }
  int depth = ts->depth.load(std::memory_order_relaxed);
  int i = depth - 1;
  while (i >= 0 && ts->stack[i].domain != d->index) i--;
  if (i < 0) {
    count(kUnbalancedPop);
    return -1;
  }
  StackEntry e = ts->stack[i];
  for (int j = i; j < depth - 1; j++) ts->stack[j] = ts->stack[j + 1];  // another domain's ranges stay open
  ts->depth.store(depth - 1, std::memory_order_relaxed);
  add_host(ts, e.path, now > e.start ? now - e.start : 0);
  return depth - 1;
}

void Ranges::add_host(ThreadState* ts, uint32_t path, uint64_t ns) {
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
  PathEntry* e = paths_[path];  // the thread's table is full: the path's shared sums
  e->host_ns.fetch_add(ns, std::memory_order_relaxed);
  e->host_count.fetch_add(1, std::memory_order_relaxed);
}

uint64_t Ranges::start_range(Domain* d, Text* t) {
  ThreadState* ts = thread_state();
  if (!t->hash) t->hash = hash_bytes(t->bytes, t->len);
  uint32_t path = lookup(ts, d, 0, *t);
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
  count(kRangeTableFull);
  return 0;
}

void Ranges::end_range(uint64_t id) {
  uint64_t now = now_ns();
  if (!id) return;  // a start that was not tracked (counted then)
  uint64_t slot = (id & 0xFFFF) - 1, gen = id >> 16;
  if (slot >= kOpenRanges) {
    count(kBadRangeEnd);
    return;
  }
  Open& o = open_[slot];
  uint64_t tag = gen << 1 | 1;
  if (o.tag.load(std::memory_order_acquire) != tag) {
    count(kBadRangeEnd);
    return;
  }
  uint64_t start = o.start;
  uint32_t path = o.path;
  // the fields are read before the slot is let go; a second end of the same id loses the race and is counted
  if (!o.tag.compare_exchange_strong(tag, (gen + 1) << 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    count(kBadRangeEnd);
    return;
  }
  if (path) add_host(thread_state(), path, now > start ? now - start : 0);
}

void Ranges::mark(Domain* d) { d->marks.fetch_add(1, std::memory_order_relaxed); }

void Ranges::add_gpu(uint32_t path, uint64_t ns) {
  if (!path || path >= n_paths_.load(std::memory_order_acquire)) return;
  PathEntry* e = paths_[path];
  e->gpu_ns.fetch_add(ns, std::memory_order_relaxed);
  e->gpu_count.fetch_add(1, std::memory_order_relaxed);
}

void Ranges::count(Problem p, uint64_t n) {
  problems_[p].fetch_add(n, std::memory_order_relaxed);
  if (!said_[p].load(std::memory_order_relaxed) && !said_[p].exchange(true))
    log(Level::kWarning, "%s; counted in graphsignal_nvtx_dropped{reason=%s}, not said again", kProblemText[p],
        kProblemNames[p]);
}

// -- the flusher ----------------------------------------------------------------------
bool Ranges::send_instruments(Domain* d) {
  if (d->host_inst && d->gpu_inst && d->marks_inst) return true;
  if (d->inst_attempts >= kMaxSendAttempts) return false;
  static const char* const kTypes[3] = {"profile", "profile", "counter"};
  static const char* const kNames[3] = {kHostMetric, kGpuMetric, kMarksMetric};
  uint32_t* ids[3] = {&d->host_inst, &d->gpu_inst, &d->marks_inst};
  for (int i = 0; i < 3; i++) {
    if (*ids[i]) continue;
    char def[160];  // probe.h's instrument definition: type, name, then key \x1e value
    int n = snprintf(def, sizeof def, "%s\x1f%s\x1fnvtx.domain\x1e%.*s", kTypes[i], kNames[i],
                     static_cast<int>(d->len), d->name);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof def) return false;
    uint32_t id = sink_.new_name_id();
    if (!sink_.send_name(id, def, static_cast<size_t>(n), GRAPHSIGNAL_NAME_INSTRUMENT)) {
      d->inst_attempts++;
      return false;
    }
    *ids[i] = id;
  }
  return true;
}

bool Ranges::send_path(PathEntry* p) {
  if (p->named) return true;
  if (p->attempts >= kMaxSendAttempts) return true;  // the string area is full: its records read "(unnamed)"
  if (!p->ring_id) p->ring_id = sink_.new_name_id();
  if (!sink_.send_name(p->ring_id, p->text, p->text_len)) {
    p->attempts++;
    return false;
  }
  p->named = true;
  return true;
}

bool Ranges::send_profile(uint32_t instrument, uint32_t frame, uint64_t ns, uint64_t count) {
  // extra: frame | samples << 32; more samples than 32 bits hold go in records of their own
  const uint64_t most = 0xFFFFFFFFull;
  bool ok = true;
  while (count > most) {
    ok &= sink_.write(GRAPHSIGNAL_REC_PROFILE_AGG, 0, 0, instrument, 0, frame | most << 32);
    count -= most;
  }
  return sink_.write(GRAPHSIGNAL_REC_PROFILE_AGG, 0, 0, instrument, ns, frame | count << 32) && ok;
}

uint32_t Ranges::counter_instrument(int problem) {
  if (problem_ids_[problem]) return problem_ids_[problem];
  char def[96];
  int n = snprintf(def, sizeof def, "counter\x1f%s\x1freason\x1e%s", kDroppedMetric, kProblemNames[problem]);
  uint32_t id = sink_.new_name_id();
  if (n > 0 && static_cast<size_t>(n) < sizeof def &&
      sink_.send_name(id, def, static_cast<size_t>(n), GRAPHSIGNAL_NAME_INSTRUMENT))
    problem_ids_[problem] = id;
  return problem_ids_[problem];
}

void Ranges::count_open_at_exit() {
  uint64_t open = 0;
  for (ThreadState* ts = threads_.load(std::memory_order_acquire); ts; ts = ts->next_all)
    open += static_cast<uint64_t>(ts->depth.load(std::memory_order_relaxed)) + ts->overflow;
  for (uint32_t i = 0; i < kOpenRanges; i++) open += open_[i].tag.load(std::memory_order_relaxed) & 1;
  if (open) count(kOpenAtExit, open);
}

void Ranges::flush(bool closing) {
  std::lock_guard<std::mutex> g(flush_mu_);
  if (closed_) return;
  if (closing && !exited_) count_open_at_exit();
  uint32_t n = n_paths_.load(std::memory_order_acquire);
  // What every thread's table and the shared sums hold beyond what was taken before.
  for (ThreadState* ts = threads_.load(std::memory_order_acquire); ts; ts = ts->next_all) {
    for (TableSlot& s : ts->slots) {
      uint32_t key = s.key.load(std::memory_order_acquire);
      if (!key || key >= n) continue;
      uint64_t c = s.count.load(std::memory_order_acquire), ns = s.ns.load(std::memory_order_relaxed);
      pend_count_[key] += c - s.sent_count;
      pend_ns_[key] += ns - s.sent_ns;
      s.sent_count = c, s.sent_ns = ns;
    }
  }
  for (uint32_t i = 1; i < n; i++) {
    PathEntry* p = paths_[i];
    uint64_t c = p->host_count.load(std::memory_order_relaxed), ns = p->host_ns.load(std::memory_order_relaxed);
    pend_count_[i] += c - p->sent_host_count;
    pend_ns_[i] += ns - p->sent_host_ns;
    p->sent_host_count = c, p->sent_host_ns = ns;
    uint64_t gc = p->gpu_count.load(std::memory_order_relaxed), gns = p->gpu_ns.load(std::memory_order_relaxed);
    bool host = pend_count_[i] || pend_ns_[i], gpu = gc != p->sent_gpu_count || gns != p->sent_gpu_ns;
    if (!host && !gpu) continue;
    Domain* d = &domains_[p->domain];
    // Names before the records that use them; what cannot be sent now (a
    // full ring) stays pending for the next flush.
    if (!send_instruments(d) || !send_path(p)) continue;
    if (host && send_profile(d->host_inst, p->ring_id, pend_ns_[i], pend_count_[i])) pend_count_[i] = pend_ns_[i] = 0;
    if (gpu && send_profile(d->gpu_inst, p->ring_id, gns - p->sent_gpu_ns, gc - p->sent_gpu_count))
      p->sent_gpu_count = gc, p->sent_gpu_ns = gns;
  }
  int nd = n_domains_.load(std::memory_order_acquire);
  for (int i = 0; i < kMaxDomains; i++) {
    if (i >= nd && i != kMaxDomains - 1) continue;
    Domain* d = &domains_[i];
    uint64_t m = d->marks.load(std::memory_order_relaxed);
    if (m == d->sent_marks || !send_instruments(d)) continue;
    if (sink_.write(GRAPHSIGNAL_REC_COUNTER, 0, 0, d->marks_inst, m - d->sent_marks, 0)) d->sent_marks = m;
  }
  for (int p = 0; p < kProblemCount; p++) {
    uint64_t v = problems_[p].load(std::memory_order_relaxed);
    if (v == sent_problems_[p]) continue;
    uint32_t id = counter_instrument(p);
    if (id && sink_.write(GRAPHSIGNAL_REC_COUNTER, 0, 0, id, v - sent_problems_[p], 0)) sent_problems_[p] = v;
  }
  if (closing) {
    exited_ = true;
    if (!collector_pending()) close_ring_locked();
  } else if (exited_ && !collector_pending()) {
    close_ring_locked();
  }
}

void Ranges::collector_done() {
  // The collector's last GPU time: sent now; the ring is closed here when
  // the exit flush came first (it left the ring open for this).
  flush(false);
}

void Ranges::close_ring_locked() {
  if (closed_) return;
  closed_ = true;
  log(Level::kDebug, "exit: NVTX ranges in %u frames", n_paths_.load(std::memory_order_relaxed) - 1);
  sink_.close();
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
