// What the NVTX collection sends, and when: a thread of its own wakes every
// flush period, takes what the stacks (nvtx_stacks.h), the paths' shared
// and GPU sums (nvtx_paths.h), the domains' marks (nvtx_domains.h) and the
// problem counts (nvtx_limits.h) gained since the last flush, and writes
// them into the process's NVTX ring (/dev/shm/gs-<run>-<pid>-nvtx) as
// include/graphsignal/probe.h defines it, per NVTX domain:
//   nvtx_ranges_nanoseconds{nvtx.domain}     profile: host wall time per range,
//                                            frame = nesting path "outer/inner",
//                                            samples = ranges (exact)
//   nvtx_range_gpu_nanoseconds{nvtx.domain}  profile: GPU time of the kernels
//                                            launched inside (nvtx_gpu.h)
//   nvtx_marks{nvtx.domain}                  counter: marks
//   graphsignal_nvtx_dropped{reason}         counter: what was not measured
// (the sidecar adds process.pid). Profiles travel as
// GRAPHSIGNAL_REC_PROFILE_AGG records: one per (frame, flush), not one per
// range. Names go before the records that use them.
//
// Guards against: a full ring or string area (what cannot be sent stays
// pending for the next flush; a name the string area refuses is tried
// kMaxSendAttempts times, then its records read "(unnamed)"); more samples
// than a record's 32 bits hold (split into several records); two flushes
// at once (one lock: the thread's, the exit's and the collector's last);
// an exit that waits on the profiler (the thread is asked to stop and
// waited for a bounded time); a ring closed while GPU time may still come
// (closed only once the CUPTI collector, if any, is done: more_coming).
#pragma once

#include <graphsignal/probe.h>
#include <stdint.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "nvtx_domains.h"
#include "nvtx_limits.h"
#include "nvtx_paths.h"
#include "nvtx_stacks.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

class Flusher {
 public:
  // The process's NVTX ring (GRAPHSIGNAL_RING_CAPACITY, else sized for one
  // record per frame and flush), or nullptr outside graphsignal-run or
  // when it cannot be made (said on stderr).
  static graphsignal_ring_header* open_ring();

  // more_coming: whether GPU time may still arrive (the ring stays open
  // after the exit flush while it does).
  Flusher(graphsignal_ring_header* ring, DomainTable* domains, PathTable* paths, Stacks* stacks, Problems* problems,
          bool (*more_coming)());
  bool ok() const { return pend_ns_ && pend_count_ && path_sent_; }

  // Sends what was counted since the last flush. `closing`: the exit's
  // flush; the ring is closed after it unless more_coming().
  void flush(bool closing);
  // The CUPTI collector translated its last buffers: its GPU time is sent,
  // and the ring closed when the exit flush ran already.
  void collector_done() { flush(false); }

  // The thread that flushes every period_ms; false when there is none
  // (then only the exit flushes).
  bool start_thread(unsigned period_ms);
  // At exit: asks the thread to stop and waits for a flush in progress, at
  // most `wait`.
  void stop_thread(std::chrono::milliseconds wait);

 private:
  struct DomainSent {
    uint64_t marks;
    uint32_t host_inst, gpu_inst, marks_inst;
    int attempts;
  };
  struct PathSent {
    uint64_t host_ns, host_count, gpu_ns, gpu_count;
    uint32_t ring_id;
    bool named;
    int attempts;
  };
  static void* thread_main(void* self);
  void loop();
  bool send_instruments(int domain);
  bool send_path(uint32_t path);
  bool send_profile(uint32_t instrument, uint32_t frame, uint64_t ns, uint64_t count);
  uint32_t counter_instrument(int problem);
  void close_ring_locked();

  RingSink sink_;
  DomainTable* domains_;
  PathTable* paths_;
  Stacks* stacks_;
  Problems* problems_;
  bool (*more_coming_)();
  unsigned period_ms_ = 1000;

  // the thread: asked to stop at exit (ctl_mu_, cv_)
  std::mutex ctl_mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool thread_done_ = true;

  std::mutex flush_mu_;  // one flush at a time; guards everything below
  bool exited_ = false;  // the exit flush ran
  bool closed_ = false;
  uint64_t* pend_ns_;  // per path: harvested, not sent yet
  uint64_t* pend_count_;
  PathSent* path_sent_;  // per path
  DomainSent domain_sent_[kMaxDomains] = {};
  uint64_t sent_problems_[kProblemCount] = {};
  uint32_t problem_ids_[kProblemCount] = {};
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
