// Path interning: a range's place in its domain's nesting, "outer/inner",
// as one small integer (a path index) for the life of the process. The
// stacks (nvtx_stacks.h) time ranges per path index, GPU attribution
// (nvtx_gpu.h) adds to one, and the flusher (nvtx_flusher.h) sends each
// path's text once as the frame's name.
//
// Guards against untrusted names and nesting: kMaxPaths distinct paths per
// process, the rest of a domain in its "(other)" frame (names_over_cap); a
// path cut at kMaxPathDepth levels (deeper ranges fold into "<path>/...")
// and kMaxPathBytes bytes (at a whole UTF-8 character); names sanitized
// (nvtx_text.h); an empty name as "(no message)". A name is told apart by
// its bytes (as cut), not its hash: two names with one hash are two paths.
//
// Threading: lookup() on any thread. A hit in the caller's cache (one per
// thread, PathCache) takes no lock and writes nothing shared; a miss takes
// this table's mutex. Entries are never freed or moved: an index handed out
// stays valid, and readers of at() take no lock (indices below size() are
// published with release). No CUDA, no ring: tests drive it directly
// (tests/support/cupti/nvtx_paths_shim.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <mutex>

#include "nvtx_limits.h"
#include "nvtx_text.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

// Named paths, "<path>/..." under each named one at the depth cap, and one
// "(other)" per domain: every path index is below this.
constexpr uint32_t kPathSlots = 2 * kMaxPaths + kMaxDomains + 2;

enum PathKind : uint8_t { kNamed = 0, kOther = 1, kDeeper = 2 };

struct PathEntry {
  uint32_t index = 0, parent = 0;
  uint16_t domain = 0;
  uint8_t kind = kNamed;
  uint8_t depth = 0;  // levels: 1 at the top
  uint64_t hash = 0;  // of raw
  uint32_t raw_len = 0, text_len = 0;
  char* raw = nullptr;   // the name as NVTX gave it (cut), for identity
  char* text = nullptr;  // the frame: "outer/inner"
  std::atomic<uint32_t> deeper{0};  // "<this>/..." once made
  // time not in a thread's table (its table was full), and GPU time
  std::atomic<uint64_t> host_ns{0}, host_count{0}, gpu_ns{0}, gpu_count{0};
};

// One thread's recent (domain, parent, name) -> path answers; owned and
// used by that thread only.
struct PathCache {
  static constexpr int kSlots = 256;
  struct Slot {
    uint64_t hash;
    uint32_t parent;
    uint16_t domain;
    uint16_t len;
    const PathEntry* entry;
  };
  Slot slots[kSlots] = {};
};

class PathTable {
 public:
  explicit PathTable(Problems* problems);
  ~PathTable();
  PathTable(const PathTable&) = delete;
  PathTable& operator=(const PathTable&) = delete;
  bool ok() const { return paths_ && table_; }

  // The path of a range named t opened inside `parent` (0: at the top of
  // its domain). Callers cut t to kMaxName and set t.hash (hash_bytes)
  // for the fast path; a name that is not is cut and hashed on the slow
  // one. Returns 0 only when out of memory before the domain's "(other)"
  // could be made.
  uint32_t lookup(PathCache* cache, uint16_t domain, uint32_t parent, const Text& t);

  // Indices [1, size()) are entries (0 is no path).
  uint32_t size() const { return n_paths_.load(std::memory_order_acquire); }
  PathEntry* at(uint32_t index) { return paths_[index]; }
  const PathEntry* at(uint32_t index) const { return paths_[index]; }

  // The shared sums: host time a thread's own table had no room for.
  void add_host(uint32_t path, uint64_t ns);
  // GPU time of one kernel or graph replay launched inside `path`;
  // an index not handed out is ignored.
  void add_gpu(uint32_t path, uint64_t ns);

 private:
  uint32_t lookup_slow(uint16_t domain, uint32_t parent, const Text& t);
  PathEntry* make_path(uint16_t domain, uint32_t parent, PathKind kind, const char* raw, size_t raw_len);
  uint32_t other_path(uint16_t domain);

  Problems* problems_;
  std::mutex mu_;  // misses only
  PathEntry** paths_;  // index -> entry
  std::atomic<uint32_t> n_paths_{1};
  uint32_t n_named_ = 0;  // paths counted against kMaxPaths
  PathEntry** table_;     // open addressing over (domain, parent, raw name); never more than half full
  uint32_t other_[kMaxDomains] = {};  // each domain's "(other)" once made
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
