// Test driver for the NVTX path-interning room (built only for tests, never
// shipped): csrc/cupti/nvtx_paths.h's PathTable fed hand-made names, no
// ring, no NVTX, no GPU. tests/integration/test_nvtx_paths.py calls it
// through ctypes.
#include <string.h>

#include "nvtx_limits.h"
#include "nvtx_paths.h"
#include "nvtx_text.h"

using namespace graphsignal::cupti::nvtx;

namespace {

struct PathsShim {
  Problems problems;
  PathTable paths{&problems};
  PathCache cache;  // one thread's
};

}  // namespace

#define GS_TEST_API extern "C" __attribute__((visibility("default")))

GS_TEST_API void* gs_paths_new() {
  auto* s = new PathsShim();
  if (!s->paths.ok()) {
    delete s;
    return nullptr;
  }
  return s;
}

GS_TEST_API void gs_paths_free(void* h) { delete static_cast<PathsShim*>(h); }

// The path of `name` (len bytes) opened inside `parent` in `domain`;
// use_cache: through the calling thread's cache, as a push does.
GS_TEST_API uint32_t gs_paths_lookup(void* h, uint16_t domain, uint32_t parent, const char* name, size_t len,
                                     int use_cache) {
  auto* s = static_cast<PathsShim*>(h);
  Text t{name, len, 0};
  return s->paths.lookup(use_cache ? &s->cache : nullptr, domain, parent, t);
}

GS_TEST_API uint32_t gs_paths_size(void* h) { return static_cast<PathsShim*>(h)->paths.size(); }

// The frame text of `path` into out (at most n bytes); returns its length,
// or -1 for an index not handed out.
GS_TEST_API long gs_paths_text(void* h, uint32_t path, char* out, size_t n) {
  auto* s = static_cast<PathsShim*>(h);
  if (!path || path >= s->paths.size()) return -1;
  const PathEntry* e = s->paths.at(path);
  memcpy(out, e->text, e->text_len < n ? e->text_len : n);
  return static_cast<long>(e->text_len);
}

// out: parent, domain, kind, depth
GS_TEST_API int gs_paths_info(void* h, uint32_t path, uint32_t* out) {
  auto* s = static_cast<PathsShim*>(h);
  if (!path || path >= s->paths.size()) return 0;
  const PathEntry* e = s->paths.at(path);
  out[0] = e->parent, out[1] = e->domain, out[2] = e->kind, out[3] = e->depth;
  return 1;
}

GS_TEST_API void gs_paths_add_gpu(void* h, uint32_t path, uint64_t ns) {
  static_cast<PathsShim*>(h)->paths.add_gpu(path, ns);
}

GS_TEST_API void gs_paths_add_host(void* h, uint32_t path, uint64_t ns) {
  static_cast<PathsShim*>(h)->paths.add_host(path, ns);
}

// out: host_ns, host_count, gpu_ns, gpu_count
GS_TEST_API int gs_paths_sums(void* h, uint32_t path, uint64_t* out) {
  auto* s = static_cast<PathsShim*>(h);
  if (!path || path >= s->paths.size()) return 0;
  const PathEntry* e = s->paths.at(path);
  out[0] = e->host_ns.load(), out[1] = e->host_count.load(), out[2] = e->gpu_ns.load(), out[3] = e->gpu_count.load();
  return 1;
}

GS_TEST_API uint64_t gs_paths_problem(void* h, int problem) {
  return static_cast<PathsShim*>(h)->problems.total(static_cast<Problem>(problem));
}

// The room's bounds, so the test reads them instead of restating them.
GS_TEST_API void gs_paths_limits(uint64_t* out) {
  out[0] = kMaxPaths, out[1] = kMaxPathDepth, out[2] = kMaxPathBytes, out[3] = kMaxName, out[4] = kMaxDomains,
  out[5] = kPathSlots, out[6] = kNamesOverCap;
}
