// Activity buffers handed to CUPTI. Buffers are reused through a free list
// and capped: when every buffer is out (the sidecar or the completion path
// fell far behind), CUPTI gets none, drops the records and counts them, and
// the collector reports that count instead of growing without bound.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <mutex>
#include <vector>

namespace graphsignal {
namespace cupti {

class BufferPool {
 public:
  BufferPool(size_t buffer_size, size_t max_buffers) : size_(buffer_size), max_(max_buffers) {
    free_.reserve(max_buffers);  // release() then never allocates
  }

  size_t buffer_size() const { return size_; }

  // A buffer of buffer_size() bytes (8-byte aligned, as CUPTI requires), or
  // nullptr when max_buffers are out.
  uint8_t* acquire();

  void release(uint8_t* buffer);

  uint64_t refused();

 private:
  size_t size_;
  size_t max_;
  std::mutex mu_;  // held for a free-list operation only, never across CUPTI or malloc-heavy work
  std::vector<uint8_t*> free_;
  size_t out_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace cupti
}  // namespace graphsignal
