#include "buffer_pool.h"

#include <stdlib.h>

namespace graphsignal {
namespace cupti {

uint8_t* BufferPool::acquire() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!free_.empty()) {
      uint8_t* b = free_.back();
      free_.pop_back();
      out_++;
      return b;
    }
    if (out_ >= max_) {
      refused_++;
      return nullptr;
    }
    out_++;  // reserve the slot before allocating outside the lock
  }
  // malloc's alignment (16 on x86-64 glibc) is above CUPTI's 8.
  uint8_t* b = static_cast<uint8_t*>(malloc(size_));
  if (!b) {
    std::lock_guard<std::mutex> g(mu_);
    out_--;
    refused_++;
  }
  return b;
}

void BufferPool::release(uint8_t* buffer) {
  if (!buffer) return;
  std::lock_guard<std::mutex> g(mu_);
  out_--;
  free_.push_back(buffer);
}

uint64_t BufferPool::refused() {
  std::lock_guard<std::mutex> g(mu_);
  return refused_;
}

}  // namespace cupti
}  // namespace graphsignal
