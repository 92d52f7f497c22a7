// Which address ranges are page-locked or managed, learned from the
// allocation calls themselves (cudaHostAlloc / cudaMallocHost /
// cudaHostRegister / cudaMallocManaged and their driver twins), so that a
// copy is classified pinned or pageable without asking the driver about
// its pointer on every call. Memory is classified as CUPTI's activity
// records classify it (CUpti_ActivityMemoryKind values).
//
// The library is injected at cuInit, before any allocation, so every range
// is seen. Not seen: host memory mapped through the virtual memory
// management API (cuMemCreate on a host location), classified pageable.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <shared_mutex>

namespace graphsignal {
namespace cupti {

class HostMemory {
 public:
  static constexpr uint8_t kNone = 0;  // not a range seen here
  static constexpr uint8_t kPinned = 2;   // CUPTI_ACTIVITY_MEMORY_KIND_PINNED
  static constexpr uint8_t kManaged = 5;  // CUPTI_ACTIVITY_MEMORY_KIND_MANAGED
  static constexpr size_t kMaxRanges = 1 << 20;  // bounded memory; more ranges are classified by default

  static constexpr size_t kFast = 4096;  // ranges the lock-free lookup holds; beyond, lookups take the lock

  void add(uintptr_t base, size_t size, uint8_t kind);
  // Forgets the range starting at `base` (frees and unregisters name the base).
  void remove(uintptr_t base);
  // The kind of the range holding `p`, or kNone. One relaxed load when no
  // range was ever added; otherwise a binary search in a sorted copy of the
  // ranges that readers check against a sequence number (a seqlock: no
  // store on the lookup path), or the lock when there are too many ranges.
  uint8_t kind_of(uintptr_t p) const;
  size_t size() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct Range {
    uintptr_t end;
    uint8_t kind;
  };
  uint8_t locked_kind_of(uintptr_t p) const;
  void publish();  // under mu_ (unique): the sorted copy

  mutable std::shared_mutex mu_;  // writers: allocations; readers: lookups when the copy cannot serve
  std::map<uintptr_t, Range> ranges_;
  std::atomic<size_t> count_{0};
  // The sorted copy: starts, and ends with the kind in the top byte.
  std::atomic<uint64_t> seq_{0};  // odd while publish() rewrites the copy
  std::atomic<size_t> fast_n_{0};
  std::atomic<bool> fast_ok_{true};
  std::atomic<uint64_t> fast_base_[kFast] = {};
  std::atomic<uint64_t> fast_end_[kFast] = {};
};

}  // namespace cupti
}  // namespace graphsignal
