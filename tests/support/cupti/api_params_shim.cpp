// Test driver for the API hooks' parameter decoding (built only for tests,
// never shipped): fills the CUDA headers' own parameter blocks
// (generated_cuda_runtime_api_meta.h, generated_cuda_meta.h) by hand for a
// callback id, finds its row in the hooked table (api_table.h), and hands
// both to api_params.h's free functions with a fake MemoryKinds; and drives
// the library's AddressKinds against a stand-in cuPointerGetAttribute. No
// libcupti, no driver, no GPU. tests/integration/test_api_params.py calls
// it through ctypes.
#include <cupti.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "api_params.h"
#include "api_table.h"
#include "driver_api.h"
#include "host_memory.h"

using namespace graphsignal::cupti;

namespace {

// What a test says about addresses: allocated ranges, and where device
// memory lies for a unified address.
struct FakeKinds final : MemoryKinds {
  struct R {
    uintptr_t base, end;
    uint8_t kind;
  };
  std::vector<R> ranges;
  uintptr_t device_lo = 0, device_hi = 0;
  uint64_t unified_calls = 0;

  uint8_t range_kind(uintptr_t p) override {
    for (const R& r : ranges)
      if (p >= r.base && p < r.end) return r.kind;
    return kNone;
  }
  bool unified(uintptr_t p, uint8_t* kind) override {
    unified_calls++;
    uint8_t k = range_kind(p);
    if (k) {
      *kind = k;
      return k == kPinned;
    }
    bool device = p >= device_lo && p < device_hi;
    *kind = device ? kDevice : kPageable;
    return !device;
  }
};

FakeKinds g_kinds;

// Every field a test may set; each block takes the ones it has.
struct Args {
  uint64_t dst, src, bytes, width, height, depth, stream, exec, graph;
  int32_t rt_kind;         // cudaMemcpyKind
  int32_t src_type, dst_type;  // CUmemorytype of a driver 2D/3D copy (3: an array); runtime 3D: 3 sets the array
  int32_t null_inner;      // the descriptor / out pointer inside the block is null
};

// What the decoder said.
struct Out {
  int32_t decoded;  // Decoded, or for the bool functions 1/0
  uint8_t kind, src, dst, pad;
  uint64_t bytes, stream, base, size, exec, graph;
};

template <typename T>
T* ptr(uint64_t v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(v));
}

const Api* row(bool runtime, unsigned cbid) {
  const Api* table = runtime ? kRuntimeApis : kDriverApis;
  size_t n = runtime ? kRuntimeCount : kDriverCount;
  for (size_t i = 0; i < n; i++)
    if (table[i].cbid == cbid) return &table[i];
  return nullptr;
}

// Storage the blocks point into (they outlive the decode).
union Block {
  cudaMemcpy_v3020_params rt_copy;
  cudaMemcpyAsync_v3020_params rt_copy_async;
  cudaMemcpy2D_v3020_params rt_copy2d;
  cudaMemcpy2DAsync_v3020_params rt_copy2d_async;
  cudaMemcpy3D_v3020_params rt_copy3d;
  cudaMemcpy3DAsync_v3020_params rt_copy3d_async;
  cudaMemcpyToSymbol_v3020_params rt_to_symbol;
  cudaMemcpyFromSymbolAsync_v3020_params rt_from_symbol_async;
  cudaMemcpyPeer_v4000_params rt_peer;
  cudaMemcpyPeerAsync_v4000_params rt_peer_async;
  cudaMemset_v3020_params rt_memset;
  cudaMemsetAsync_v3020_params rt_memset_async;
  cudaMemset2DAsync_v3020_params rt_memset2d_async;
  cudaMemset3D_v3020_params rt_memset3d;
  cudaStreamSynchronize_v3020_params rt_stream_sync;
  cudaEventSynchronize_v3020_params rt_event_sync;
  cudaHostAlloc_v3020_params rt_host_alloc;
  cudaMallocManaged_v6000_params rt_malloc_managed;
  cudaHostRegister_v4000_params rt_host_register;
  cudaFreeHost_v3020_params rt_free_host;
  cudaGraphInstantiate_v12000_params rt_instantiate;
  cudaGraphExecUpdate_v10020_params rt_exec_update;
  cuMemcpyHtoD_v2_params dr_htod;
  cuMemcpyDtoHAsync_v2_params dr_dtoh_async;
  cuMemcpyDtoD_v2_params dr_dtod;
  cuMemcpy_params dr_copy;
  cuMemcpyAsync_params dr_copy_async;
  cuMemcpyPeer_params dr_peer;
  cuMemcpyPeerAsync_params dr_peer_async;
  cuMemcpy2D_v2_params dr_copy2d;
  cuMemcpy2DAsync_v2_params dr_copy2d_async;
  cuMemcpy3D_v2_params dr_copy3d;
  cuMemsetD8_v2_params dr_memset8;
  cuMemsetD32Async_params dr_memset32_async;
  cuMemsetD2D16_v2_params dr_memset2d16;
  cuMemsetD2D32Async_params dr_memset2d32_async;
  cuStreamSynchronize_params dr_stream_sync;
  cuMemHostAlloc_params dr_host_alloc;
  cuMemHostRegister_v2_params dr_host_register;
  cuMemFreeHost_params dr_free_host;
  cuGraphInstantiate_v2_params dr_instantiate;
  cuGraphExecUpdate_v2_params dr_exec_update;
};

