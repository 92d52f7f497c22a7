// NVTX ranges as profiles: what nvtx_injection.cpp hands over from the
// workload's NVTX calls, kept per thread and flushed into the process's
// NVTX ring (/dev/shm/gs-<run>-<pid>-nvtx) by a thread of its own.
//
// Nothing here needs CUDA or CUPTI: a program that only calls NVTX, with
// NVTX_INJECTION64_PATH naming this library, is profiled the same way
// (tests/integration/test_nvtx_injection.py runs one). GPU time per range
// (nvtx_gpu.h) is added when the CUPTI collector runs too.
//
// What reaches the ring (include/graphsignal/probe.h), per NVTX domain:
//   nvtx_ranges_nanoseconds{nvtx.domain}     profile: host wall time per range,
//                                            frame = nesting path "outer/inner",
//                                            samples = ranges (exact)
//   nvtx_range_gpu_nanoseconds{nvtx.domain}  profile: GPU time of the kernels
//                                            launched inside (nvtx_gpu.h)
//   nvtx_marks{nvtx.domain}                  counter: marks
//   graphsignal_nvtx_dropped{reason}         counter: what was not measured
// (the sidecar adds process.pid). Profiles travel as
// GRAPHSIGNAL_REC_PROFILE_AGG records: one per (frame, flush), not one per
// range.
//
// Cost on the workload's threads (scripts/bench_nvtx.py): a push reads the
// clock and looks the (parent, name) pair up in a per-thread cache; a pop
// reads the clock and adds to a per-thread table. No lock and no shared
// write on that path; the first use of a name on a thread takes one mutex.
// A workload that never calls NVTX never reaches this code.
//
// Untrusted input, bounded (each counted in graphsignal_nvtx_dropped and said
// once on stderr):
//   - push/pop stacks per thread (one stack, entries tagged by domain, as
//     each domain has its own stack in NVTX): kMaxDepth deep, deeper pushes
//     are counted (too_deep) and their pops matched;
//   - a pop with nothing open in its domain: unbalanced_pop;
//   - frames: kMaxPaths distinct paths per process, the rest in "(other)"
//     (names_over_cap); a name is cut to kMaxName bytes, a path to
//     kMaxPathDepth levels and kMaxPathBytes bytes (deeper ranges fold into
//     "<path>/..." );
//   - start/end ranges: kOpenRanges open at once (range_table_full); an end
//     of an unknown or already ended id: bad_range_end;
//   - domains (kMaxDomains, then "(other)") and registered strings
//     (kMaxStrings) by name;
//   - ranges still open at exit: open_at_exit (not timed);
//   - threads: kMaxThreads with NVTX state at once (threads_over_cap).
// A fork child stops collecting (its ranges are not measured).
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "ring_sink.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

constexpr int kMaxDepth = 128;          // push/pop entries tracked per thread
constexpr size_t kMaxName = 128;        // bytes of one range name
constexpr int kMaxPathDepth = 16;       // levels of a frame's path
constexpr size_t kMaxPathBytes = 256;   // bytes of a frame's path
constexpr uint32_t kMaxPaths = 4096;    // distinct frames per process
constexpr int kMaxDomains = 64;         // the last one is "(other)"
constexpr uint32_t kMaxStrings = 16384; // registered strings
constexpr uint32_t kOpenRanges = 4096;  // start/end ranges open at once
constexpr int kMaxThreads = 4096;       // threads with NVTX state at once

// What graphsignal_nvtx_dropped counts (its reason tag).
enum Problem : int {
  kUnbalancedPop = 0,
  kTooDeep,
  kNamesOverCap,
  kNameTruncated,
  kRangeTableFull,
  kBadRangeEnd,
  kDomainsOverCap,
  kStringsOverCap,
  kOpenAtExit,
  kThreadsOverCap,
  kProblemCount
};

// A message as NVTX passed it: bytes (a cut copy for wide strings) and,
// for registered strings, their hash.
struct Text {
  const char* bytes;
  size_t len;
  uint64_t hash;  // 0: not computed yet
};

struct Domain;
struct StringReg;
struct PathEntry;
struct ThreadState;

class Ranges {
 public:
  // The process's collector once started (nullptr before, when inactive,
  // and in a fork child).
  static Ranges* get() {
    Ranges* r = instance_.load(std::memory_order_acquire);
    return r && !forked_.load(std::memory_order_relaxed) ? r : nullptr;
  }
  // Starts collection on the first InitializeInjectionNvtx2: under
  // graphsignal-run (GRAPHSIGNAL_RUN_ID) with GRAPHSIGNAL_NVTX not off and a
  // ring made. Returns nullptr otherwise (the caller tells NVTX to turn its
  // calls into no-ops). Thread-safe; later calls return the same object.
  static Ranges* start();

  // GRAPHSIGNAL_NVTX=gpu: GPU time per range wanted.
  bool gpu_wanted() const { return gpu_wanted_; }

