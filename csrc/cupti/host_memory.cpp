#include "host_memory.h"

#include <mutex>

namespace graphsignal {
namespace cupti {

void HostMemory::add(uintptr_t base, size_t size, uint8_t kind) {
  if (!base || !size) return;
  std::unique_lock<std::shared_mutex> g(mu_);
  if (ranges_.size() >= kMaxRanges && !ranges_.count(base)) return;
  ranges_[base] = Range{base + size, kind};
  count_.store(ranges_.size(), std::memory_order_relaxed);
}

void HostMemory::remove(uintptr_t base) {
  if (!base || !count_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::shared_mutex> g(mu_);
  ranges_.erase(base);
  count_.store(ranges_.size(), std::memory_order_relaxed);
}

uint8_t HostMemory::kind_of(uintptr_t p) const {
  if (!count_.load(std::memory_order_relaxed)) return kNone;
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return kNone;
  --it;
  return p < it->second.end ? it->second.kind : kNone;
}

}  // namespace cupti
}  // namespace graphsignal
