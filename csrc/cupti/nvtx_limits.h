// The bounds that hold the NVTX rooms (nvtx_*.h) to fixed-size tables, and
// the count of what input went past one: graphsignal_nvtx_dropped{reason}.
//
// Every NVTX call is the workload's, so its input is untrusted: names of any
// length, stacks of any depth, ends without starts, handles that are not
// ours, as many threads, domains and strings as it likes. No room grows
// without bound, waits, or fails the call; each counts the problem here,
// which says it once on stderr, and the flusher (nvtx_flusher.h) sends the
// counts. Nothing here needs CUDA, CUPTI or a ring.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace graphsignal {
namespace cupti {
namespace nvtx {

constexpr int kMaxDepth = 128;          // push/pop entries tracked per thread
constexpr size_t kMaxName = 128;        // bytes of one range name
constexpr int kMaxPathDepth = 16;       // levels of a frame's path
constexpr size_t kMaxPathBytes = 256;   // bytes of a frame's path
constexpr uint32_t kMaxPaths = 4096;    // distinct frames per process
constexpr int kMaxDomains = 64;         // the last one is "(other)"
constexpr uint32_t kMaxStrings = 16384; // registered strings
constexpr uint32_t kOpenRanges = 4096;  // start/end ranges open at once
constexpr int kMaxThreads = 4096;       // threads with NVTX state at once

// What graphsignal_nvtx_dropped counts (its reason tag: kProblemNames).
enum Problem : int {
  kUnbalancedPop = 0,
  kTooDeep,
  kNamesOverCap,
  kNameTruncated,
  kRangeTableFull,
  kBadRangeEnd,
  kDomainsOverCap,
  kStringsOverCap,
  kOpenAtExit,
  kThreadsOverCap,
  kProblemCount
};

extern const char* const kProblemNames[kProblemCount];

// Lock-free from any thread.
class Problems {
 public:
  // Counts n of p; the first time p is counted, says it on stderr.
  void count(Problem p, uint64_t n = 1);
  uint64_t total(Problem p) const { return counts_[p].load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> counts_[kProblemCount] = {};
  std::atomic<bool> said_[kProblemCount] = {};
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