struct Storage {
  Block block;
  cudaMemcpy3DParms rt3d;
  CUDA_MEMCPY2D dr2d;
  CUDA_MEMCPY3D dr3d;
  void* out_ptr;
  CUgraphExec out_exec;
};

cudaPitchedPtr pitched(void* p, size_t pitch, size_t xsize, size_t ysize) {
  cudaPitchedPtr r;
  r.ptr = p, r.pitch = pitch, r.xsize = xsize, r.ysize = ysize;
  return r;
}

cudaExtent extent(size_t w, size_t h, size_t d) {
  cudaExtent e;
  e.width = w, e.height = h, e.depth = d;
  return e;
}

// A driver 2D/3D descriptor's sides, each as its memory type says.
template <typename M>
void sides(M& m, const Args& a) {
  m.srcMemoryType = static_cast<CUmemorytype>(a.src_type);
  m.dstMemoryType = static_cast<CUmemorytype>(a.dst_type);
  if (a.src_type == CU_MEMORYTYPE_HOST) m.srcHost = ptr<const void>(a.src);
  else if (a.src_type == CU_MEMORYTYPE_ARRAY) m.srcArray = ptr<CUarray_st>(a.src);
  else m.srcDevice = static_cast<CUdeviceptr>(a.src);
  if (a.dst_type == CU_MEMORYTYPE_HOST) m.dstHost = ptr<void>(a.dst);
  else if (a.dst_type == CU_MEMORYTYPE_ARRAY) m.dstArray = ptr<CUarray_st>(a.dst);
  else m.dstDevice = static_cast<CUdeviceptr>(a.dst);
}

