#include "api_params.h"

#include "api_callbacks.h"
#include "api_table.h"

namespace graphsignal {
namespace cupti {

// The mirrors held to the headers' own parameter structs.
#define GS_SAME_FIELD(mine, theirs, field, their_field) \
  static_assert(offsetof(mine, field) == offsetof(theirs, their_field), #theirs "." #their_field)
static_assert(sizeof(RtMemcpy3DParms) == sizeof(cudaMemcpy3DParms), "cudaMemcpy3DParms");
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, extent, extent);
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, kind, kind);
GS_SAME_FIELD(RtMemcpy3DParms, cudaMemcpy3DParms, dstPtr, dstPtr);
GS_SAME_FIELD(RtStream, cudaStreamSynchronize_v3020_params, stream, stream);
GS_SAME_FIELD(RtStream, cudaStreamWaitEvent_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy, cudaMemcpy_v3020_params, kind, kind);
GS_SAME_FIELD(RtCopy, cudaMemcpyAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy, cudaMemcpyAsync_ptsz_v7000_params, stream, stream);
GS_SAME_FIELD(RtCopy2D, cudaMemcpy2D_v3020_params, kind, kind);
GS_SAME_FIELD(RtCopy2D, cudaMemcpy2DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtCopy3D, cudaMemcpy3DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtToSymbol, cudaMemcpyToSymbol_v3020_params, kind, kind);
GS_SAME_FIELD(RtToSymbol, cudaMemcpyToSymbolAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtFromSymbol, cudaMemcpyFromSymbol_v3020_params, kind, kind);
GS_SAME_FIELD(RtFromSymbol, cudaMemcpyFromSymbolAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtPeer, cudaMemcpyPeer_v4000_params, count, count);
GS_SAME_FIELD(RtPeer, cudaMemcpyPeerAsync_v4000_params, stream, stream);
GS_SAME_FIELD(RtMemset, cudaMemset_v3020_params, count, count);
GS_SAME_FIELD(RtMemset, cudaMemsetAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtMemset2D, cudaMemset2D_v3020_params, height, height);
GS_SAME_FIELD(RtMemset2D, cudaMemset2DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(RtMemset3D, cudaMemset3D_v3020_params, extent, extent);
GS_SAME_FIELD(RtMemset3D, cudaMemset3DAsync_v3020_params, stream, stream);
GS_SAME_FIELD(OutPtr, cudaHostAlloc_v3020_params, size, size);
GS_SAME_FIELD(OutPtr, cudaMallocHost_v3020_params, size, size);
GS_SAME_FIELD(OutPtr, cudaMallocManaged_v6000_params, size, size);
GS_SAME_FIELD(PtrSize, cudaHostRegister_v4000_params, size, size);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiate_v12000_params, graph, graph);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiateWithFlags_v11040_params, graph, graph);
GS_SAME_FIELD(Instantiate, cudaGraphInstantiateWithParams_v12000_params, graph, graph);
GS_SAME_FIELD(ExecUpdate, cudaGraphExecUpdate_v10020_params, graph, hGraph);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoDAsync_v2_params, src, srcHost);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoDAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoHAsync_v2_params, src, srcDevice);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoHAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyDtoDAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyAsync_params, stream, hStream);
GS_SAME_FIELD(DrCopy, cuMemcpyHtoD_v2_params, bytes, ByteCount);
GS_SAME_FIELD(DrPeer, cuMemcpyPeerAsync_params, stream, hStream);
GS_SAME_FIELD(DrCopyND, cuMemcpy2DAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrCopyND, cuMemcpy3DAsync_v2_params, stream, hStream);
GS_SAME_FIELD(DrMemset, cuMemsetD8Async_params, n, N);
GS_SAME_FIELD(DrMemset, cuMemsetD32Async_params, stream, hStream);
GS_SAME_FIELD(DrMemset2D, cuMemsetD2D16Async_params, height, Height);
GS_SAME_FIELD(DrMemset2D, cuMemsetD2D32Async_params, stream, hStream);
GS_SAME_FIELD(OutPtr, cuMemHostAlloc_params, size, bytesize);
GS_SAME_FIELD(OutPtr, cuMemAllocManaged_params, size, bytesize);
GS_SAME_FIELD(PtrSize, cuMemHostRegister_v2_params, size, bytesize);
GS_SAME_FIELD(Instantiate, cuGraphInstantiateWithFlags_params, graph, hGraph);
GS_SAME_FIELD(Instantiate, cuGraphInstantiate_v2_params, graph, hGraph);
GS_SAME_FIELD(ExecUpdate, cuGraphExecUpdate_v2_params, graph, hGraph);
#undef GS_SAME_FIELD
static_assert(offsetof(DrMemset, n) == 16 && offsetof(DrMemset2D, width) == 24, "memset parameter layouts");
static_assert(offsetof(CUDA_MEMCPY2D, WidthInBytes) > offsetof(CUDA_MEMCPY2D, dstPitch), "CUDA_MEMCPY2D");

