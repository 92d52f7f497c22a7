// A stand-in libcupti for testing the injection library's collector on
// machines without a GPU (libkineto tests its CUPTI handling against mocks
// the same way). It implements the CUPTI calls the library makes, with the
// real headers' prototypes, and lets a test drive it: create contexts, emit
// kernel, sync, copy, memset and graph records into buffers the library
// supplied (copy records only while their activity kind is on, as CUPTI),
// complete buffers, report drops, and make runtime and driver API calls
// that reach the library's API callbacks with the real parameter blocks.
// It also stands in for the few driver functions the library calls itself
// (graph walking, capture status, pointer attributes), found through
// GRAPHSIGNAL_CUPTI_DRIVER_LIB. Built as libcupti.so.<major> (same
// soname), so the injection library links and loads against it unchanged.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>  // with the API parameter blocks (generated_cuda_*meta.h)
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

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
std::map<int, int> enables;  // activity kind -> times enabled
bool refuse_api_callbacks = false;
int host_pinned = -1;  // CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED as set (-1: never)
std::atomic<bool> api_enabled[3][1024];  // [domain][cbid], read lock-free on every fake API call

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
    case CUPTI_ACTIVITY_KIND_MEMCPY: return align8(sizeof(MemcpyRecord));
    case CUPTI_ACTIVITY_KIND_MEMSET: return align8(sizeof(MemsetRecord));
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: return align8(sizeof(GraphRecord));
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

CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* size, void* value) {
  std::lock_guard<std::mutex> g(mu);
  if (!size || !value) return CUPTI_ERROR_INVALID_PARAMETER;
  if (attr == CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED && *size == sizeof(uint8_t)) {
    host_pinned = *static_cast<uint8_t*>(value);
    return CUPTI_SUCCESS;
  }
  return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> g(mu);
  enabled.insert(static_cast<int>(kind));
  enables[static_cast<int>(kind)]++;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::lock_guard<std::mutex> g(mu);
  enabled.erase(static_cast<int>(kind));
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
  int key = static_cast<int>(domain) * 1000 + static_cast<int>(cbid);
  if (refuse_api_callbacks && domain != CUPTI_CB_DOMAIN_RESOURCE) return CUPTI_ERROR_INVALID_PARAMETER;
  if (enable) callbacks.insert(key);
  else callbacks.erase(key);
  if (domain <= CUPTI_CB_DOMAIN_RUNTIME_API && cbid < 1024) api_enabled[domain][cbid].store(enable != 0);
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

// CUPTI detached (cuptiFinalize): what was delivered stays delivered; the
// buffer being filled goes back, and every registration, kind, subscriber
// and callback is gone, as CUPTI's own teardown leaves the process.
namespace {
int finalizes = 0;
}  // namespace

CUptiResult CUPTIAPI cuptiFinalize(void) {
  std::lock_guard<std::mutex> g(mu);
  deliver_locked();
  request_fn = nullptr;
  complete_fn = nullptr;
  subscriber_fn = nullptr;
  subscriber_data = nullptr;
  enabled.clear();
  callbacks.clear();
  for (auto& d : api_enabled)
    for (auto& c : d) c.store(false);
  finalizes++;
  return CUPTI_SUCCESS;
}

FAKE_API int fake_cupti_finalized() {
  std::lock_guard<std::mutex> g(mu);
  return finalizes;
}

// Whether buffer callbacks were registered (CUPTI's activity API taken
// up) and whether anyone subscribed to the callback API.
FAKE_API int fake_cupti_registered() {
  std::lock_guard<std::mutex> g(mu);
  return request_fn != nullptr ? 1 : 0;
}

FAKE_API int fake_cupti_subscribed() {
  std::lock_guard<std::mutex> g(mu);
  return subscriber_fn != nullptr ? 1 : 0;
}

FAKE_API int fake_cupti_host_pinned() {
  std::lock_guard<std::mutex> g(mu);
  return host_pinned;
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
  if (!enabled.count(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) return;  // as CUPTI: records only of enabled kinds
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

// -- graphs: CUPTI ids and the driver's graph API ----------------------------------
// A fake graph is a list of nodes; a kernel node's CUfunction points at its
// name. Handles are indices + 1 (never dereferenced by the library).
namespace {
struct FakeNode {
  CUgraphNodeType type;
  std::string kernel;  // kernel nodes
  int child = 0;       // child-graph nodes: the child's handle
};
std::vector<std::vector<FakeNode>> graphs;        // handle - 1 -> nodes
std::map<uintptr_t, uint32_t> graph_ids, exec_ids;  // handles -> CUPTI ids
std::set<uintptr_t> capturing;                    // streams in a capture
std::set<uintptr_t> known_device, known_host;     // what cuPointerGetAttribute knows
uint64_t pointer_queries = 0;
CUcontext current = nullptr;

const FakeNode* node_of(CUgraphNode n) {
  uintptr_t v = reinterpret_cast<uintptr_t>(n);
  size_t g = (v >> 20) - 1, i = (v & 0xFFFFF) - 1;
  if (g >= graphs.size() || i >= graphs[g].size()) return nullptr;
  return &graphs[g][i];
}
}  // namespace

CUptiResult CUPTIAPI cuptiGetGraphId(CUgraph graph, uint32_t* id) {
  std::lock_guard<std::mutex> g(mu);
  auto it = graph_ids.find(reinterpret_cast<uintptr_t>(graph));
  if (it == graph_ids.end()) return CUPTI_ERROR_INVALID_PARAMETER;
  *id = it->second;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetGraphExecId(CUgraphExec exec, uint32_t* id) {
  std::lock_guard<std::mutex> g(mu);
  auto it = exec_ids.find(reinterpret_cast<uintptr_t>(exec));
  if (it == exec_ids.end()) return CUPTI_ERROR_INVALID_PARAMETER;
  *id = it->second;
  return CUPTI_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes,
                                                                           size_t* n) {
  size_t g = reinterpret_cast<uintptr_t>(graph) - 1;
  if (g >= graphs.size()) return CUDA_ERROR_INVALID_VALUE;
  if (!nodes) {
    *n = graphs[g].size();
    return CUDA_SUCCESS;
  }
  size_t k = *n < graphs[g].size() ? *n : graphs[g].size();
  for (size_t i = 0; i < k; i++) nodes[i] = reinterpret_cast<CUgraphNode>(((g + 1) << 20) | (i + 1));
  *n = k;
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* t) {
  const FakeNode* f = node_of(node);
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  *t = f->type;
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuGraphKernelNodeGetParams_v2(
    CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* p) {
  const FakeNode* f = node_of(node);
  if (!f || f->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  memset(p, 0, sizeof *p);
  p->func = reinterpret_cast<CUfunction>(const_cast<char*>(f->kernel.c_str()));
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuFuncGetName(const char** name, CUfunction f) {
  *name = reinterpret_cast<const char*>(f);
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node,
                                                                                         CUgraph* child) {
  const FakeNode* f = node_of(node);
  if (!f || f->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *child = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(f->child));
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuStreamIsCapturing(CUstream s,
                                                                               CUstreamCaptureStatus* status) {
  std::lock_guard<std::mutex> g(mu);
  *status = capturing.count(reinterpret_cast<uintptr_t>(s)) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                             : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

extern "C" __attribute__((visibility("default"))) CUresult cuPointerGetAttribute(void* data, CUpointer_attribute a,
                                                                                 CUdeviceptr p) {
  std::lock_guard<std::mutex> g(mu);
  pointer_queries++;
  if (a != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_INVALID_VALUE;
  if (known_device.count(p)) *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_DEVICE;
  else if (known_host.count(p)) *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_HOST;
  else return CUDA_ERROR_INVALID_VALUE;  // ordinary host memory
  return CUDA_SUCCESS;
}

// -- API calls, as CUDA makes them: enter callback, the call, exit callback -------
namespace {
// Calls the subscriber for one API call; `inner` runs between enter and exit
// (a nested driver call, or time passing).
template <typename P, typename F>
int api_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, P* params, int result, F inner) {
  bool on = subscriber_fn && cbid < 1024 && api_enabled[domain][cbid].load(std::memory_order_relaxed);
  uint64_t corr = 0;
  CUpti_CallbackData cb;
  memset(&cb, 0, sizeof cb);
  cb.functionName = "fake";
  cb.functionParams = params;
  cb.context = current;
  cb.correlationData = &corr;
  cb.callbackSite = CUPTI_API_ENTER;
  if (on) subscriber_fn(subscriber_data, domain, cbid, &cb);
  inner();
  cb.callbackSite = CUPTI_API_EXIT;
  cb.functionReturnValue = &result;
  if (on) subscriber_fn(subscriber_data, domain, cbid, &cb);
  return result;
}
auto nothing = [] {};
}  // namespace

FAKE_API void fake_cupti_set_context(uint32_t context_id, uint32_t device) {
  current = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device) << 16 | context_id);
}

FAKE_API void fake_cupti_refuse_api_callbacks(int on) { refuse_api_callbacks = on != 0; }

FAKE_API int fake_cupti_callback_enabled(int domain, int cbid) {
  std::lock_guard<std::mutex> g(mu);
  return callbacks.count(domain * 1000 + cbid) ? 1 : 0;
}

FAKE_API int fake_cupti_enable_count(int kind) {
  std::lock_guard<std::mutex> g(mu);
  return enables[kind];
}

// kind: 0 stream, 1 device (context), 2 event, 3 stream wait event; runtime
// API unless `driver`. The call takes `us` microseconds. A runtime call
// makes its driver call inside, as CUDA's runtime does (one each).
FAKE_API int fake_cupti_api_sync(int kind, uintptr_t stream, int us, int result, int driver) {
  auto wait = [us] { if (us) usleep(us); };
  void* ev = reinterpret_cast<void*>(0x5000);
  auto drv = [&](decltype(wait) inner, int res) {
    if (kind == 0) {
      cuStreamSynchronize_params p{reinterpret_cast<CUstream>(stream)};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, &p, res, inner);
    }
    if (kind == 1) {
      int p = 0;
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, &p, res, inner);
    }
    if (kind == 2) {
      cuEventSynchronize_params p{reinterpret_cast<CUevent>(ev)};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, &p, res, inner);
    }
    cuStreamWaitEvent_params p{reinterpret_cast<CUstream>(stream), reinterpret_cast<CUevent>(ev), 0};
    return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, &p, res, inner);
  };
  if (driver) return drv(wait, result);
  auto inner = [&] { drv(wait, result); };
  if (kind == 0) {
    cudaStreamSynchronize_v3020_params p{reinterpret_cast<cudaStream_t>(stream)};
    return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, &p, result, inner);
  }
  if (kind == 1) {
    int p = 0;
    return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, &p, result, inner);
  }
  if (kind == 2) {
    cudaEventSynchronize_v3020_params p{reinterpret_cast<cudaEvent_t>(ev)};
    return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, &p, result, inner);
  }
  cudaStreamWaitEvent_v3020_params p{reinterpret_cast<cudaStream_t>(stream), reinterpret_cast<cudaEvent_t>(ev), 0};
  return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, &p, result, inner);
}

