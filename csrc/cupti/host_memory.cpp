// Host memory ranges and address kinds (host_memory.h): the sorted copy
// readers search lock-free, and the driver asked once per 2 MiB region.
#include "host_memory.h"

#include <mutex>

#include "driver_api.h"

namespace graphsignal {
namespace cupti {

namespace {
constexpr uint64_t kEndMask = (1ull << 56) - 1;
}

void HostMemory::add(uintptr_t base, size_t size, uint8_t kind) {
  if (!base || !size) return;
  std::unique_lock<std::shared_mutex> g(mu_);
  if (ranges_.size() >= kMaxRanges && !ranges_.count(base)) return;
  ranges_[base] = Range{base + size, kind};
  publish();
}

void HostMemory::remove(uintptr_t base) {
  if (!base || !count_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::shared_mutex> g(mu_);
  if (!ranges_.erase(base)) return;
  publish();
}

void HostMemory::publish() {
  bool fits = ranges_.size() <= kFast;
  for (const auto& r : ranges_)
    if (r.second.end > kEndMask) fits = false;  // not a user-space address: keep to the lock
  uint64_t s = seq_.load(std::memory_order_relaxed);
  seq_.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (fits) {
    size_t i = 0;
    for (const auto& r : ranges_) {
      fast_base_[i].store(r.first, std::memory_order_relaxed);
      fast_end_[i].store(r.second.end | static_cast<uint64_t>(r.second.kind) << 56, std::memory_order_relaxed);
      i++;
    }
    fast_n_.store(i, std::memory_order_relaxed);
  }
  fast_ok_.store(fits, std::memory_order_relaxed);
  count_.store(ranges_.size(), std::memory_order_relaxed);
  seq_.store(s + 2, std::memory_order_release);
}

uint8_t HostMemory::kind_of(uintptr_t p) const {
  if (!count_.load(std::memory_order_relaxed)) return kNone;
  for (int attempt = 0; attempt < 4; attempt++) {
    uint64_t s1 = seq_.load(std::memory_order_acquire);
    if (s1 & 1) continue;  // being rewritten
    if (!fast_ok_.load(std::memory_order_relaxed)) break;
    size_t lo = 0, hi = fast_n_.load(std::memory_order_relaxed);
    if (hi > kFast) hi = kFast;
    while (lo < hi) {  // the first start above p
      size_t mid = (lo + hi) / 2;
      if (fast_base_[mid].load(std::memory_order_relaxed) <= p) lo = mid + 1;
      else hi = mid;
    }
    uint8_t kind = kNone;
    if (lo) {
      uint64_t e = fast_end_[lo - 1].load(std::memory_order_relaxed);
      if (p < (e & kEndMask)) kind = static_cast<uint8_t>(e >> 56);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s1) return kind;
  }
  return locked_kind_of(p);
}

uint8_t HostMemory::locked_kind_of(uintptr_t p) const {
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return kNone;
  --it;
  return p < it->second.end ? it->second.kind : kNone;
}

bool AddressKinds::unified(uintptr_t p, uint8_t* kind) {
  uint8_t k = ranges_->kind_of(p);
  if (k == kPinned) {
    *kind = k;
    return true;
  }
  if (k == kManaged) {
    *kind = k;
    return false;
  }
  // Device memory, or ordinary (pageable) host memory. Page-locked memory
  // is found in the ranges above, first, so a region's answer never has to
  // say "pinned".
  uint64_t region = static_cast<uint64_t>(p) >> 21;
  std::atomic<uint64_t>& slot = regions_[region % kRegions];
  uint64_t seen = slot.load(std::memory_order_relaxed);
  if (seen >> 1 == region + 1) {
    bool device = seen & 1;
    *kind = device ? kDevice : kPageable;
    return !device;
  }
  unsigned int type = 0;
  bool device = false, known = false;
  if (driver_ && driver_->pointer_get_attribute) {
    CUresult r = driver_->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, static_cast<CUdeviceptr>(p));
    if (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST) {
      *kind = kPinned;  // registered before this library saw it
      return true;
    }
    device = r == CUDA_SUCCESS;
    known = r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE;  // the latter: memory CUDA does not know
  }
  if (known) slot.store((region + 1) << 1 | (device ? 1 : 0), std::memory_order_relaxed);
  *kind = device ? kDevice : kPageable;
  return !device;
}

}  // namespace cupti
}  // namespace graphsignal
