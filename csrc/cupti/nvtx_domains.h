// NVTX domains and registered strings: the handles this library gives the
// workload (nvtxDomainCreate, nvtxDomainRegisterString) and takes back on
// every call that names a domain or a registered message.
//
// Guards against: handles that are not ours (a stale, forged or foreign
// pointer is checked to point at an element of our own fixed arrays before
// it is read: a bad domain reads as the default domain, a bad string as no
// string); domains and strings without end (kMaxDomains, the last being
// "(other)", and kMaxStrings, the rest reading "(other)"); the same name
// made twice (the same name gets the same handle, so a create/destroy loop
// uses up nothing). Creation takes a mutex (rare); reading a handle takes
// none. Nothing here needs CUDA or a ring.
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

struct Domain {
  char name[64];
  uint32_t len = 0;
  int index = 0;  // its place in the table: what paths and stacks key on
  std::atomic<uint64_t> marks{0};
};

struct StringReg {
  uint64_t hash;
  uint32_t len;
  uint16_t domain;
  char bytes[kMaxName];
};

class DomainTable {
 public:
  explicit DomainTable(Problems* problems);
  bool ok() const { return domains_ != nullptr; }

  Domain* default_domain() { return &domains_[0]; }
  Domain* domain(const char* utf8, size_t len);  // by name; the same name, the same handle
  Domain* checked(const void* handle);           // an NVTX domain handle: ours, or the default domain
  // The cut (to kMaxName) is the caller's to count.
  StringReg* register_string(Domain* d, const char* utf8, size_t len);
  bool text_of(const void* string_handle, Text* out);  // a registered string handle: false when not ours

  // The flusher's walk: domains [0, size()) and the "(other)" one,
  // kMaxDomains - 1, whose name is set from the start.
  int size() const { return n_.load(std::memory_order_acquire); }
  Domain* at(int index) { return &domains_[index]; }

 private:
  Problems* problems_;
  Domain* domains_;  // a fixed array, so that a handle NVTX passes back can be checked
  std::atomic<int> n_{1};
  std::mutex mu_;
  // kMaxStrings + 1 (the last: over the cap), made on the first registration
  std::atomic<StringReg*> strings_{nullptr};
  uint32_t n_strings_ = 0;
};

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