  Domain* default_domain() { return default_domain_; }
  Domain* domain(const char* utf8, size_t len);  // by name; the same name, the same handle
  Domain* checked(const void* handle);           // an NVTX domain handle: ours, or the default domain
  StringReg* register_string(Domain* d, const char* utf8, size_t len);
  bool text_of(const void* string_handle, Text* out);  // a registered string handle: false when not ours

  // Push returns the new range's level (0-based), pop the ended range's, as
  // NVTX does; negative when nothing was pushed or popped.
  int push(Domain* d, Text* t);
  int pop(Domain* d);
  uint64_t start_range(Domain* d, Text* t);  // 0 when not tracked
  void end_range(uint64_t id);
  void mark(Domain* d);

  // The innermost open push/pop range on the calling thread (a path
  // index), 0 when none: what a kernel launched now is attributed to.
  static uint32_t current_path();
  // GPU nanoseconds of one kernel (or graph replay) launched inside `path`.
  void add_gpu(uint32_t path, uint64_t ns);

  // Counts one problem and says it once.
  void count(Problem p, uint64_t n = 1);

  // Sends what was counted since the last flush (the flusher's thread, and
  // the exit). `closing`: the last one; the ring is closed after it when
  // nothing else will add to it (see nvtx_gpu.h: the CUPTI collector's last
  // buffers may still bring GPU time).
  void flush(bool closing);
  // The CUPTI collector translated its last buffers (nvtx_gpu.h's
  // collector_finished): its GPU time is sent, and the ring closed when the
  // exit flush ran already.
  void collector_done();

  static uint64_t hash_bytes(const char* p, size_t n);

 private:
  Ranges(graphsignal_ring_header* ring, bool gpu, unsigned flush_ms);
  void launch_thread();
  static void* flusher_main(void* self);
  void flusher_loop();
  static void at_exit();
  static void on_fork_child();

  ThreadState* thread_state();
  static void thread_exit(void* state);
  uint32_t lookup(ThreadState* ts, Domain* d, uint32_t parent, const Text& t);
  uint32_t lookup_slow(Domain* d, uint32_t parent, const Text& t);
  PathEntry* make_path(Domain* d, uint32_t parent, int kind, const char* raw, size_t raw_len);
  uint32_t other_path(Domain* d);
  void add_host(ThreadState* ts, uint32_t path, uint64_t ns);

  // flusher side
  bool send_instruments(Domain* d);
  bool send_path(PathEntry* p);
  bool send_profile(uint32_t instrument, uint32_t frame, uint64_t ns, uint64_t count);
  uint32_t counter_instrument(int problem);
  void count_open_at_exit();
  void close_ring_locked();

  RingSink sink_;
  pid_t pid_;
  bool gpu_wanted_;
  unsigned flush_ms_;

  // Domains: a fixed array, so that a handle NVTX passes back can be checked.
  Domain* domains_;
  Domain* default_domain_ = nullptr;  // domains_[0]
  std::atomic<int> n_domains_{1};
  std::mutex mu_;  // domains, strings, paths (slow paths only), thread states

  // kMaxStrings + 1 (the last: over the cap), made on the first registration
  std::atomic<StringReg*> strings_{nullptr};
  uint32_t n_strings_ = 0;

  // Paths: index -> entry (0 is no path). Entries are never freed.
  PathEntry** paths_;
  std::atomic<uint32_t> n_paths_{1};
  uint32_t n_named_ = 0;  // paths counted against kMaxPaths
  PathEntry** table_;     // open addressing over (domain, parent, kind, raw name)
  size_t table_size_;

  // Start/end ranges open now.
  struct Open;
  Open* open_;
  std::atomic<uint32_t> open_next_{0};

  // Thread states: all ever made (for the flusher), and those free for reuse.
  std::atomic<ThreadState*> threads_{nullptr};
  ThreadState* free_ = nullptr;
  int live_threads_ = 0;
  pthread_key_t key_;
  bool key_ok_ = false;

  std::atomic<uint64_t> problems_[kProblemCount] = {};
  std::atomic<bool> said_[kProblemCount] = {};

  // the flusher's thread: asked to stop at exit (ctl_mu_, cv_)
  std::mutex ctl_mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool thread_done_ = true;
  std::atomic<bool> first_range_{false};  // GPU attribution was told about the first range
  std::mutex flush_mu_;  // one flush at a time; guards what the flusher keeps
  bool exited_ = false;  // the exit flush ran
  bool closed_ = false;
  uint64_t* pend_ns_;  // per path, this flush (the flusher's)
  uint64_t* pend_count_;
  uint64_t sent_problems_[kProblemCount] = {};
  uint32_t problem_ids_[kProblemCount] = {};

  static std::atomic<Ranges*> instance_;
  static std::atomic<bool> forked_;
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