// cudaMemcpyAsync (or cudaMemcpy when `sync`), making the driver call CUDA's
// runtime makes for it inside (explicit-direction entry points for explicit
// kinds, the unified one otherwise); `nested` 0 leaves it out (a runtime
// that would not reach the driver's public entry points).
FAKE_API int fake_cupti_rt_memcpy(uintptr_t dst, uintptr_t src, size_t bytes, int kind, uintptr_t stream, int sync,
                                  int nested, int result) {
  CUstream s = reinterpret_cast<CUstream>(stream);
  auto inner = [&] {
    if (!nested) return;
    if (kind == cudaMemcpyHostToDevice && !sync) {
      cuMemcpyHtoDAsync_v2_params d{static_cast<CUdeviceptr>(dst), reinterpret_cast<const void*>(src), bytes, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, &d, result, nothing);
    } else if (kind == cudaMemcpyHostToDevice) {
      cuMemcpyHtoD_v2_params d{static_cast<CUdeviceptr>(dst), reinterpret_cast<const void*>(src), bytes};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, &d, result, nothing);
    } else if (kind == cudaMemcpyDeviceToHost) {
      cuMemcpyDtoHAsync_v2_params d{reinterpret_cast<void*>(dst), static_cast<CUdeviceptr>(src), bytes, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, &d, result, nothing);
    } else if (kind == cudaMemcpyDeviceToDevice) {
      cuMemcpyDtoDAsync_v2_params d{static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), bytes, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, &d, result, nothing);
    } else {
      cuMemcpyAsync_params d{static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), bytes, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, &d, result, nothing);
    }
  };
  if (sync) {
    cudaMemcpy_v3020_params p{reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                              static_cast<cudaMemcpyKind>(kind)};
    return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, &p, result, inner);
  }
  cudaMemcpyAsync_v3020_params p{reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes,
                                 static_cast<cudaMemcpyKind>(kind), reinterpret_cast<cudaStream_t>(stream)};
  return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, &p, result, inner);
}