namespace {
// (copy kind, src kind, dst kind) from which side is host memory.
void set_direction(bool src_host, bool dst_host, uint8_t* kind) {
  *kind = src_host ? (dst_host ? kCopyHtoH : kCopyHtoD) : (dst_host ? kCopyDtoH : kCopyDtoD);
}
}  // namespace

uint8_t ApiCallbacks::host_side(uintptr_t p) const {
  uint8_t k = host_->kind_of(p);
  return k ? k : kMemPageable;
}

uint8_t ApiCallbacks::device_side(uintptr_t p) const {
  uint8_t k = host_->kind_of(p);
  return k ? k : kMemDevice;
}

bool ApiCallbacks::host_pointer(uintptr_t p, uint8_t* kind) {
  uint8_t k = host_->kind_of(p);
  if (k == kMemPinned) {
    *kind = k;
    return true;
  }
  if (k == kMemManaged) {
    *kind = k;
    return false;
  }
  // Only unified-address copies (cudaMemcpyDefault, cuMemcpy) get here:
  // device memory, or ordinary (pageable) host memory. Under unified
  // addressing a 2 MiB region of addresses is either in CUDA's device
  // reservation or not, for the life of the process, so the driver's answer
  // is kept per region (page-locked memory is found in the ranges above,
  // first, so a region's answer never has to say "pinned").
  uint64_t region = static_cast<uint64_t>(p) >> 21;
  std::atomic<uint64_t>& slot = regions_[region % kRegions];
  uint64_t seen = slot.load(std::memory_order_relaxed);
  if (seen >> 1 == region + 1) {
    bool device = seen & 1;
    *kind = device ? kMemDevice : kMemPageable;
    return !device;
  }
  unsigned int type = 0;
  bool device = false, known = false;
  if (driver_ && driver_->pointer_get_attribute) {
    CUresult r = driver_->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, static_cast<CUdeviceptr>(p));
    if (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST) {
      *kind = kMemPinned;  // registered before this library saw it
      return true;
    }
    device = r == CUDA_SUCCESS;
    known = r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE;  // the latter: memory CUDA does not know
  }
  if (known) slot.store((region + 1) << 1 | (device ? 1 : 0), std::memory_order_relaxed);
  *kind = device ? kMemDevice : kMemPageable;
  return !device;
}

bool ApiCallbacks::copy_of(const Api& api, const void* params, Copy* c) {
  c->stream = nullptr;
  c->src = c->dst = 0;
  c->bytes = 0;
  switch (api.layout) {
    case Layout::kRtPeer:
    case Layout::kRtPeerAsync:
    case Layout::kDrPeer:
    case Layout::kDrPeerAsync:
      return peer_copy_of(api, params, c);
    case Layout::kDrCopy2D:
    case Layout::kDrCopy2DAsync:
    case Layout::kDrCopy3D:
    case Layout::kDrCopy3DAsync:
      return described_copy_of(api, params, c);
    default:
      break;
  }
  LinearCopy l;
  if (!linear_copy_of(api, params, c, &l)) return false;
  if (!c->bytes) return false;  // CUPTI records no zero-byte copy
  classify_linear_copy(api, l, c);
  return true;
}

bool ApiCallbacks::peer_copy_of(const Api& api, const void* params, Copy* c) {
  if (api.layout == Layout::kRtPeer || api.layout == Layout::kRtPeerAsync) {
    const RtPeer* p = static_cast<const RtPeer*>(params);
    c->kind = kCopyPtoP, c->src = kMemDevice, c->dst = kMemDevice, c->bytes = p->count;
    if (api.layout == Layout::kRtPeerAsync) c->stream = p->stream;
  } else {
    const DrPeer* p = static_cast<const DrPeer*>(params);
    c->kind = kCopyPtoP, c->src = kMemDevice, c->dst = kMemDevice, c->bytes = p->bytes;
    if (api.layout == Layout::kDrPeerAsync) c->stream = p->stream;
  }
  return c->bytes != 0;
}

