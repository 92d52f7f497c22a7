#include "translator.h"

#include <stdio.h>
#include <string.h>

#include <string>

#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {
// CUPTI's "not on a device" marker in graph records (INT_MAX), and anything
// else that does not fit the ring's 16-bit device field.
constexpr uint32_t kMaxDevice = 0xFFFE;
}  // namespace

Translator::Translator(RingSink* sink, DeviceUuids* uuids, GraphTrace mode)
    : sink_(sink), uuids_(uuids), mode_(mode), names_(sink) {}

void Translator::write_meta() {
  sink_->write(GRAPHSIGNAL_REC_META, GRAPHSIGNAL_META_CUDA_GRAPH_TRACE_MODE, 0, 0,
               mode_ == GraphTrace::kNode ? 1 : 0, 0);
}

size_t Translator::translate_buffer(uint8_t* buffer, size_t valid, NextRecord next, void* ctx) {
  size_t n = 0;
  CUpti_Activity* record = nullptr;
  while (valid && next(ctx, buffer, valid, &record) && record) {
    translate(record);
    n++;
  }
  return n;
}

void Translator::translate(const CUpti_Activity* record) {
  stats_.records++;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      on_kernel(reinterpret_cast<const KernelRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      on_memcpy(reinterpret_cast<const MemcpyRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      on_peer_copy(reinterpret_cast<const PeerCopyRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      on_memset(reinterpret_cast<const MemsetRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      on_sync(reinterpret_cast<const SyncRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
      on_graph(reinterpret_cast<const GraphRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_CONTEXT: {
      auto* c = reinterpret_cast<const ContextRecord*>(record);
      note_context(c->contextId, c->deviceId);
      break;
    }
    default:
      stats_.other++;
      break;
  }
}

bool Translator::ignore_stream(uint32_t stream_id) {
  if (ignored(stream_id)) return true;
  int i = n_ignored_.load(std::memory_order_relaxed);
  while (i < kMaxIgnored && !n_ignored_.compare_exchange_weak(i, i + 1, std::memory_order_relaxed)) {
  }
  if (i >= kMaxIgnored) return false;
  ignored_[i].store(stream_id + 1, std::memory_order_release);  // 0 marks a slot still being filled
  return true;
}

bool Translator::skip_stream(uint32_t stream_id) {
  if (!ignored(stream_id)) return false;
  stats_.ignored++;
  return true;
}

bool Translator::ignored(uint32_t stream_id) const {
  // one relaxed load when nothing is ignored (every process without in-kernel probes)
  int n = n_ignored_.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ignored_[i].load(std::memory_order_acquire) == stream_id + 1) return true;
  return false;
}

void Translator::on_kernel(const KernelRecord* r) {
  if (skip_stream(r->streamId)) return;
  if (mode_ == GraphTrace::kGraph && r->graphId != 0) {
    // The replay that ran this node is timed whole in its graph record;
    // counting the node too would count its time twice.
    stats_.graph_kernels_skipped++;
    return;
  }
  stats_.kernels++;
  uint16_t dev = device(r->deviceId);
  const char* name = r->name ? r->name : "<unknown kernel>";
  uint32_t id = names_.id(name, strlen(name));
  sink_->write(GRAPHSIGNAL_REC_KERNEL, 0, dev, id, duration(r->start, r->end), 0);
}

void Translator::on_memcpy(const MemcpyRecord* r) {
  if (skip_stream(r->streamId)) return;
  stats_.memcpys++;
  uint16_t dev = device(r->deviceId);
  uint32_t kinds = static_cast<uint32_t>(r->srcKind) | (static_cast<uint32_t>(r->dstKind) << 8);
  sink_->write(GRAPHSIGNAL_REC_MEMCPY, r->copyKind, dev, kinds, duration(r->start, r->end), r->bytes);
}

void Translator::on_peer_copy(const PeerCopyRecord* r) {
  if (skip_stream(r->streamId)) return;
  stats_.memcpys++;
  uint16_t dev = device(r->deviceId);
  uint32_t kinds = static_cast<uint32_t>(r->srcKind) | (static_cast<uint32_t>(r->dstKind) << 8);
  sink_->write(GRAPHSIGNAL_REC_MEMCPY, r->copyKind, dev, kinds, duration(r->start, r->end), r->bytes);
}

void Translator::on_memset(const MemsetRecord* r) {
  if (skip_stream(r->streamId)) return;
  stats_.memsets++;
  uint16_t dev = device(r->deviceId);
  sink_->write(GRAPHSIGNAL_REC_MEMSET, static_cast<uint8_t>(r->memoryKind), dev, 0, duration(r->start, r->end),
               r->bytes);
}

void Translator::on_sync(const SyncRecord* r) {
  if (skip_stream(r->streamId)) return;
  stats_.syncs++;
  uint16_t dev = device_of_context(r->contextId);
  sink_->write(GRAPHSIGNAL_REC_SYNC, static_cast<uint8_t>(r->type), dev, 0, duration(r->start, r->end), 0);
}

void Translator::on_graph(const GraphRecord* r) {
  stats_.graphs++;
  uint16_t dev = r->deviceId <= kMaxDevice ? device(r->deviceId) : device_of_context(r->contextId);
  sink_->write(GRAPHSIGNAL_REC_GRAPH, 0, dev, graph_name(r->graphId), duration(r->start, r->end), 0);
}

uint32_t Translator::graph_name(uint32_t graph_id) {
  auto it = graph_names_.find(graph_id);
  if (it != graph_names_.end()) return it->second;
  // CUPTI numbers graphs per process in creation order, so a program that
  // builds its graphs in the same order (every capture-and-replay engine
  // does) gets the same names on every run. The driver's node lists are not
  // read for a content hash: CUPTI does not support driver calls from the
  // callback where graphs are instantiated.
  char name[32];
  int n = snprintf(name, sizeof name, "graph_%u", graph_id);
  uint32_t id = names_.id(name, static_cast<size_t>(n));
  graph_names_.emplace(graph_id, id);
  return id;
}

uint16_t Translator::device(uint32_t device_id) {
  if (device_id > kMaxDevice) device_id = 0;
  last_device_ = device_id;
  if (device_id >= device_seen_.size()) device_seen_.resize(device_id + 1, 0);
  if (!device_seen_[device_id]) {
    device_seen_[device_id] = 1;
    // Decided once, before the device's first record: sending the UUID
    // later would split its series into "with" and "without" a UUID tag.
    std::string uuid = uuids_ ? uuids_->get(device_id) : std::string();
    if (!uuid.empty()) {
      sink_->write(GRAPHSIGNAL_REC_DEVICE, 0, static_cast<uint16_t>(device_id), names_.id(uuid), 0, 0);
    } else {
      GS_LOG_ONCE(Level::kInfo, "no UUID for CUDA device %u; its metrics carry the device index only",
                  device_id);
    }
  }
  return static_cast<uint16_t>(device_id);
}

uint16_t Translator::device_of_context(uint32_t context_id) {
  uint32_t dev = 0;
  bool known = false;
  {
    // Only the lookup under the lock: device() may ask the driver, and the
    // thread creating a context waits on this lock inside the driver.
    std::lock_guard<std::mutex> g(contexts_mu_);
    auto it = contexts_.find(context_id);
    if (it != contexts_.end()) {
      dev = it->second;
      known = true;
    }
  }
  if (known) return device(dev);
  // The context-created callback runs before any work in a context can be
  // recorded, so this only happens when the callback API was unavailable
  // (another CUPTI subscriber) and the CONTEXT record is still to come:
  // the last device seen is right for the usual one-device process.
  GS_LOG_ONCE(Level::kInfo, "CUDA context %u not seen yet; attributing its synchronization to device %u",
              context_id, last_device_);
  return device(last_device_);
}

void Translator::note_context(uint32_t context_id, uint32_t device_id) {
  std::lock_guard<std::mutex> g(contexts_mu_);
  contexts_[context_id] = device_id;
}

}  // namespace cupti
}  // namespace graphsignal