// The driver's copies: 0 HtoDAsync, 1 DtoHAsync, 2 DtoDAsync, 3 unified cuMemcpyAsync, 4 cuMemcpy2DAsync (HtoD)
FAKE_API int fake_cupti_dr_memcpy(int which, uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  CUstream s = reinterpret_cast<CUstream>(stream);
  switch (which) {
    case 0: {
      cuMemcpyHtoDAsync_v2_params p{dst, reinterpret_cast<const void*>(src), bytes, s};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, &p, 0, nothing);
    }
    case 1: {
      cuMemcpyDtoHAsync_v2_params p{reinterpret_cast<void*>(dst), src, bytes, s};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, &p, 0, nothing);
    }
    case 2: {
      cuMemcpyDtoDAsync_v2_params p{dst, src, bytes, s};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, &p, 0, nothing);
    }
    case 3: {
      cuMemcpyAsync_params p{dst, src, bytes, s};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, &p, 0, nothing);
    }
    default: {
      CUDA_MEMCPY2D m;
      memset(&m, 0, sizeof m);
      m.srcMemoryType = CU_MEMORYTYPE_HOST;
      m.srcHost = reinterpret_cast<const void*>(src);
      m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      m.dstDevice = dst;
      m.WidthInBytes = bytes / 4;
      m.Height = 4;
      cuMemcpy2DAsync_v2_params p{&m, s};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2, &p, 0, nothing);
    }
  }
}

// cudaMemsetAsync, or the driver's cuMemsetD32Async (`n` 4-byte words).
FAKE_API int fake_cupti_memset(uintptr_t dst, size_t n, uintptr_t stream, int driver) {
  if (driver) {
    cuMemsetD32Async_params p{dst, 0, n, reinterpret_cast<CUstream>(stream)};
    return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, &p, 0, nothing);
  }
  auto inner = [&] {
    cuMemsetD8Async_params d{dst, 0, n, reinterpret_cast<CUstream>(stream)};
    api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, &d, 0, nothing);
  };
  cudaMemsetAsync_v3020_params p{reinterpret_cast<void*>(dst), 0, n, reinterpret_cast<cudaStream_t>(stream)};
  return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, &p, 0, inner);
}

