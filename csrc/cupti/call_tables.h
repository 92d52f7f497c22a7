// Per-thread tables of what API callbacks counted, flushed into the ring as
// aggregated records by the collector's thread (every flush period and at
// exit) instead of one ring record per call: a ring write costs about as
// much as the rest of a callback (scripts/bench_callbacks.py).
//
// Each workload thread that makes a hooked call gets one table (found
// through a thread-local pointer, kept for the life of the process so that
// what a thread counted is flushed after it exits). Only the owning thread
// writes a table's sums, with plain relaxed stores (no read-modify-write);
// the flusher keeps what it has already sent and sends the difference, so
// nothing needs a lock on the call path. A sum read while its call is half
// recorded is complete at the next flush; totals are exact.
//
// Copies and memsets are tabled per log2 size bucket and given their
// estimated GPU time when flushed, from the samples the estimator holds by
// then: copies made before the first sampling window are estimated too.
//
// Records (include/graphsignal/probe.h):
//   GRAPHSIGNAL_REC_SYNC_AGG        sub sync type, device, name_id calls, value ns
//   GRAPHSIGNAL_REC_MEMCPY_SAMPLED  sub copy kind, device, name_id src | dst << 8 | calls << 16,
//                                   value estimated ns, extra bytes
//   GRAPHSIGNAL_REC_MEMSET_SAMPLED  sub memory kind, device, name_id calls, value estimated ns, extra bytes
#pragma once

#include <stdint.h>

#include <atomic>
#include <mutex>

#include "copy_estimator.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

class CallTables {
 public:
  enum Kind : uint32_t { kSync = 0, kMemcpy = 1, kMemset = 2 };
  static constexpr int kSlots = 64;         // keys per thread (kinds x devices in use: a handful)
  static constexpr int kMaxTables = 4096;   // threads; later ones write records directly

  // `estimator` gives copies and memsets their time at flush (null: 0).
  CallTables(RingSink* sink, const CopyEstimator* estimator) : sink_(sink), estimator_(estimator) {}

  // On the calling thread: one call; `ns` for syncs (copies and memsets
  // are estimated at flush). False when the call could not be tabled (the
  // thread's table is full, too many threads, a device id above 255): the
  // caller writes the same record for this one call (write()) instead.
  bool add(Kind kind, uint32_t sub, uint32_t src, uint32_t dst, uint32_t device, uint64_t ns, uint64_t bytes);

  // The estimated ns of `calls` copies (or memsets) of `bytes` in all.
  uint64_t estimate(Kind kind, uint32_t sub, uint32_t src, uint32_t dst, uint64_t calls, uint64_t bytes) const;

  // Sends what was counted since the last flush. One flusher at a time.
  void flush();

  // One record of `calls` calls, as flush() writes them.
  bool write(Kind kind, uint8_t sub, uint32_t src, uint32_t dst, uint16_t dev, uint64_t calls, uint64_t ns,
             uint64_t bytes);

 private:
  struct Slot {
    std::atomic<uint32_t> key{0};  // 0: free
    std::atomic<uint64_t> calls{0}, ns{0}, bytes{0};
    uint64_t sent_calls = 0, sent_ns = 0, sent_bytes = 0;  // the flusher's
  };
  struct Table {
    Slot slots[kSlots];
    Table* next = nullptr;
  };

  static uint32_t key_of(Kind kind, uint32_t sub, uint32_t src, uint32_t dst, uint32_t device, uint32_t bucket) {
    return 1u | (kind << 1) | (sub << 3) | (src << 8) | (dst << 11) | (device << 14) | (bucket << 22);
  }
  Table* table();
  bool send(uint32_t key, uint64_t calls, uint64_t ns, uint64_t bytes);

  RingSink* sink_;
  const CopyEstimator* estimator_;
  std::atomic<Table*> tables_{nullptr};
  std::atomic<int> n_tables_{0};
  std::mutex flush_mu_;
};

}  // namespace cupti
}  // namespace graphsignal
