// Parameter decoding (api_params.h): the mirrors held to the headers'
// structs at compile time, then one reader per layout; reads only the
// fields its layout has, and nothing through a null pointer.
#include "api_params.h"

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
GS_SAME_FIELD(DrStream, cuStreamSynchronize_params, stream, hStream);
GS_SAME_FIELD(DrStream, cuStreamWaitEvent_params, stream, hStream);
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

// (copy kind) from which side is host memory.
uint8_t direction(bool src_host, bool dst_host) {
  return src_host ? (dst_host ? kCopyHtoH : kCopyHtoD) : (dst_host ? kCopyDtoH : kCopyDtoD);
}

// A side the call says is host memory: pinned or managed where a range says so, else pageable.
uint8_t host_side(MemoryKinds& mem, uintptr_t p) {
  uint8_t k = mem.range_kind(p);
  return k ? k : kMemPageable;
}

// A side the call says is device memory: managed where a range says so, else device.
uint8_t device_side(MemoryKinds& mem, uintptr_t p) {
  uint8_t k = mem.range_kind(p);
  return k ? k : kMemDevice;
}

bool is(const Api& api, Layout a, Layout b) { return api.layout == a || api.layout == b; }

Decoded peer_copy(const Api& api, const void* params, CopyCall* c) {
  if (is(api, Layout::kRtPeer, Layout::kRtPeerAsync)) {
    const RtPeer* p = static_cast<const RtPeer*>(params);
    c->bytes = p->count;
    if (api.layout == Layout::kRtPeerAsync) c->stream = p->stream;
  } else {
    const DrPeer* p = static_cast<const DrPeer*>(params);
    c->bytes = p->bytes;
    if (api.layout == Layout::kDrPeerAsync) c->stream = p->stream;
  }
  c->kind = kCopyPtoP, c->src = kMemDevice, c->dst = kMemDevice;
  return c->bytes ? Decoded::kYes : Decoded::kNothing;
}