// kind: 0 cudaHostAlloc, 1 cudaMallocHost, 2 cudaHostRegister, 3 cudaMallocManaged, 4 cudaFreeHost,
// 5 cudaHostUnregister, 6 cudaFree, 7 cuMemHostAlloc, 8 cuMemFreeHost
FAKE_API int fake_cupti_alloc(int kind, uintptr_t ptr, size_t size) {
  void* out = nullptr;
  void* v = reinterpret_cast<void*>(ptr);
  auto set = [&] { out = v; };
  switch (kind) {
    case 0: {
      cudaHostAlloc_v3020_params p{&out, size, 0};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, &p, 0, set);
    }
    case 1: {
      cudaMallocHost_v3020_params p{&out, size};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, &p, 0, set);
    }
    case 2: {
      cudaHostRegister_v4000_params p{v, size, 0};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000, &p, 0, nothing);
    }
    case 3: {
      cudaMallocManaged_v6000_params p{&out, size, 1};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, &p, 0, set);
    }
    case 4: {
      cudaFreeHost_v3020_params p{v};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, &p, 0, nothing);
    }
    case 5: {
      cudaHostUnregister_v4000_params p{v};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000, &p, 0, nothing);
    }
    case 6: {
      cudaFree_v3020_params p{v};
      return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &p, 0, nothing);
    }
    case 7: {
      void* pp = nullptr;
      cuMemHostAlloc_params p{&pp, size, 0};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, &p, 0, [&] { pp = v; });
    }
    default: {
      cuMemFreeHost_params p{v};
      return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, &p, 0, nothing);
    }
  }
}

FAKE_API void fake_cupti_pointer(uintptr_t p, int device) {
  std::lock_guard<std::mutex> g(mu);
  (device ? known_device : known_host).insert(p);
}

FAKE_API uint64_t fake_cupti_pointer_queries() {
  std::lock_guard<std::mutex> g(mu);
  return pointer_queries;
}

// cudaStreamBeginCapture / cudaStreamEndCapture on `stream`.
FAKE_API void fake_cupti_capture(uintptr_t stream, int begin) {
  {
    std::lock_guard<std::mutex> g(mu);
    if (begin) capturing.insert(stream);
    else capturing.erase(stream);
  }
  if (begin) {
    cudaStreamBeginCapture_v10000_params p{reinterpret_cast<cudaStream_t>(stream), cudaStreamCaptureModeGlobal};
    api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000, &p, 0, nothing);
  } else {
    cudaGraph_t out = nullptr;
    cudaStreamEndCapture_v10000_params p{reinterpret_cast<cudaStream_t>(stream), &out};
    api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000, &p, 0, nothing);
  }
}

// A graph from a spec: "k:<kernel>" kernel nodes, "m" memcpy, "s" memset,
// "g:<handle>" a child graph, separated by ';'. Returns its handle.
FAKE_API uintptr_t fake_cupti_graph(const char* spec, uint32_t cupti_graph_id) {
  std::vector<FakeNode> nodes;
  std::string s(spec);
  size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    size_t end = s.find(';', at);
    std::string item = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    FakeNode n;
    n.type = CU_GRAPH_NODE_TYPE_EMPTY;
    if (item.rfind("k:", 0) == 0) n.type = CU_GRAPH_NODE_TYPE_KERNEL, n.kernel = item.substr(2);
    else if (item == "m") n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    else if (item == "s") n.type = CU_GRAPH_NODE_TYPE_MEMSET;
    else if (item.rfind("g:", 0) == 0) n.type = CU_GRAPH_NODE_TYPE_GRAPH, n.child = atoi(item.c_str() + 2);
    nodes.push_back(n);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  std::lock_guard<std::mutex> g(mu);
  graphs.push_back(nodes);
  uintptr_t h = graphs.size();
  graph_ids[h] = cupti_graph_id;
  return h;
}

// cudaGraphInstantiate (or cudaGraphExecUpdate when `update`) of `graph`
// into the executable handle `exec`, whose CUPTI id is `exec_id`.
FAKE_API int fake_cupti_instantiate(uintptr_t exec, uintptr_t graph, uint32_t exec_id, int update, int driver) {
  {
    std::lock_guard<std::mutex> g(mu);
    exec_ids[exec] = exec_id;
  }
  if (update) {
    cudaGraphExecUpdate_v10020_params p{reinterpret_cast<cudaGraphExec_t>(exec), reinterpret_cast<cudaGraph_t>(graph),
                                        nullptr};
    return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecUpdate_v10020, &p, 0, nothing);
  }
  if (driver) {
    CUgraphExec out = nullptr;
    cuGraphInstantiateWithFlags_params p{&out, reinterpret_cast<CUgraph>(graph), 0};
    return api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags, &p, 0,
                    [&] { out = reinterpret_cast<CUgraphExec>(exec); });
  }
  cudaGraphExec_t out = nullptr;
  cudaGraphInstantiate_v12000_params p{&out, reinterpret_cast<cudaGraph_t>(graph), 0};
  return api_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000, &p, 0,
                  [&] { out = reinterpret_cast<cudaGraphExec_t>(exec); });
}

