// NVTX ranges as they open and close: each thread's push/pop stack, the
// process's start/end ranges, and the per-thread table where a closed
// range's host time is summed under its path (nvtx_paths.h) until the
// flusher (nvtx_flusher.h) harvests it.
//
// Cost on the workload's threads (scripts/bench_nvtx.py): a push reads the
// clock and looks its path up in the thread's cache; a pop reads the clock
// and adds to the thread's table. No lock and no shared write on that path;
// a thread's first range takes one mutex.
//
// Guards against untrusted nesting (each counted, nvtx_limits.h): stacks
// kMaxDepth deep (deeper pushes counted as too_deep, their pops matched);
// a pop with nothing open in its domain (unbalanced_pop; one stack per
// thread holds every domain's entries, as each domain nests on its own in
// NVTX); kOpenRanges start/end ranges open at once (range_table_full); an
// end of an unknown, ended or forged id (bad_range_end, and a slot is let
// go once only, so two ends of one id cannot both count); kMaxThreads
// threads with state at once (threads_over_cap; an exited thread's state
// is reused with its sums); ranges open when their thread ends
// (open_at_exit). A fork child's exiting threads touch nothing (a lock may
// have been held by a parent thread at the fork).
//
// One per process: the calling thread's state is found through a
// thread-local, and current_path() reads it without an object.
#pragma once

#include <pthread.h>
#include <stdint.h>

#include <atomic>
#include <mutex>

#include "nvtx_limits.h"
#include "nvtx_paths.h"
#include "nvtx_text.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

struct ThreadState;

class Stacks {
 public:
  Stacks(PathTable* paths, Problems* problems);
  bool ok() const { return open_ && key_ok_; }

  // Push returns the new range's level (0-based), pop the ended range's, as
  // NVTX does; negative when nothing was pushed or popped. A push hashes t
  // once (t->hash), so a registered string's hash is kept.
  int push(uint16_t domain, Text* t);
  int pop(uint16_t domain);
  uint64_t start_range(uint16_t domain, Text* t);  // 0 when not tracked
  void end_range(uint64_t id);

  // The innermost open push/pop range on the calling thread (a path
  // index), 0 when none: what a kernel launched now is attributed to.
  static uint32_t current_path();

  // The flusher's (one caller at a time): adds what every thread's table
  // counted since the last harvest to pend_ns/pend_count[path], for paths
  // below n_paths.
  void harvest(uint32_t n_paths, uint64_t* pend_ns, uint64_t* pend_count);
  // Ranges open now, on every thread and among the start/end ranges.
  uint64_t open_now() const;

  // In a fork child, right after the fork: exiting threads touch nothing.
  void on_fork_child() { forked_.store(true, std::memory_order_relaxed); }

 private:
  struct Open;
  ThreadState* thread_state();
  static void thread_exit(void* state);
  void add_host(ThreadState* ts, uint32_t path, uint64_t ns);

  PathTable* paths_;
  Problems* problems_;
  std::mutex mu_;  // thread states: made, freed, reused
  std::atomic<ThreadState*> threads_{nullptr};  // all ever made (for the flusher)
  ThreadState* free_ = nullptr;
  int live_threads_ = 0;
  pthread_key_t key_;
  bool key_ok_ = false;
  Open* open_;  // start/end ranges open now
  std::atomic<uint32_t> open_next_{0};
  std::atomic<bool> forked_{false};
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