// Fills st.block as entry point (runtime, cbid) passes it; false for an id
// this driver does not know.
bool fill(bool runtime, unsigned cbid, const Args& a, Storage& st) {
  memset(&st, 0, sizeof st);
  Block& b = st.block;
  CUstream stream = ptr<CUstream_st>(a.stream);
  auto kind = static_cast<cudaMemcpyKind>(a.rt_kind);
  if (runtime) {
    switch (cbid) {
      case 31: b.rt_copy = {ptr<void>(a.dst), ptr<const void>(a.src), a.bytes, kind}; return true;
      case 41: case 225: b.rt_copy_async = {ptr<void>(a.dst), ptr<const void>(a.src), a.bytes, kind, stream}; return true;
      case 32: b.rt_copy2d = {ptr<void>(a.dst), a.width, ptr<const void>(a.src), a.width, a.width, a.height, kind}; return true;
      case 44:
        b.rt_copy2d_async = {ptr<void>(a.dst), a.width, ptr<const void>(a.src), a.width, a.width, a.height, kind, stream};
        return true;
      case 144: case 145:
        st.rt3d.srcPtr = pitched(ptr<void>(a.src), a.width, a.width, a.height);
        st.rt3d.dstPtr = pitched(ptr<void>(a.dst), a.width, a.width, a.height);
        if (a.src_type == 3) st.rt3d.srcArray = ptr<cudaArray>(a.src);
        if (a.dst_type == 3) st.rt3d.dstArray = ptr<cudaArray>(a.dst);
        st.rt3d.extent = extent(a.width, a.height, a.depth);
        st.rt3d.kind = kind;
        if (cbid == 144) b.rt_copy3d = {a.null_inner ? nullptr : &st.rt3d};
        else b.rt_copy3d_async = {a.null_inner ? nullptr : &st.rt3d, stream};
        return true;
      case 39: b.rt_to_symbol = {ptr<const void>(a.dst), ptr<const void>(a.src), a.bytes, 0, kind}; return true;
      case 48:
        b.rt_from_symbol_async = {ptr<void>(a.dst), ptr<const void>(a.src), a.bytes, 0, kind, stream};
        return true;
      case 160: b.rt_peer = {ptr<void>(a.dst), 1, ptr<const void>(a.src), 0, a.bytes}; return true;
      case 161: b.rt_peer_async = {ptr<void>(a.dst), 1, ptr<const void>(a.src), 0, a.bytes, stream}; return true;
      case 49: b.rt_memset = {ptr<void>(a.dst), 7, a.bytes}; return true;
      case 51: b.rt_memset_async = {ptr<void>(a.dst), 7, a.bytes, stream}; return true;
      case 52: b.rt_memset2d_async = {ptr<void>(a.dst), a.width, 7, a.width, a.height, stream}; return true;
      case 142:
        b.rt_memset3d.pitchedDevPtr = pitched(ptr<void>(a.dst), a.width, a.width, a.height);
        b.rt_memset3d.value = 7;
        b.rt_memset3d.extent = extent(a.width, a.height, a.depth);
        return true;
      case 131: b.rt_stream_sync = {stream}; return true;
      case 137: b.rt_event_sync = {ptr<CUevent_st>(a.src)}; return true;
      case 165: return true;  // cudaDeviceSynchronize: no parameters
      case 27:
        st.out_ptr = ptr<void>(a.dst);
        b.rt_host_alloc = {a.null_inner ? nullptr : &st.out_ptr, a.bytes, 0};
        return true;
      case 206:
        st.out_ptr = ptr<void>(a.dst);
        b.rt_malloc_managed = {a.null_inner ? nullptr : &st.out_ptr, a.bytes, 1};
        return true;
      case 152: b.rt_host_register = {ptr<void>(a.dst), a.bytes, 0}; return true;
      case 26: b.rt_free_host = {ptr<void>(a.dst)}; return true;
      case 443:
        st.out_exec = ptr<CUgraphExec_st>(a.exec);
        b.rt_instantiate = {a.null_inner ? nullptr : &st.out_exec, ptr<CUgraph_st>(a.graph), 0};
        return true;
      case 335: b.rt_exec_update = {ptr<CUgraphExec_st>(a.exec), ptr<CUgraph_st>(a.graph), nullptr}; return true;
      default: return false;
    }
  }
  switch (cbid) {
    case 276: b.dr_htod = {a.dst, ptr<const void>(a.src), a.bytes}; return true;
    case 279: b.dr_dtoh_async = {ptr<void>(a.dst), a.src, a.bytes, stream}; return true;
    case 280: b.dr_dtod = {a.dst, a.src, a.bytes}; return true;
    case 305: b.dr_copy = {a.dst, a.src, a.bytes}; return true;
    case 306: b.dr_copy_async = {a.dst, a.src, a.bytes, stream}; return true;
    case 318: b.dr_peer = {a.dst, nullptr, a.src, nullptr, a.bytes}; return true;
    case 319: b.dr_peer_async = {a.dst, nullptr, a.src, nullptr, a.bytes, stream}; return true;
    case 287: case 289: {
      CUDA_MEMCPY2D& m = st.dr2d;
      sides(m, a);
      m.WidthInBytes = a.width, m.Height = a.height;
      if (cbid == 287) b.dr_copy2d = {a.null_inner ? nullptr : &m};
      else b.dr_copy2d_async = {a.null_inner ? nullptr : &m, stream};
      return true;
    }
    case 290: {
      CUDA_MEMCPY3D& m = st.dr3d;
      sides(m, a);
      m.WidthInBytes = a.width, m.Height = a.height, m.Depth = a.depth;
      b.dr_copy3d = {a.null_inner ? nullptr : &m};
      return true;
    }
    case 249: b.dr_memset8 = {a.dst, 7, a.bytes}; return true;
    case 220: b.dr_memset32_async = {a.dst, 7, a.bytes, stream}; return true;
    case 253: b.dr_memset2d16 = {a.dst, a.width * 2, 7, a.width, a.height}; return true;
    case 226: b.dr_memset2d32_async = {a.dst, a.width * 4, 7, a.width, a.height, stream}; return true;
    case 126: b.dr_stream_sync = {stream}; return true;
    case 39:
      st.out_ptr = ptr<void>(a.dst);
      b.dr_host_alloc = {a.null_inner ? nullptr : &st.out_ptr, a.bytes, 0};
      return true;
    case 379: b.dr_host_register = {ptr<void>(a.dst), a.bytes, 0}; return true;
    case 38: b.dr_free_host = {ptr<void>(a.dst)}; return true;
    case 578:
      st.out_exec = ptr<CUgraphExec_st>(a.exec);
      b.dr_instantiate = {a.null_inner ? nullptr : &st.out_exec, ptr<CUgraph_st>(a.graph), nullptr, nullptr, 0};
      return true;
    case 696: b.dr_exec_update = {ptr<CUgraphExec_st>(a.exec), ptr<CUgraph_st>(a.graph), nullptr}; return true;
    default: return false;
  }
}

