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
//
// MemoryKinds is what decoding a call's parameters (api_params.h) may ask
// about an address, and all it may ask: the decoding is free functions over
// it, below the dispatcher (api_callbacks.h), and tests hand them a fake.
// AddressKinds answers it in the library: the ranges here first, then, for
// a unified address outside them, the driver (asked once per 2 MiB region).
//
// Guards against: a lookup that costs a lock or a store on every copy (the
// ranges are read lock-free, see kind_of); unbounded memory (kMaxRanges,
// kRegions); a driver call on every unified-address copy (the region
// cache); a driver that cannot answer (pageable, and not cached).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <map>
#include <shared_mutex>

namespace graphsignal {
namespace cupti {

struct DriverApi;

// CUpti_ActivityMemoryKind values (cupti_activity.h), as the callbacks write them.
constexpr uint8_t kMemPageable = 1, kMemPinned = 2, kMemDevice = 3, kMemManaged = 5;

// What parameter decoding asks about an address.
class MemoryKinds {
 public:
  static constexpr uint8_t kNone = 0;  // not a range seen here
  static constexpr uint8_t kPageable = kMemPageable, kPinned = kMemPinned, kDevice = kMemDevice,
                           kManaged = kMemManaged;
  // The kind of a range allocated or registered through CUDA that holds p
  // (kPinned, kManaged), or kNone.
  virtual uint8_t range_kind(uintptr_t p) = 0;
  // Where a unified address lives (cudaMemcpyDefault, cuMemcpy): *kind is
  // kPinned, kManaged, kDevice or kPageable; true when that is host memory
  // the copy engine reads as such (pinned or pageable, not managed).
  virtual bool unified(uintptr_t p, uint8_t* kind) = 0;

 protected:
  ~MemoryKinds() = default;
};

class HostMemory {
 public:
  static constexpr uint8_t kNone = MemoryKinds::kNone;
  static constexpr uint8_t kPinned = kMemPinned;
  static constexpr uint8_t kManaged = kMemManaged;
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

// The library's MemoryKinds: `ranges` first; a unified address outside them
// is asked of the driver (cuPointerGetAttribute), once per 2 MiB region:
// under unified addressing a region is in CUDA's device reservation or
// not for the life of the process. Lock-free; any thread.
class AddressKinds final : public MemoryKinds {
 public:
  AddressKinds(const HostMemory* ranges, const DriverApi* driver) : ranges_(ranges), driver_(driver) {}
  uint8_t range_kind(uintptr_t p) override { return ranges_->kind_of(p); }
  bool unified(uintptr_t p, uint8_t* kind) override;

 private:
  static constexpr size_t kRegions = 4096;  // direct-mapped: (region + 1) << 1 | device
  const HostMemory* ranges_;
  const DriverApi* driver_;
  std::atomic<uint64_t> regions_[kRegions] = {};
};

}  // namespace cupti
}  // namespace graphsignal
