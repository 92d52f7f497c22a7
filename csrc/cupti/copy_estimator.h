// Estimated GPU time of copies and memsets counted by API callbacks.
//
// A copy's GPU duration needs the device's clock, which only CUPTI's
// activity records carry, at CUPTI's per-call price. In the hybrid
// collection the MEMCPY and MEMSET activity kinds are on only in short
// sampling windows; the durations timed there are kept per (copy kind, host
// memory kind, log2 size bucket), and every counted copy is given the
// estimate of its bucket: the mean duration for latency-bound sizes, the
// sampled time per byte for bandwidth-bound ones. Buckets never sampled
// borrow the nearest sampled bucket of the same kind; a kind never sampled
// is estimated 0. The ring records carrying estimates have their own type
// (GRAPHSIGNAL_REC_MEMCPY_SAMPLED / _MEMSET_SAMPLED) and the sidecar tags
// their series duration=sampled.
//
// sample() and publish() run on one thread (the translator's); estimate()
// on any thread, lock-free.
#pragma once

#include <stdint.h>

#include <atomic>

namespace graphsignal {
namespace cupti {

class CopyEstimator {
 public:
  static constexpr int kKinds = 16;        // CUpti_ActivityMemcpyKind values, and kMemset
  static constexpr int kMemoryKinds = 8;   // CUpti_ActivityMemoryKind of the host side (memsets: of the target)
  static constexpr int kBuckets = 48;      // floor(log2(bytes)), the last one open-ended
  static constexpr int kBandwidthBucket = 16;  // from 64 KiB up, time scales with bytes
  static constexpr uint8_t kMemset = 15;

  static int bucket(uint64_t bytes) {
    if (!bytes) return 0;
    int b = 63 - __builtin_clzll(bytes);
    return b < kBuckets ? b : kBuckets - 1;
  }

  // The memory kind an estimate is kept by: the host side of a copy (none
  // for device-to-device and peer copies).
  static uint8_t memory_of(uint8_t kind, uint8_t src, uint8_t dst) {
    switch (kind) {
      case 1:  // HTOD
      case 3:  // HTOA
      case 9:  // HTOH
        return src;
      case 2:  // DTOH
      case 4:  // ATOH
        return dst;
      default:
        return 0;
    }
  }

  void sample(uint8_t kind, uint8_t memory, uint64_t bytes, uint64_t ns);
  // Makes the samples so far visible to estimate().
  void publish();
  uint64_t estimate(uint8_t kind, uint8_t memory, uint64_t bytes) const;

  uint64_t samples() const { return samples_; }

 private:
  struct Acc {
    uint64_t n, ns, bytes;
  };
  static bool valid(uint8_t kind, uint8_t memory) { return kind < kKinds && memory < kMemoryKinds; }

  Acc acc_[kKinds][kMemoryKinds][kBuckets] = {};
  bool dirty_[kKinds][kMemoryKinds] = {};
  uint64_t samples_ = 0;
  // Published per bucket: estimate = fixed_ns + bytes * ns_per_byte.
  std::atomic<uint64_t> fixed_ns_[kKinds][kMemoryKinds][kBuckets] = {};
  std::atomic<uint64_t> ns_per_byte_bits_[kKinds][kMemoryKinds][kBuckets] = {};  // a double's bits
};

}  // namespace cupti
}  // namespace graphsignal
