// CUPTI activity records -> ring records. This is the whole of what the
// library measures, kept free of CUPTI calls so that tests can feed it
// hand-built records on machines without a GPU (or libcupti).
//
// Threading: translate_buffer/translate/write_meta must be serialized by
// the caller (CUPTI may complete buffers on several threads; the collector
// holds one mutex around them, which is allowed there: no kernel launch
// ever waits on it). note_context may be called concurrently with them.
#pragma once

#include <cupti.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "copy_estimator.h"
#include "devices.h"
#include "graph_registry.h"
#include "name_table.h"
#include "records.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

// --cuda-graph-trace: `graph` times each replay as a whole (GRAPH_TRACE
// records); `node` lets the kernels inside graphs arrive as kernel records.
enum class GraphTrace : uint8_t { kGraph = 0, kNode = 1 };

struct TranslatorStats {
  uint64_t records = 0;  // every activity record seen
  uint64_t kernels = 0;
  uint64_t graphs = 0;
  uint64_t memcpys = 0;
  uint64_t memsets = 0;
  uint64_t syncs = 0;
  uint64_t graph_kernels_skipped = 0;  // graph-node kernels in graph mode (their replay is timed whole)
  uint64_t other = 0;                  // kinds this library does not report
  uint64_t ignored = 0;                // records on streams that are not the workload's (probe readers)
  uint64_t copy_samples = 0;           // copy/memset records only timing copies counted by callbacks
};

class Translator {
 public:
  // Walks a completed buffer: CUPTI's cuptiActivityGetNextRecord in the
  // library, a plain walker over hand-built records in tests.
  typedef bool (*NextRecord)(void* ctx, uint8_t* buffer, size_t valid, CUpti_Activity** record);

  // `graphs` names graph records (null: CUPTI's ids); `estimator` receives
  // copy and memset durations when callbacks count copies (null: none do).
  Translator(RingSink* sink, Devices* devices, GraphTrace mode, GraphRegistry* graphs = nullptr,
             CopyEstimator* estimator = nullptr);

  GraphTrace mode() const { return mode_; }

  // Before the first record only (the collector falls back to node mode
  // when this CUPTI cannot trace whole graphs).
  void set_mode(GraphTrace mode) { mode_ = mode; }

  // Before the first record: copies and memsets are counted by API
  // callbacks, so their activity records (sampled) only time them.
  void set_copies_counted_elsewhere(bool elsewhere) { copies_elsewhere_ = elsewhere && estimator_; }
  bool copies_counted_elsewhere() const { return copies_elsewhere_; }

  // The process-level facts the sidecar shows once (trace granularity).
  void write_meta();

  // Translates every record of a buffer; returns the number of records.
  size_t translate_buffer(uint8_t* buffer, size_t valid, NextRecord next, void* ctx);

  void translate(const CUpti_Activity* record);

  // Context id -> device ordinal, from CUPTI's context-created callback or
  // a CONTEXT activity record. Synchronization records carry only the
  // context.
  void note_context(uint32_t context_id, uint32_t device);

  const TranslatorStats& stats() const { return stats_; }

  // Leaves a stream's records out: the graphsignal probe reader's own
  // copies are not the workload's. Callable from any thread; at most
  // kMaxIgnored streams (more are reported as the workload's).
  bool ignore_stream(uint32_t stream_id);
  bool ignored(uint32_t stream_id) const;
  static constexpr int kMaxIgnored = 16;

 private:
  void on_kernel(const KernelRecord* r);
  // MEMCPY and MEMCPY2 (peer) records: the fields read sit at the same
  // offsets in both (records.h pins them).
  template <typename CopyRecord>
  void on_copy(const CopyRecord* r);
  void on_memset(const MemsetRecord* r);
  void on_sync(const SyncRecord* r);
  void on_graph(const GraphRecord* r);

  // A device ordinal as the ring's 16-bit field; the first record of each
  // device is preceded by its DEVICE record (ordinal -> UUID).
  uint16_t device(uint32_t device_id);
  void sample_copy(uint8_t kind, uint8_t src, uint8_t dst, uint64_t bytes, uint64_t ns);
  uint16_t device_of_context(uint32_t context_id);
  uint32_t graph_name(uint32_t graph_id);
  bool skip_stream(uint32_t stream_id);  // ignored (and counted)?

  static uint64_t duration(uint64_t start, uint64_t end) { return end > start ? end - start : 0; }

  RingSink* sink_;
  Devices* devices_;
  GraphTrace mode_;
  GraphRegistry* graphs_;
  CopyEstimator* estimator_;
  bool copies_elsewhere_ = false;
  NameTable names_;
  std::unordered_map<uint32_t, uint32_t> graph_names_;  // CUPTI graphId -> name id
  uint64_t graph_generation_ = 0;                        // of graphs_, when graph_names_ was filled

  std::mutex contexts_mu_;  // contexts_ is written from the app thread that creates a context
  std::unordered_map<uint32_t, uint32_t> contexts_;

  TranslatorStats stats_;

  std::atomic<int> n_ignored_{0};
  std::atomic<uint32_t> ignored_[kMaxIgnored] = {};
};

}  // namespace cupti
}  // namespace graphsignal
