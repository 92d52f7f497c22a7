// Test driver for the translator (built only for tests, never shipped):
// builds CUPTI activity records from the CUPTI headers' own structs, hands
// them to the same Translator the library runs, and writes into a real
// ring. tests/test_cupti_translation.py drives it through ctypes and reads
// the ring with the sidecar's poller. No libcupti and no GPU needed.
#include <graphsignal/probe.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <deque>
#include <string>
#include <vector>

#include "copy_estimator.h"
#include "device_uuids.h"
#include "devices.h"
#include "driver_api.h"
#include "graph_registry.h"
#include "records.h"
#include "ring_sink.h"
#include "translator.h"

using namespace graphsignal::cupti;

namespace {

#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
// Earlier struct versions a libcupti of an older minor would emit.
typedef CUpti_ActivityKernel9 LegacyKernelRecord;
typedef CUpti_ActivitySynchronization LegacySyncRecord;
#else
typedef KernelRecord LegacyKernelRecord;
typedef SyncRecord LegacySyncRecord;
#endif

struct Shim {
  Shim(graphsignal_ring_header* r, size_t size, GraphTrace mode)
      : ring(r),
        ring_size(size),
        sink(r),
        devices(&sink, &uuids),
        graphs(&sink, &driver),
        translator(&sink, &devices, mode, &graphs, &estimator) {}
  graphsignal_ring_header* ring;
  size_t ring_size;
  RingSink sink;
  DeviceUuids uuids;  // no driver attached: UUIDs only as the test sets them
  Devices devices;
  DriverApi driver;  // not loaded: graphs are named through gs_test_register_graph
  GraphRegistry graphs;
  CopyEstimator estimator;
  Translator translator;
  std::vector<uint8_t> buf;  // records, each at an 8-byte aligned offset, as CUPTI lays them out
  std::vector<size_t> offsets;
  size_t cursor = 0;
  std::deque<std::string> names;  // kernel names outlive their records, as CUPTI's do
};

template <typename T>
T* add(Shim* s, CUpti_ActivityKind kind) {
  size_t off = (s->buf.size() + 7) & ~static_cast<size_t>(7);
  s->buf.resize(off + sizeof(T), 0);
  s->offsets.push_back(off);
  T* r = reinterpret_cast<T*>(s->buf.data() + off);
  r->kind = kind;
  return r;
}

// The translator's iteration protocol, as cuptiActivityGetNextRecord
// implements it: *record == NULL starts at the beginning.
bool walk(void* ctx, uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  Shim* s = static_cast<Shim*>(ctx);
  if (!*record) s->cursor = 0;
  if (s->cursor >= s->offsets.size() || s->offsets[s->cursor] >= valid) return false;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + s->offsets[s->cursor++]);
  return true;
}

template <typename T>
void fill_kernel(Shim* s, T* r, const char* name, uint32_t device, uint32_t context, uint64_t start, uint64_t end,
                 uint32_t graph_id) {
  s->names.emplace_back(name ? name : "");
  r->name = name ? s->names.back().c_str() : nullptr;
  r->deviceId = device;
  r->contextId = context;
  r->start = start;
  r->end = end;
  r->graphId = graph_id;
  r->graphNodeId = graph_id ? 1000 + s->offsets.size() : 0;
}

}  // namespace

#define GS_TEST_API extern "C" __attribute__((visibility("default")))

GS_TEST_API void* gs_test_open(const char* ring_name, uint64_t capacity, int node_mode) {
  size_t size = 0;
  graphsignal_ring_header* r =
      graphsignal_ring_open(ring_name, GRAPHSIGNAL_KIND_CUPTI, capacity, 1u << 20, &size);
  if (!r) return nullptr;
  return new Shim(r, size, node_mode ? GraphTrace::kNode : GraphTrace::kGraph);
}

GS_TEST_API void gs_test_close(void* h) {
  Shim* s = static_cast<Shim*>(h);
  s->sink.close();
  munmap(s->ring, s->ring_size);
  delete s;
}

GS_TEST_API void gs_test_set_uuid(void* h, uint32_t ordinal, const char* uuid) {
  static_cast<Shim*>(h)->uuids.set(ordinal, uuid);
}

GS_TEST_API void gs_test_note_context(void* h, uint32_t context, uint32_t device) {
  static_cast<Shim*>(h)->translator.note_context(context, device);
}

GS_TEST_API void gs_test_write_meta(void* h) { static_cast<Shim*>(h)->translator.write_meta(); }

GS_TEST_API void gs_test_kernel(void* h, const char* name, uint32_t device, uint32_t context, uint64_t start,
                                uint64_t end, uint32_t graph_id, int legacy) {
  Shim* s = static_cast<Shim*>(h);
  if (legacy) {
    fill_kernel(s, add<LegacyKernelRecord>(s, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), name, device, context, start,
                end, graph_id);
  } else {
    fill_kernel(s, add<KernelRecord>(s, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), name, device, context, start, end,
                graph_id);
  }
}

GS_TEST_API void gs_test_memcpy(void* h, uint32_t copy_kind, uint32_t src_kind, uint32_t dst_kind, uint64_t bytes,
                                uint32_t device, uint64_t start, uint64_t end) {
  MemcpyRecord* r = add<MemcpyRecord>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_MEMCPY);
  r->copyKind = static_cast<uint8_t>(copy_kind);
  r->srcKind = static_cast<uint8_t>(src_kind);
  r->dstKind = static_cast<uint8_t>(dst_kind);
  r->bytes = bytes;
  r->deviceId = device;
  r->start = start;
  r->end = end;
}

