#include "copy_estimator.h"

#include <string.h>

namespace graphsignal {
namespace cupti {

void CopyEstimator::sample(uint8_t kind, uint8_t memory, uint64_t bytes, uint64_t ns) {
  if (!valid(kind, memory)) return;
  Acc& a = acc_[kind][memory][bucket(bytes)];
  a.n++;
  a.ns += ns;
  a.bytes += bytes;
  dirty_[kind][memory] = true;
  samples_++;
}

void CopyEstimator::publish() {
  for (int k = 0; k < kKinds; k++) {
    for (int m = 0; m < kMemoryKinds; m++) {
      if (!dirty_[k][m]) continue;
      dirty_[k][m] = false;
      const Acc* row = acc_[k][m];
      for (int b = 0; b < kBuckets; b++) {
        // the nearest sampled bucket, the smaller one on a tie
        int s = -1;
        for (int d = 0; d < kBuckets && s < 0; d++) {
          if (b - d >= 0 && row[b - d].n) s = b - d;
          else if (b + d < kBuckets && row[b + d].n) s = b + d;
        }
        uint64_t fixed = 0;
        double per_byte = 0.0;
        if (s >= 0 && s < kBandwidthBucket) {
          fixed = row[s].ns / row[s].n;
        } else if (s >= 0 && row[s].bytes) {
          per_byte = static_cast<double>(row[s].ns) / static_cast<double>(row[s].bytes);
        }
        uint64_t bits;
        memcpy(&bits, &per_byte, sizeof bits);
        fixed_ns_[k][m][b].store(fixed, std::memory_order_relaxed);
        ns_per_byte_bits_[k][m][b].store(bits, std::memory_order_relaxed);
      }
    }
  }
}

uint64_t CopyEstimator::estimate(uint8_t kind, uint8_t memory, uint64_t bytes) const {
  if (!valid(kind, memory)) return 0;
  int b = bucket(bytes);
  uint64_t fixed = fixed_ns_[kind][memory][b].load(std::memory_order_relaxed);
  uint64_t bits = ns_per_byte_bits_[kind][memory][b].load(std::memory_order_relaxed);
  if (!bits) return fixed;
  double per_byte;
  memcpy(&per_byte, &bits, sizeof per_byte);
  return fixed + static_cast<uint64_t>(per_byte * static_cast<double>(bytes) + 0.5);
}

}  // namespace cupti
}  // namespace graphsignal