// -- activity records of the other kinds ------------------------------------------
// A copy record, only while MEMCPY is enabled (as CUPTI); returns whether made.
FAKE_API int fake_cupti_memcpy_record(uint32_t copy_kind, uint32_t src, uint32_t dst, uint64_t bytes, uint64_t ns,
                                      uint32_t device) {
  std::lock_guard<std::mutex> g(mu);
  if (!enabled.count(CUPTI_ACTIVITY_KIND_MEMCPY)) return 0;
  MemcpyRecord* r = add<MemcpyRecord>(CUPTI_ACTIVITY_KIND_MEMCPY);
  if (!r) return 0;
  r->copyKind = static_cast<uint8_t>(copy_kind);
  r->srcKind = static_cast<uint8_t>(src);
  r->dstKind = static_cast<uint8_t>(dst);
  r->bytes = bytes;
  r->start = 100;
  r->end = 100 + ns;
  r->deviceId = device;
  return 1;
}

FAKE_API int fake_cupti_memset_record(uint32_t memory_kind, uint64_t bytes, uint64_t ns, uint32_t device) {
  std::lock_guard<std::mutex> g(mu);
  if (!enabled.count(CUPTI_ACTIVITY_KIND_MEMSET)) return 0;
  MemsetRecord* r = add<MemsetRecord>(CUPTI_ACTIVITY_KIND_MEMSET);
  if (!r) return 0;
  r->memoryKind = static_cast<uint16_t>(memory_kind);
  r->bytes = bytes;
  r->start = 100;
  r->end = 100 + ns;
  r->deviceId = device;
  return 1;
}

FAKE_API void fake_cupti_graph_records(uint32_t graph_id, int n, uint64_t ns, uint32_t device) {
  std::lock_guard<std::mutex> g(mu);
  if (!enabled.count(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)) return;
  for (int i = 0; i < n; i++) {
    GraphRecord* r = add<GraphRecord>(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    if (!r) continue;
    r->graphId = graph_id;
    r->deviceId = device;
    r->start = 1000;
    r->end = 1000 + ns;
  }
}

// CUPTI's GRAPH_CLONED resource callback: `clone` (CUPTI id `clone_id`) was
// cloned from `original`.
FAKE_API void fake_cupti_clone(uintptr_t clone, uint32_t clone_id, uintptr_t original) {
  {
    std::lock_guard<std::mutex> g(mu);
    graph_ids[clone] = clone_id;
  }
  CUpti_GraphData gd;
  memset(&gd, 0, sizeof gd);
  gd.graph = reinterpret_cast<CUgraph>(clone);
  gd.originalGraph = reinterpret_cast<CUgraph>(original);
  CUpti_ResourceData rd;
  memset(&rd, 0, sizeof rd);
  rd.resourceDescriptor = &gd;
  if (subscriber_fn && callbacks.count(CUPTI_CB_DOMAIN_RESOURCE * 1000 + CUPTI_CBID_RESOURCE_GRAPH_CLONED))
    subscriber_fn(subscriber_data, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPH_CLONED, &rd);
}

// -- benchmarks --------------------------------------------------------------------
// n calls through the library's callbacks, as fast as the fake can make them:
// what the library's own callback code costs per call (scripts/bench_callbacks.py).
// which: 0 cuStreamSynchronize, 1 cuMemcpyHtoDAsync of 64 pinned bytes,
// 2 cuMemsetD8Async, 3 cudaMemcpyAsync making its driver call inside.
FAKE_API uint64_t fake_cupti_bench(int which, int n, uintptr_t pinned, uintptr_t dev) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  CUstream s = reinterpret_cast<CUstream>(0x9000);
  for (int i = 0; i < n; i++) {
    if (which == 0) {
      cuStreamSynchronize_params p{s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, &p, 0, nothing);
    } else if (which == 1) {
      cuMemcpyHtoDAsync_v2_params p{dev, reinterpret_cast<const void*>(pinned), 64, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, &p, 0, nothing);
    } else if (which == 2) {
      cuMemsetD8Async_params p{dev, 0, 64, s};
      api_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, &p, 0, nothing);
    } else {
      fake_cupti_rt_memcpy(dev, pinned, 64, cudaMemcpyHostToDevice, 0x9000, 0, 1, 0);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  return static_cast<uint64_t>(b.tv_sec - a.tv_sec) * 1000000000ull + static_cast<uint64_t>(b.tv_nsec - a.tv_nsec);
}

// `threads` threads at once, each making `calls` calls of fake_cupti_bench's
// kind `which`: per-thread tables under concurrency.
FAKE_API void fake_cupti_threads(int threads, int calls, int which, uintptr_t pinned, uintptr_t dev) {
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; i++) ts.emplace_back([=] { fake_cupti_bench(which, calls, pinned, dev); });
  for (auto& t : ts) t.join();
}