GS_TEST_API void gs_test_peer_copy(void* h, uint64_t bytes, uint32_t device, uint32_t src_device,
                                   uint32_t dst_device, uint64_t start, uint64_t end) {
  PeerCopyRecord* r = add<PeerCopyRecord>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_MEMCPY2);
  r->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  r->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->bytes = bytes;
  r->deviceId = device;
  r->srcDeviceId = src_device;
  r->dstDeviceId = dst_device;
  r->start = start;
  r->end = end;
}

GS_TEST_API void gs_test_memset(void* h, uint32_t memory_kind, uint64_t bytes, uint32_t device, uint64_t start,
                                uint64_t end) {
  MemsetRecord* r = add<MemsetRecord>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_MEMSET);
  r->memoryKind = static_cast<uint16_t>(memory_kind);
  r->bytes = bytes;
  r->deviceId = device;
  r->start = start;
  r->end = end;
}

GS_TEST_API void gs_test_sync(void* h, uint32_t type, uint32_t context, uint64_t start, uint64_t end, int legacy) {
  Shim* s = static_cast<Shim*>(h);
  if (legacy) {
    LegacySyncRecord* r = add<LegacySyncRecord>(s, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    r->type = static_cast<CUpti_ActivitySynchronizationType>(type);
    r->contextId = context;
    r->start = start;
    r->end = end;
  } else {
    SyncRecord* r = add<SyncRecord>(s, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    r->type = static_cast<CUpti_ActivitySynchronizationType>(type);
    r->contextId = context;
    r->start = start;
    r->end = end;
  }
}

GS_TEST_API void gs_test_graph(void* h, uint32_t graph_id, uint32_t device, uint32_t context, uint64_t start,
                               uint64_t end) {
  GraphRecord* r = add<GraphRecord>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  r->graphId = graph_id;
  r->deviceId = device;
  r->contextId = context;
  r->start = start;
  r->end = end;
}

GS_TEST_API void gs_test_context(void* h, uint32_t context, uint32_t device) {
  ContextRecord* r = add<ContextRecord>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_CONTEXT);
  r->contextId = context;
  r->deviceId = device;
}

// A record of a kind the library does not report (a runtime API record).
GS_TEST_API void gs_test_other(void* h) {
  CUpti_ActivityAPI* r = add<CUpti_ActivityAPI>(static_cast<Shim*>(h), CUPTI_ACTIVITY_KIND_RUNTIME);
  r->start = 1;
  r->end = 2;
}

// Hands the records added so far to translate_buffer as one completed
// buffer; returns how many records it walked.
GS_TEST_API int gs_test_ignore_stream(void* h, uint32_t stream_id) {
  return static_cast<Shim*>(h)->translator.ignore_stream(stream_id) ? 1 : 0;
}

// Sets the stream of the last record added (hand-built records have stream 0).
GS_TEST_API void gs_test_last_stream(void* h, uint32_t stream_id) {
  Shim* s = static_cast<Shim*>(h);
  CUpti_Activity* r = reinterpret_cast<CUpti_Activity*>(s->buf.data() + s->offsets.back());
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      reinterpret_cast<KernelRecord*>(r)->streamId = stream_id;
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      reinterpret_cast<MemcpyRecord*>(r)->streamId = stream_id;
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      reinterpret_cast<MemsetRecord*>(r)->streamId = stream_id;
      break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      reinterpret_cast<SyncRecord*>(r)->streamId = stream_id;
      break;
    default:
      break;
  }
}

GS_TEST_API size_t gs_test_translate(void* h) {
  Shim* s = static_cast<Shim*>(h);
  size_t n = s->translator.translate_buffer(s->buf.data(), s->buf.size(), walk, s);
  s->buf.clear();
  s->offsets.clear();
  return n;
}

// records, kernels, graphs, memcpys, memsets, syncs, graph_kernels_skipped, other, ignored, copy_samples
GS_TEST_API void gs_test_stats(void* h, uint64_t* out) {
  const TranslatorStats& t = static_cast<Shim*>(h)->translator.stats();
  const uint64_t v[10] = {t.records, t.kernels, t.graphs, t.memcpys, t.memsets, t.syncs, t.graph_kernels_skipped,
                          t.other, t.ignored, t.copy_samples};
  memcpy(out, v, sizeof v);
}

// Copies counted by API callbacks: copy and memset records only time them.
GS_TEST_API void gs_test_copies_elsewhere(void* h, int on) {
  static_cast<Shim*>(h)->translator.set_copies_counted_elsewhere(on != 0);
}

// What the library's instantiation callback does once it has walked a graph.
GS_TEST_API void gs_test_register_graph(void* h, uint32_t exec_id, uint32_t graph_id, const char* name) {
  static_cast<Shim*>(h)->graphs.add(exec_id, graph_id, name);
}

GS_TEST_API uint64_t gs_test_estimate(void* h, uint32_t kind, uint32_t memory, uint64_t bytes) {
  return static_cast<Shim*>(h)->estimator.estimate(static_cast<uint8_t>(kind), static_cast<uint8_t>(memory), bytes);
}