// The stand-in driver behind AddressKinds: addresses in [lo, hi) answer
// `type` (0: CUDA_ERROR_INVALID_VALUE, memory CUDA does not know; -1: an
// error that says nothing); others INVALID_VALUE.
struct FakeDriver {
  uint64_t lo = 0, hi = 0;
  int type = 0;
  uint64_t calls = 0;
} g_driver;

CUresult fake_pointer_get_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  g_driver.calls++;
  if (attr != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) return CUDA_ERROR_NOT_SUPPORTED;
  if (p < g_driver.lo || p >= g_driver.hi || g_driver.type == 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_driver.type < 0) return CUDA_ERROR_NOT_INITIALIZED;
  *static_cast<unsigned int*>(data) = static_cast<unsigned int>(g_driver.type);
  return CUDA_SUCCESS;
}

HostMemory* g_host = nullptr;
DriverApi* g_driver_api = nullptr;
AddressKinds* g_addresses = nullptr;

}  // namespace

#define GS_TEST_API extern "C" __attribute__((visibility("default")))

GS_TEST_API void gs_params_reset() {
  g_kinds.ranges.clear();
  g_kinds.device_lo = g_kinds.device_hi = 0;
  g_kinds.unified_calls = 0;
}

GS_TEST_API void gs_params_range(uint64_t base, uint64_t size, int kind) {
  g_kinds.ranges.push_back({static_cast<uintptr_t>(base), static_cast<uintptr_t>(base + size),
                            static_cast<uint8_t>(kind)});
}

GS_TEST_API void gs_params_device(uint64_t lo, uint64_t hi) { g_kinds.device_lo = lo, g_kinds.device_hi = hi; }

GS_TEST_API uint64_t gs_params_unified_calls() { return g_kinds.unified_calls; }

// out[0..3]: op, layout, flags, 1; 0 when the id is not hooked.
GS_TEST_API int gs_params_row(int runtime, unsigned cbid, uint32_t* out) {
  const Api* api = row(runtime != 0, cbid);
  if (!api) return 0;
  out[0] = static_cast<uint32_t>(api->op), out[1] = static_cast<uint32_t>(api->layout), out[2] = api->flags;
  return 1;
}