// -- GPU time per NVTX range ---------------------------------------------------------
namespace {
void launch_callback(CUpti_CallbackDomain domain, uint32_t cbid, uint32_t corr, CUpti_ApiCallbackSite site) {
  if (!subscriber_fn || cbid >= 1024 || !api_enabled[domain][cbid].load(std::memory_order_relaxed)) return;
  int result = 0;
  uint64_t data = 0;
  CUpti_CallbackData cb;
  memset(&cb, 0, sizeof cb);
  cb.functionName = "fake launch";
  cb.context = current;
  cb.correlationId = corr;
  cb.correlationData = &data;
  cb.callbackSite = site;
  if (site == CUPTI_API_EXIT) cb.functionReturnValue = &result;
  subscriber_fn(subscriber_data, domain, cbid, &cb);
}
}  // namespace

// A launch as CUDA makes it, with its correlation id: a runtime launch
// (runtime != 0) makes its driver launch (driver_cbid, driver_corr) inside;
// driver_cbid 0: none. Only enabled callbacks are made, as CUPTI.
FAKE_API void fake_cupti_launch(int runtime, uint32_t cbid, uint32_t corr, uint32_t driver_cbid,
                                uint32_t driver_corr) {
  CUpti_CallbackDomain outer = runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  launch_callback(outer, cbid, corr, CUPTI_API_ENTER);
  if (runtime && driver_cbid) {
    launch_callback(CUPTI_CB_DOMAIN_DRIVER_API, driver_cbid, driver_corr, CUPTI_API_ENTER);
    launch_callback(CUPTI_CB_DOMAIN_DRIVER_API, driver_cbid, driver_corr, CUPTI_API_EXIT);
  }
  launch_callback(outer, cbid, corr, CUPTI_API_EXIT);
}

// A kernel record (graph_id 0: launched eagerly) with a correlation id.
FAKE_API void fake_cupti_kernel_corr(const char* name, uint32_t corr, uint64_t ns, uint32_t graph_id) {
  std::lock_guard<std::mutex> g(mu);
  names.emplace_back(name);
  KernelRecord* r = add<KernelRecord>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (!r) return;
  r->name = names.back().c_str();
  r->correlationId = corr;
  r->graphId = graph_id;
  r->start = 5000;
  r->end = 5000 + ns;
}

// A graph replay's GRAPH_TRACE record with a correlation id.
FAKE_API void fake_cupti_graph_corr(uint32_t graph_id, uint32_t corr, uint64_t ns) {
  std::lock_guard<std::mutex> g(mu);
  if (!enabled.count(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)) return;
  GraphRecord* r = add<GraphRecord>(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  if (!r) return;
  r->graphId = graph_id;
  r->correlationId = corr;
  r->start = 7000;
  r->end = 7000 + ns;
}