// The driver's 2D/3D descriptors: each side says what memory it is.
Decoded described_copy(const Api& api, const void* params, MemoryKinds& mem, CopyCall* c) {
  uintptr_t src = 0, dst = 0;
  const DrCopyND* p = static_cast<const DrCopyND*>(params);
  if (!p->p) return Decoded::kNothing;
  CUmemorytype st, dt;
  if (is(api, Layout::kDrCopy2D, Layout::kDrCopy2DAsync)) {
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
  if (is(api, Layout::kDrCopy2DAsync, Layout::kDrCopy3DAsync)) c->stream = p->stream;
  if (st == CU_MEMORYTYPE_ARRAY || dt == CU_MEMORYTYPE_ARRAY) return Decoded::kUnsupported;
  bool src_host, dst_host;
  if (st == CU_MEMORYTYPE_UNIFIED) src_host = mem.unified(src, &c->src);
  else if ((src_host = st == CU_MEMORYTYPE_HOST)) c->src = host_side(mem, src);
  else c->src = device_side(mem, src);
  if (dt == CU_MEMORYTYPE_UNIFIED) dst_host = mem.unified(dst, &c->dst);
  else if ((dst_host = dt == CU_MEMORYTYPE_HOST)) c->dst = host_side(mem, dst);
  else c->dst = device_side(mem, dst);
  c->kind = direction(src_host, dst_host);
  return c->bytes ? Decoded::kYes : Decoded::kNothing;
}

// A copy between two addresses, before its sides are classified.
struct LinearCopy {
  uintptr_t src, dst;
  int rt_kind;  // a cudaMemcpyKind, or -1: the driver's direction in Api::flags
};

Decoded linear_copy(const Api& api, const void* params, MemoryKinds& mem, CopyCall* c, LinearCopy* l) {
  l->src = l->dst = 0;
  l->rt_kind = -1;
  switch (api.layout) {
    case Layout::kRtCopy:
    case Layout::kRtCopyAsync: {
      const RtCopy* p = static_cast<const RtCopy*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst), l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, l->rt_kind = p->kind;
      if (api.layout == Layout::kRtCopyAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    case Layout::kRtCopy2D:
    case Layout::kRtCopy2DAsync: {
      const RtCopy2D* p = static_cast<const RtCopy2D*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst), l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = static_cast<uint64_t>(p->width) * p->height, l->rt_kind = p->kind;
      if (api.layout == Layout::kRtCopy2DAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    case Layout::kRtCopy3D:
    case Layout::kRtCopy3DAsync: {
      const RtCopy3D* p = static_cast<const RtCopy3D*>(params);
      if (!p->p) return Decoded::kNothing;
      if (p->p->srcArray || p->p->dstArray) return Decoded::kUnsupported;
      l->dst = reinterpret_cast<uintptr_t>(p->p->dstPtr.ptr), l->src = reinterpret_cast<uintptr_t>(p->p->srcPtr.ptr);
      c->bytes = static_cast<uint64_t>(p->p->extent.width) * p->p->extent.height * p->p->extent.depth;
      l->rt_kind = p->p->kind;
      if (api.layout == Layout::kRtCopy3DAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    case Layout::kRtToSymbol:
    case Layout::kRtToSymbolAsync: {
      const RtToSymbol* p = static_cast<const RtToSymbol*>(params);
      l->src = reinterpret_cast<uintptr_t>(p->src);
      c->bytes = p->count, l->rt_kind = p->kind;
      // the destination is a device symbol
      if (l->rt_kind != kRtHostToDevice && l->rt_kind != kRtDeviceToDevice)
        l->rt_kind = mem.unified(l->src, &c->src) ? kRtHostToDevice : kRtDeviceToDevice;
      if (api.layout == Layout::kRtToSymbolAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    case Layout::kRtFromSymbol:
    case Layout::kRtFromSymbolAsync: {
      const RtFromSymbol* p = static_cast<const RtFromSymbol*>(params);
      l->dst = reinterpret_cast<uintptr_t>(p->dst);
      c->bytes = p->count, l->rt_kind = p->kind;
      if (l->rt_kind != kRtDeviceToHost && l->rt_kind != kRtDeviceToDevice)
        l->rt_kind = mem.unified(l->dst, &c->dst) ? kRtDeviceToHost : kRtDeviceToDevice;
      if (api.layout == Layout::kRtFromSymbolAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    case Layout::kDrCopy:
    case Layout::kDrCopyAsync: {
      const DrCopy* p = static_cast<const DrCopy*>(params);
      l->dst = p->dst, l->src = p->src, c->bytes = p->bytes;
      if (api.layout == Layout::kDrCopyAsync) c->stream = p->stream;
      return Decoded::kYes;
    }
    default:
      return Decoded::kNothing;
  }
}

void classify_linear_copy(const Api& api, const LinearCopy& l, MemoryKinds& mem, CopyCall* c) {
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
    src_host = mem.unified(l.src, &c->src);
    dst_host = mem.unified(l.dst, &c->dst);
    c->kind = direction(src_host, dst_host);
    return;
  }
  // Symbol copies have one side already classified (the symbol is device memory).
  if (is(api, Layout::kRtToSymbol, Layout::kRtToSymbolAsync)) {
    if (src_host && !c->src) c->src = host_side(mem, l.src);
    if (!src_host) c->src = device_side(mem, l.src);
    c->dst = kMemDevice;
  } else if (is(api, Layout::kRtFromSymbol, Layout::kRtFromSymbolAsync)) {
    c->src = kMemDevice;
    c->dst = dst_host ? host_side(mem, l.dst) : device_side(mem, l.dst);
  } else {
    c->src = src_host ? host_side(mem, l.src) : device_side(mem, l.src);
    c->dst = dst_host ? host_side(mem, l.dst) : device_side(mem, l.dst);
  }
  c->kind = direction(src_host, dst_host);
}

}  // namespace

Decoded decode_copy(const Api& api, const void* params, MemoryKinds& mem, CopyCall* c) {
  c->kind = 0;
  c->src = c->dst = 0;
  c->bytes = 0;
  c->stream = nullptr;
  if (!params || api.op != Op::kCopy) return Decoded::kNothing;
  switch (api.layout) {
    case Layout::kRtPeer:
    case Layout::kRtPeerAsync:
    case Layout::kDrPeer:
    case Layout::kDrPeerAsync:
      return peer_copy(api, params, c);
    case Layout::kDrCopy2D:
    case Layout::kDrCopy2DAsync:
    case Layout::kDrCopy3D:
    case Layout::kDrCopy3DAsync:
      return described_copy(api, params, mem, c);
    default:
      break;
  }
  LinearCopy l;
  Decoded d = linear_copy(api, params, mem, c, &l);
  if (d != Decoded::kYes) return d;
  if (!c->bytes) return Decoded::kNothing;  // CUPTI records no zero-byte copy
  classify_linear_copy(api, l, mem, c);
  return Decoded::kYes;
}

Decoded decode_memset(const Api& api, const void* params, MemoryKinds& mem, MemsetCall* m) {
  uint64_t elem = (api.flags >> 8) & 0x7;
  uintptr_t dst = 0;
  m->kind = 0;
  m->bytes = 0;
  m->stream = nullptr;
  if (!params || api.op != Op::kMemset) return Decoded::kNothing;
  switch (api.layout) {
    case Layout::kRtMemset:
    case Layout::kRtMemsetAsync: {
      const RtMemset* p = static_cast<const RtMemset*>(params);
      dst = reinterpret_cast<uintptr_t>(p->ptr), m->bytes = p->count;
      if (api.layout == Layout::kRtMemsetAsync) m->stream = p->stream;
      break;
    }
    case Layout::kRtMemset2D:
    case Layout::kRtMemset2DAsync: {
      const RtMemset2D* p = static_cast<const RtMemset2D*>(params);
      dst = reinterpret_cast<uintptr_t>(p->ptr), m->bytes = static_cast<uint64_t>(p->width) * p->height;
      if (api.layout == Layout::kRtMemset2DAsync) m->stream = p->stream;
      break;
    }
    case Layout::kRtMemset3D:
    case Layout::kRtMemset3DAsync: {
      const RtMemset3D* p = static_cast<const RtMemset3D*>(params);
      dst = reinterpret_cast<uintptr_t>(p->ptr.ptr);
      m->bytes = static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth;
      if (api.layout == Layout::kRtMemset3DAsync) m->stream = p->stream;
      break;
    }
    case Layout::kDrMemset:
    case Layout::kDrMemsetAsync: {
      const DrMemset* p = static_cast<const DrMemset*>(params);
      dst = p->dst, m->bytes = static_cast<uint64_t>(p->n) * elem;
      if (api.layout == Layout::kDrMemsetAsync) m->stream = p->stream;
      break;
    }
    case Layout::kDrMemset2D:
    case Layout::kDrMemset2DAsync: {
      const DrMemset2D* p = static_cast<const DrMemset2D*>(params);
      dst = p->dst, m->bytes = static_cast<uint64_t>(p->width) * p->height * elem;
      if (api.layout == Layout::kDrMemset2DAsync) m->stream = p->stream;
      break;
    }
    default:
      return Decoded::kNothing;
  }
  if (!m->bytes) return Decoded::kNothing;
  m->kind = device_side(mem, dst);
  return Decoded::kYes;
}

bool sync_stream(const Api& api, const void* params, CUstream* out) {
  if (!params || api.op != Op::kSync || !is(api, Layout::kRtStream, Layout::kDrStream)) return false;
  *out = api.layout == Layout::kRtStream ? static_cast<const RtStream*>(params)->stream
                                         : static_cast<const DrStream*>(params)->stream;
  return true;
}

bool host_range(const Api& api, const void* params, uintptr_t* base, size_t* size) {
  if (!params) return false;
  switch (api.op) {
    case Op::kHostAlloc: {
      const OutPtr* p = static_cast<const OutPtr*>(params);
      if (!p->ptr) return false;
      *base = reinterpret_cast<uintptr_t>(*p->ptr), *size = p->size;
      return true;
    }
    case Op::kHostRegister: {
      const PtrSize* p = static_cast<const PtrSize*>(params);
      *base = reinterpret_cast<uintptr_t>(p->ptr), *size = p->size;
      return true;
    }
    case Op::kHostFree:
      *base = reinterpret_cast<uintptr_t>(static_cast<const Ptr*>(params)->ptr), *size = 0;
      return true;
    default:
      return false;
  }
}

bool graph_of(const Api& api, const void* params, CUgraphExec* exec, CUgraph* graph) {
  if (!params) return false;
  if (api.op == Op::kInstantiate) {
    const Instantiate* p = static_cast<const Instantiate*>(params);
    *exec = p->exec ? *p->exec : nullptr, *graph = p->graph;
  } else if (api.op == Op::kExecUpdate) {
    const ExecUpdate* p = static_cast<const ExecUpdate*>(params);
    *exec = p->exec, *graph = p->graph;
  } else {
    return false;
  }
  return *exec != nullptr;
}

}  // namespace cupti
}  // namespace graphsignal
