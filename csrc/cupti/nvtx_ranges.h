// NVTX ranges as profiles: the collection nvtx_injection.cpp hands the
// workload's NVTX calls to, one per process. It puts the rooms together
// and owns their life:
//   nvtx_limits.h   the bounds, and the count of what went past one
//   nvtx_text.h     a message's bytes: hash, cut, sanitize
//   nvtx_domains.h  domains and registered strings (handles checked)
//   nvtx_paths.h    path interning: "outer/inner" -> a path index
//   nvtx_stacks.h   push/pop stacks, start/end ranges, per-thread sums
//   nvtx_gpu.h      GPU time per range, when the CUPTI collector runs too
//   nvtx_flusher.h  the thread that sends it all into the NVTX ring
//
// Nothing here needs CUDA or CUPTI: a program that only calls NVTX, with
// NVTX_INJECTION64_PATH naming this library, is profiled the same way
// (tests/integration/test_nvtx_injection.py runs one). A workload that
// never calls NVTX never reaches this code.
//
// Guards the process's life: collection starts once, under graphsignal-run
// only, and only with a ring; once started the library is never unloaded
// (a thread, an atexit handler and thread-exit destructors point into it);
// the exit flushes what is left, waiting a bounded time for the thread; a
// fork child stops collecting (get() answers nullptr there, and nothing in
// it takes a lock a parent thread may have held at the fork).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>

#include "nvtx_domains.h"
#include "nvtx_flusher.h"
#include "nvtx_limits.h"
#include "nvtx_paths.h"
#include "nvtx_stacks.h"
#include "nvtx_text.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

class Ranges {
 public:
  // The process's collection once started (nullptr before, when inactive,
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

  Domain* default_domain() { return domains_.default_domain(); }
  Domain* domain(const char* utf8, size_t len) { return domains_.domain(utf8, len); }
  Domain* checked(const void* handle) { return domains_.checked(handle); }
  StringReg* register_string(Domain* d, const char* utf8, size_t len) {
    return domains_.register_string(d, utf8, len);
  }
  bool text_of(const void* string_handle, Text* out) { return domains_.text_of(string_handle, out); }

  // As nvtx_stacks.h's.
  int push(Domain* d, Text* t) {
    if (gpu_wanted_ && !first_range_.load(std::memory_order_relaxed)) first_range();
    return stacks_.push(static_cast<uint16_t>(d->index), t);
  }
  int pop(Domain* d) { return stacks_.pop(static_cast<uint16_t>(d->index)); }
  uint64_t start_range(Domain* d, Text* t) { return stacks_.start_range(static_cast<uint16_t>(d->index), t); }
  void end_range(uint64_t id) { stacks_.end_range(id); }
  void mark(Domain* d) { d->marks.fetch_add(1, std::memory_order_relaxed); }

  // Counts one problem and says it once.
  void count(Problem p, uint64_t n = 1) { problems_.count(p, n); }

 private:
  Ranges(graphsignal_ring_header* ring, bool gpu);
  bool ok() const { return domains_.ok() && paths_.ok() && stacks_.ok() && flusher_.ok(); }
  static void at_exit();
  static void on_fork_child();
  static void on_collector_finished();
  void first_range();  // GRAPHSIGNAL_NVTX=gpu: the process's first push/pop range

  pid_t pid_;
  bool gpu_wanted_;
  std::atomic<bool> first_range_{false};  // GPU attribution was told about the first range
  Problems problems_;
  DomainTable domains_;
  PathTable paths_;
  Stacks stacks_;
  Flusher flusher_;

  static std::atomic<Ranges*> instance_;
  static std::atomic<bool> forked_;
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
