// The problem counts (nvtx_limits.h): each said once on stderr, so a
// workload that passes a bound a million times logs one line, not a million.
#include "nvtx_limits.h"

#include "log.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

const char* const kProblemNames[kProblemCount] = {
    "unbalanced_pop",   "too_deep",      "names_over_cap",  "name_truncated", "range_table_full",
    "bad_range_end",    "domains_over_cap", "strings_over_cap", "open_at_exit", "threads_over_cap"};

namespace {
const char* const kProblemText[kProblemCount] = {
    "an NVTX pop with no range open in its domain on that thread",
    "NVTX ranges nested deeper than 128 on one thread (their time is not measured)",
    "more than 4096 distinct NVTX range paths: the rest are counted in the frame \"(other)\"",
    "an NVTX range name longer than 128 bytes (cut)",
    "more than 4096 NVTX start/end ranges open at once (the rest are not measured)",
    "an NVTX range end for an id that is not open (unknown, or ended already)",
    "more than 63 NVTX domains: the rest are counted in the domain \"(other)\"",
    "more than 16384 registered NVTX strings: the rest read \"(other)\"",
    "NVTX ranges still open when their thread or the process ended (not measured)",
    "more than 4096 threads using NVTX at once: the rest are not measured"};
}  // namespace

void Problems::count(Problem p, uint64_t n) {
  counts_[p].fetch_add(n, std::memory_order_relaxed);
  if (!said_[p].load(std::memory_order_relaxed) && !said_[p].exchange(true))
    log(Level::kWarning, "%s; counted in graphsignal_nvtx_dropped{reason=%s}, not said again", kProblemText[p],
        kProblemNames[p]);
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