bool ApiCallbacks::described_copy_of(const Api& api, const void* params, Copy* c) {
  uintptr_t src = 0, dst = 0;
  const DrCopyND* p = static_cast<const DrCopyND*>(params);
  if (!p->p) return false;
  CUmemorytype st, dt;
  if (api.layout == Layout::kDrCopy2D || api.layout == Layout::kDrCopy2DAsync) {
    const CUDA_MEMCPY2D* m = static_cast<const CUDA_MEMCPY2D*>(p->p);
    st = m->srcMemoryType, dt = m->dstMemoryType;
    src = st == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->srcHost) : m->srcDevice;
    dst = dt == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->dstHost) : m->dstDevice;
    c->bytes = static_cast<uint64_t>(m->WidthInBytes) * m->Height;
  } else {
    const CUDA_MEMCPY3D* m = static_cast<const CUDA_MEMCPY3D*>(p->p);
    st = m->srcMemoryType, dt = m->dstMemoryType;
    src = st == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->srcHost) : m->srcDevice;
    dst = dt == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(m->dstHost) : m->dstDevice;
    c->bytes = static_cast<uint64_t>(m->WidthInBytes) * m->Height * m->Depth;
  }
  if (api.layout == Layout::kDrCopy2DAsync || api.layout == Layout::kDrCopy3DAsync) c->stream = p->stream;
  if (st == CU_MEMORYTYPE_ARRAY || dt == CU_MEMORYTYPE_ARRAY) {
    counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  bool src_host, dst_host;
  if (st == CU_MEMORYTYPE_UNIFIED) src_host = host_pointer(src, &c->src);
  else if ((src_host = st == CU_MEMORYTYPE_HOST)) c->src = host_side(src);
  else c->src = device_side(src);
  if (dt == CU_MEMORYTYPE_UNIFIED) dst_host = host_pointer(dst, &c->dst);
  else if ((dst_host = dt == CU_MEMORYTYPE_HOST)) c->dst = host_side(dst);
  else c->dst = device_side(dst);
  set_direction(src_host, dst_host, &c->kind);
  return c->bytes != 0;
}

bool ApiCallbacks::linear_copy_of(const Api& api, const void* params, Copy* c, LinearCopy* l) {
  l->src = l->dst = 0;
  l->rt_kind = -1;
  switch (api.layout) {
    case Layout::kRtCopy:
    case Layout::kRtCopyAsync: {
      const RtCopy* p = static_cast<const RtCopy*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst), l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, l->rt_kind = p->kind;
      if (api.layout == Layout::kRtCopyAsync) c->stream = p->stream;
      return true;
    }
    case Layout::kRtCopy2D:
    case Layout::kRtCopy2DAsync: {
      const RtCopy2D* p = static_cast<const RtCopy2D*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst), l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = static_cast<uint64_t>(p->width) * p->height, l->rt_kind = p->kind;
      if (api.layout == Layout::kRtCopy2DAsync) c->stream = p->stream;
      return true;
    }
    case Layout::kRtCopy3D:
    case Layout::kRtCopy3DAsync: {
      const RtCopy3D* p = static_cast<const RtCopy3D*>(params);
      if (!p->p) return false;
      if (p->p->srcArray || p->p->dstArray) {
        counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      l->dst = reinterpret_cast<uintptr_t>(p->p->dstPtr.ptr), l->src = reinterpret_cast<uintptr_t>(p->p->srcPtr.ptr);
      c->bytes = static_cast<uint64_t>(p->p->extent.width) * p->p->extent.height * p->p->extent.depth;
      l->rt_kind = p->p->kind;
      if (api.layout == Layout::kRtCopy3DAsync) c->stream = p->stream;
      return true;
    }
    case Layout::kRtToSymbol:
    case Layout::kRtToSymbolAsync: {
      const RtToSymbol* p = static_cast<const RtToSymbol*>(params);
      l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, l->rt_kind = p->kind;
      // the destination is a device symbol
      if (l->rt_kind != kRtHostToDevice && l->rt_kind != kRtDeviceToDevice)
        l->rt_kind = host_pointer(l->src, &c->src) ? kRtHostToDevice : kRtDeviceToDevice;
      if (api.layout == Layout::kRtToSymbolAsync) c->stream = p->stream;
      return true;
    }
    case Layout::kRtFromSymbol:
    case Layout::kRtFromSymbolAsync: {
      const RtFromSymbol* p = static_cast<const RtFromSymbol*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst);
      c->bytes = p->count, l->rt_kind = p->kind;
      if (l->rt_kind != kRtDeviceToHost && l->rt_kind != kRtDeviceToDevice)
        l->rt_kind = host_pointer(l->dst, &c->dst) ? kRtDeviceToHost : kRtDeviceToDevice;
      if (api.layout == Layout::kRtFromSymbolAsync) c->stream = p->stream;
      return true;
    }
    case Layout::kDrCopy:
    case Layout::kDrCopyAsync: {
      const DrCopy* p = static_cast<const DrCopy*>(params);
      l->dst = p->dst, l->src = p->src, c->bytes = p->bytes;
      if (api.layout == Layout::kDrCopyAsync) c->stream = p->stream;
      return true;
    }
    default:
      return false;
  }
}