// Decodes entry point (runtime, cbid) with the block `a` describes, by its
// row's op: -1 when the id is not hooked or this driver cannot fill it.
GS_TEST_API int gs_params_decode(int runtime, unsigned cbid, const Args* a, Out* o) {
  const Api* api = row(runtime != 0, cbid);
  static Storage st;
  if (!api || !fill(runtime != 0, cbid, *a, st)) return -1;
  memset(o, 0, sizeof *o);
  const void* params = api->layout == Layout::kNoParams ? nullptr : &st.block;
  switch (api->op) {
    case Op::kCopy: {
      CopyCall c;
      o->decoded = static_cast<int32_t>(decode_copy(*api, params, g_kinds, &c));
      o->kind = c.kind, o->src = c.src, o->dst = c.dst, o->bytes = c.bytes;
      o->stream = reinterpret_cast<uintptr_t>(c.stream);
      return 0;
    }
    case Op::kMemset: {
      MemsetCall m;
      o->decoded = static_cast<int32_t>(decode_memset(*api, params, g_kinds, &m));
      o->kind = m.kind, o->bytes = m.bytes, o->stream = reinterpret_cast<uintptr_t>(m.stream);
      return 0;
    }
    case Op::kSync: {
      CUstream s = nullptr;
      o->decoded = sync_stream(*api, params, &s);
      o->stream = reinterpret_cast<uintptr_t>(s);
      return 0;
    }
    case Op::kHostAlloc:
    case Op::kHostRegister:
    case Op::kHostFree: {
      uintptr_t base = 0;
      size_t size = 0;
      o->decoded = host_range(*api, params, &base, &size);
      o->base = base, o->size = size;
      return 0;
    }
    case Op::kInstantiate:
    case Op::kExecUpdate: {
      CUgraphExec exec = nullptr;
      CUgraph graph = nullptr;
      o->decoded = graph_of(*api, params, &exec, &graph);
      o->exec = reinterpret_cast<uintptr_t>(exec), o->graph = reinterpret_cast<uintptr_t>(graph);
      return 0;
    }
    default:
      return -1;
  }
}

// A copy or memset row handed another op's decoder: nothing, never a read.
GS_TEST_API int gs_params_wrong_op(int runtime, unsigned cbid, const Args* a) {
  const Api* api = row(runtime != 0, cbid);
  static Storage st;
  if (!api || !fill(runtime != 0, cbid, *a, st)) return -1;
  CopyCall c;
  MemsetCall m;
  if (api->op == Op::kCopy) return static_cast<int>(decode_memset(*api, &st.block, g_kinds, &m));
  return static_cast<int>(decode_copy(*api, &st.block, g_kinds, &c));
}

// The library's AddressKinds over a real HostMemory and the stand-in driver.
GS_TEST_API void gs_addr_reset(uint64_t lo, uint64_t hi, int type) {
  delete g_addresses;
  delete g_host;
  delete g_driver_api;
  g_host = new HostMemory();
  g_driver_api = new DriverApi();
  g_driver_api->pointer_get_attribute = fake_pointer_get_attribute;
  g_addresses = new AddressKinds(g_host, g_driver_api);
  g_driver = FakeDriver();
  g_driver.lo = lo, g_driver.hi = hi, g_driver.type = type;
}

GS_TEST_API void gs_addr_add(uint64_t base, uint64_t size, int kind) {
  g_host->add(static_cast<uintptr_t>(base), size, static_cast<uint8_t>(kind));
}

// Returns unified()'s answer (1: host memory), its kind in *kind.
GS_TEST_API int gs_addr_unified(uint64_t p, int* kind) {
  uint8_t k = 0;
  int host = g_addresses->unified(static_cast<uintptr_t>(p), &k);
  *kind = k;
  return host;
}

GS_TEST_API int gs_addr_range_kind(uint64_t p) { return g_addresses->range_kind(static_cast<uintptr_t>(p)); }

GS_TEST_API uint64_t gs_addr_driver_calls() { return g_driver.calls; }
