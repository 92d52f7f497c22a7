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

Translator::Translator(RingSink* sink, Devices* devices, GraphTrace mode, GraphRegistry* graphs,
                       CopyEstimator* estimator)
    : sink_(sink), devices_(devices), mode_(mode), graphs_(graphs), estimator_(estimator), names_(sink) {}

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
  if (copies_elsewhere_) estimator_->publish();
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
      on_copy(reinterpret_cast<const MemcpyRecord*>(record));
      break;
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      on_copy(reinterpret_cast<const PeerCopyRecord*>(record));
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

void Translator::sample_copy(uint8_t kind, uint8_t src, uint8_t dst, uint64_t bytes, uint64_t ns) {
  stats_.copy_samples++;
  estimator_->sample(kind, CopyEstimator::memory_of(kind, src, dst), bytes, ns);
}

template <typename CopyRecord>
void Translator::on_copy(const CopyRecord* r) {
  if (skip_stream(r->streamId)) return;
  if (copies_elsewhere_) {
    // Graph nodes' copies are inside their replay's time (graph mode), so
    // every eager record here is a copy some callback counted already; a
    // node's copy (should CUPTI report one) is no such copy.
    if (!r->graphId) sample_copy(r->copyKind, r->srcKind, r->dstKind, r->bytes, duration(r->start, r->end));
    return;
  }
  stats_.memcpys++;
  uint16_t dev = device(r->deviceId);
  uint32_t kinds = static_cast<uint32_t>(r->srcKind) | (static_cast<uint32_t>(r->dstKind) << 8);
  sink_->write(GRAPHSIGNAL_REC_MEMCPY, r->copyKind, dev, kinds, duration(r->start, r->end), r->bytes);
}

void Translator::on_memset(const MemsetRecord* r) {
  if (skip_stream(r->streamId)) return;
  if (copies_elsewhere_) {
    if (r->graphId) return;  // a node's memset: inside its replay's time
    stats_.copy_samples++;
    estimator_->sample(CopyEstimator::kMemset, static_cast<uint8_t>(r->memoryKind), r->bytes,
                       duration(r->start, r->end));
    return;
  }
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
  if (graphs_ && graphs_->generation() != graph_generation_) {
    // A graph was named since: ids resolved to their CUPTI id before may
    // have a name now (rare: once per instantiation).
    graph_generation_ = graphs_->generation();
    graph_names_.clear();
  }
  auto it = graph_names_.find(graph_id);
  if (it != graph_names_.end()) return it->second;
  std::string name;
  uint32_t id;
  if (graphs_ && graphs_->name_for(graph_id, &name)) {
    id = names_.id(name);
  } else {
    // Not walked (instantiated before the library could see it, or the
    // driver cannot describe it): CUPTI's per-process id.
    char buf[32];
    int n = snprintf(buf, sizeof buf, "graph_%u", graph_id);
    id = names_.id(buf, static_cast<size_t>(n));
  }
  graph_names_.emplace(graph_id, id);
  return id;
}

uint16_t Translator::device(uint32_t device_id) {
  if (device_id > kMaxDevice) device_id = 0;
  return devices_->use(device_id);
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
  uint32_t last = devices_->last();
  GS_LOG_ONCE(Level::kInfo, "CUDA context %u not seen yet; attributing its synchronization to device %u",
              context_id, last);
  return device(last);
}

void Translator::note_context(uint32_t context_id, uint32_t device_id) {
  std::lock_guard<std::mutex> g(contexts_mu_);
  contexts_[context_id] = device_id;
}

}  // namespace cupti
}  // namespace graphsignal
