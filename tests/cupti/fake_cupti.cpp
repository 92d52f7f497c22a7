// A stand-in libcupti for testing the injection library's collector on
// machines without a GPU (libkineto tests its CUPTI handling against mocks
// the same way). It implements the CUPTI calls the library makes, with the
// real headers' prototypes, and lets a test drive it: create contexts, emit
// kernel and sync records into buffers the library supplied, complete
// buffers, report drops. Built as libcupti.so.<major> (same soname), so
// the injection library links and loads against it unchanged.
#include <cupti.h>
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <set>
#include <string>
#include <deque>

#include "records.h"

using namespace graphsignal::cupti;

namespace {
std::mutex mu;
CUpti_BuffersCallbackRequestFunc request_fn = nullptr;
CUpti_BuffersCallbackCompleteFunc complete_fn = nullptr;
CUpti_CallbackFunc subscriber_fn = nullptr;
void* subscriber_data = nullptr;
std::set<int> enabled;
std::set<int> callbacks;
uint8_t* buf = nullptr;  // the buffer being filled
size_t buf_size = 0, used = 0;
size_t pending_drops = 0;
size_t refused = 0;
std::deque<std::string> names;

size_t align8(size_t n) { return (n + 7) & ~static_cast<size_t>(7); }

// Takes a buffer from the library when none is being filled; false when it
// gave none (CUPTI would drop the record and count it).
bool ensure(size_t need) {
  if (buf && used + need > buf_size) {
    uint8_t* b = buf;
    size_t v = used;
    buf = nullptr;
    complete_fn(nullptr, 0, b, buf_size, v);
  }
  if (!buf) {
    size_t max_records = 0;
    request_fn(&buf, &buf_size, &max_records);
    used = 0;
    if (!buf || buf_size < need) {
      buf = nullptr;
      refused++;
      pending_drops++;
      return false;
    }
  }
  return true;
}

template <typename T>
T* add(CUpti_ActivityKind kind) {
  if (!ensure(align8(sizeof(T)))) return nullptr;
  T* r = reinterpret_cast<T*>(buf + used);
  memset(r, 0, sizeof(T));
  r->kind = kind;
  used += align8(sizeof(T));
  return r;
}

size_t record_size(const CUpti_Activity* r) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return align8(sizeof(KernelRecord));
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return align8(sizeof(SyncRecord));
    default: return 0;
  }
}

void deliver_locked() {
  if (!buf) return;
  uint8_t* b = buf;
  size_t v = used;
  buf = nullptr;
  complete_fn(nullptr, 0, b, buf_size, v);
}
}  // namespace

// -- the CUPTI calls the library makes -------------------------------------------
CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult, const char** str) {
  *str = "FAKE_CUPTI_RESULT";
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                    CUpti_BuffersCallbackCompleteFunc comp) {
  std::lock_guard<std::mutex> g(mu);
  request_fn = req;
  complete_fn = comp;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> g(mu);
  enabled.insert(static_cast<int>(kind));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* sub, CUpti_CallbackFunc fn, void* data) {
  std::lock_guard<std::mutex> g(mu);
  subscriber_fn = fn;
  subscriber_data = data;
  *sub = reinterpret_cast<CUpti_SubscriberHandle>(0x1);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain,
                                         CUpti_CallbackId cbid) {
  std::lock_guard<std::mutex> g(mu);
  if (enable) callbacks.insert(static_cast<int>(domain) * 1000 + static_cast<int>(cbid));
  return CUPTI_SUCCESS;
}

// A fake context pointer encodes (device << 16) | context id.
CUptiResult CUPTIAPI cuptiGetContextId(CUcontext ctx, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ctx) & 0xFFFF);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext, CUstream stream, uint8_t, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream) & 0xFFFF);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext ctx, uint32_t* dev) {
  *dev = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ctx) >> 16);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  std::lock_guard<std::mutex> g(mu);
  deliver_locked();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  size_t off = 0;
  if (*record) {
    size_t sz = record_size(*record);
    if (!sz) return CUPTI_ERROR_INVALID_KIND;
    off = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) + sz;
  }
  if (off >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + off);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  // the caller holds mu when this is called from a completion the fake made
  *dropped = pending_drops;
  pending_drops = 0;
  return CUPTI_SUCCESS;
}

// -- test hooks -----------------------------------------------------------------
#define FAKE_API extern "C" __attribute__((visibility("default")))

FAKE_API int fake_cupti_enabled(int kind) {
  std::lock_guard<std::mutex> g(mu);
  return enabled.count(kind) ? 1 : 0;
}

FAKE_API void fake_cupti_create_context(uint32_t context_id, uint32_t device) {
  CUpti_ResourceData rd;
  memset(&rd, 0, sizeof rd);
  rd.context = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device) << 16 | context_id);
  if (subscriber_fn && callbacks.count(CUPTI_CB_DOMAIN_RESOURCE * 1000 + CUPTI_CBID_RESOURCE_CONTEXT_CREATED))
    subscriber_fn(subscriber_data, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &rd);
}

FAKE_API void fake_cupti_kernels(const char* name, uint32_t device, int n, uint64_t duration) {
  std::lock_guard<std::mutex> g(mu);
  names.emplace_back(name);
  for (int i = 0; i < n; i++) {
    KernelRecord* r = add<KernelRecord>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (!r) continue;
    r->name = names.back().c_str();
    r->deviceId = device;
    r->start = 1000;
    r->end = 1000 + duration;
  }
}

FAKE_API void fake_cupti_sync(uint32_t type, uint32_t context_id, uint64_t duration) {
  std::lock_guard<std::mutex> g(mu);
  SyncRecord* r = add<SyncRecord>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  if (!r) return;
  r->type = static_cast<CUpti_ActivitySynchronizationType>(type);
  r->contextId = context_id;
  r->start = 10;
  r->end = 10 + duration;
}

// CUPTI returning a buffer on its own (full, or a context going away).
FAKE_API void fake_cupti_complete() {
  std::lock_guard<std::mutex> g(mu);
  deliver_locked();
}

FAKE_API void fake_cupti_drop(size_t n) {
  std::lock_guard<std::mutex> g(mu);
  pending_drops += n;
}

FAKE_API size_t fake_cupti_refused() {
  std::lock_guard<std::mutex> g(mu);
  return refused;
}