void ApiCallbacks::classify_linear_copy(const Api& api, const LinearCopy& l, Copy* c) {
  uint16_t dir = api.flags & kDirMask;  // the driver's direction, where l.rt_kind is -1
  bool src_host, dst_host;
  if (l.rt_kind == kRtHostToDevice || dir == kDirHtod) {
    src_host = true, dst_host = false;
  } else if (l.rt_kind == kRtDeviceToHost || dir == kDirDtoh) {
    src_host = false, dst_host = true;
  } else if (l.rt_kind == kRtDeviceToDevice || dir == kDirDtod) {
    src_host = false, dst_host = false;
  } else if (l.rt_kind == kRtHostToHost) {
    src_host = true, dst_host = true;
  } else {
    // cudaMemcpyDefault and the driver's unified cuMemcpy: where do they point?
    src_host = host_pointer(l.src, &c->src);
    dst_host = host_pointer(l.dst, &c->dst);
    set_direction(src_host, dst_host, &c->kind);
    return;
  }
  // Symbol copies have one side already classified (the symbol is device memory).
  if (api.layout == Layout::kRtToSymbol || api.layout == Layout::kRtToSymbolAsync) {
    if (src_host && !c->src) c->src = host_side(l.src);
    if (!src_host) c->src = device_side(l.src);
    c->dst = kMemDevice;
  } else if (api.layout == Layout::kRtFromSymbol || api.layout == Layout::kRtFromSymbolAsync) {
    c->src = kMemDevice;
    c->dst = dst_host ? host_side(l.dst) : device_side(l.dst);
  } else {
    c->src = src_host ? host_side(l.src) : device_side(l.src);
    c->dst = dst_host ? host_side(l.dst) : device_side(l.dst);
  }
  set_direction(src_host, dst_host, &c->kind);
}

bool ApiCallbacks::memset_of(const Api& api, const void* params, uint64_t* bytes, uintptr_t* dst, CUstream* stream) {
  uint64_t elem = (api.flags >> 8) & 0x7;
  *stream = nullptr;
  switch (api.layout) {
    case Layout::kRtMemset:
    case Layout::kRtMemsetAsync: {
      const RtMemset* p = static_cast<const RtMemset*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr), *bytes = p->count;
      if (api.layout == Layout::kRtMemsetAsync) *stream = p->stream;
      return true;
    }
    case Layout::kRtMemset2D:
    case Layout::kRtMemset2DAsync: {
      const RtMemset2D* p = static_cast<const RtMemset2D*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr), *bytes = static_cast<uint64_t>(p->width) * p->height;
      if (api.layout == Layout::kRtMemset2DAsync) *stream = p->stream;
      return true;
    }
    case Layout::kRtMemset3D:
    case Layout::kRtMemset3DAsync: {
      const RtMemset3D* p = static_cast<const RtMemset3D*>(params);
      *dst = reinterpret_cast<uintptr_t>(p->ptr.ptr);
      *bytes = static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth;
      if (api.layout == Layout::kRtMemset3DAsync) *stream = p->stream;
      return true;
    }
    case Layout::kDrMemset:
    case Layout::kDrMemsetAsync: {
      const DrMemset* p = static_cast<const DrMemset*>(params);
      *dst = p->dst, *bytes = static_cast<uint64_t>(p->n) * elem;
      if (api.layout == Layout::kDrMemsetAsync) *stream = p->stream;
      return true;
    }
    case Layout::kDrMemset2D:
    case Layout::kDrMemset2DAsync: {
      const DrMemset2D* p = static_cast<const DrMemset2D*>(params);
      *dst = p->dst, *bytes = static_cast<uint64_t>(p->width) * p->height * elem;
      if (api.layout == Layout::kDrMemset2DAsync) *stream = p->stream;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace cupti
}  // namespace graphsignal
