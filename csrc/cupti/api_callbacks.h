// Synchronization, copies and memsets counted and timed by CUPTI API
// callbacks on the workload's own threads, instead of one activity record
// per call (the hybrid collection; GRAPHSIGNAL_CUPTI_COLLECTION=activity
// turns it off).
//
// With an activity kind on, CUPTI pays per call to make and fill its record;
// a callback on a chosen entry point costs CUPTI's dispatch plus what the
// callback does: here, a clock read around a sync, a range lookup for a
// copy's host memory, and one ring record (scripts/bench_percall.py
// measures each). What each call reports:
//
//   syncs     exact count per kind, exact host time blocked (the call's own
//             duration, as CUPTI's SYNCHRONIZATION records measure it)
//   copies    exact count, bytes, direction and host memory kind; GPU time
//             estimated from sampled activity (copy_estimator.h)
//   memsets   the same
//   graphs    instantiations and updates, for their names (graph_registry.h)
//
// Syncs, copies and memsets are hooked at the driver's entry points by
// default: the runtime reaches the driver through them (one driver call per
// runtime call, seen on CUDA 13), so programs using either API are covered
// at one CUPTI dispatch per call. Rare calls (allocations, captures,
// instantiations) are hooked in both domains; a driver callback made inside
// a runtime call this library hooks is skipped (a thread-local depth), so
// nothing counts twice. A call counts only when it succeeded, and not when it was
// captured into a graph instead of running (the graph's replays carry it).
//
// Not covered by callbacks (the activity collection counts them): copies to
// and from CUDA arrays, batched copies (cudaMemcpyBatchAsync), 3D peer
// copies.
//
// This is the dispatcher, the top of the API hooks: the hooked entry
// points are a table (api_table.h), their parameter blocks are decoded by
// free functions (api_params.h) over what may be asked about an address
// (host_memory.h); this class enables the callbacks, keeps the per-process
// state a call's meaning depends on (captures in progress, nesting, ignored
// streams, context -> device) and records each call.
//
// Guards against: counting a call twice (a driver call nested in a hooked
// runtime call is skipped), counting work that did not run (failed calls,
// calls captured into a graph), the probe reader's own copies (ignored
// streams), a CUPTI that lacks the core entry points (then none stays
// enabled and activity records collect instead).
#pragma once

#include <cupti.h>
#include <stdint.h>

#include <atomic>
#include <string>

#include "api_table.h"
#include "call_tables.h"
#include "copy_estimator.h"
#include "devices.h"
#include "driver_api.h"
#include "graph_registry.h"
#include "host_memory.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

struct CallbackConfig {
  // GRAPHSIGNAL_CUPTI_CB_DOMAINS: where syncs, copies and memsets are hooked
  // (default driver; benchmarks measure runtime and both)
  bool runtime = false;
  bool driver = true;
  bool syncs = true;    // time synchronization here (the SYNCHRONIZATION activity kind stays off)
  bool copies = true;   // count copies and memsets here (their activity kinds only sample durations)
  bool graphs = true;   // name graphs at instantiation
  bool write = true;    // GRAPHSIGNAL_CUPTI_CB_WRITE=0: callbacks run but write nothing (benchmarks)
};

struct CallbackStats {
  uint64_t runtime = 0, driver = 0;  // calls handled, by domain
  uint64_t nested = 0;               // driver calls inside a hooked runtime call, skipped
  uint64_t captured = 0;             // calls captured into a graph, not counted
  uint64_t failed = 0;               // calls that returned an error, not counted
  uint64_t unsupported = 0;          // copies this collection cannot describe (arrays)
};

class ApiCallbacks {
 public:
  // `tables` aggregates what is counted (null: one ring record per call).
  ApiCallbacks(RingSink* sink, Devices* devices, HostMemory* host, GraphRegistry* graphs,
               const CopyEstimator* estimator, const DriverApi* driver, CallTables* tables = nullptr);

  // Enables the configured callbacks on `subscriber`. False when the core
  // ones cannot be enabled; then none stays enabled and the caller
  // collects syncs and copies by activity instead.
  bool enable(CUpti_SubscriberHandle subscriber, const CallbackConfig& cfg);

  // From the subscriber's callback, for the two API domains.
  void on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);

  // The graphsignal probe reader's stream: its copies are not the workload's.
  void ignore_stream(void* stream);

  CallbackStats stats() const;
  const CallbackConfig& config() const { return cfg_; }

  // Called once, on the thread of the process's first counted copy (the
  // collector opens a sampling window then, so that short programs get
  // their copies timed too).
  void set_first_copy_hook(void (*fn)(void*), void* arg) {
    first_copy_hook_ = fn;
    first_copy_arg_ = arg;
  }

  // Debug: which driver calls the hooked runtime calls made ("41>277 ...").
  void set_diagnose(bool on) { diagnose_ = on; }
  std::string nested_pairs() const;

  static constexpr int kMaxCbid = 1024;
  static constexpr int kMaxIgnored = 16;

 private:
  void on_exit(const Api& api, const CUpti_CallbackData* cb);
  bool skip_stream(CUstream stream, bool ptsz);
  uint16_t device_of(CUcontext ctx);
  void note_nested(uint16_t runtime_cbid, uint16_t driver_cbid);
  void record_copy(uint8_t kind, uint8_t src, uint8_t dst, uint64_t bytes, uint16_t dev);
  void record(CallTables::Kind kind, uint8_t sub, uint8_t src, uint8_t dst, uint16_t dev, uint64_t ns, uint64_t bytes);

  RingSink* sink_;
  Devices* devices_;
  HostMemory* host_;
  GraphRegistry* graphs_;
  const CopyEstimator* estimator_;
  const DriverApi* driver_;
  CallTables* tables_;
  AddressKinds addresses_;  // host_ and the driver, for the decoding
  CallbackConfig cfg_;
  uint8_t runtime_index_[kMaxCbid] = {};  // cbid -> 1 + index into the API table, 0: not hooked
  uint8_t driver_index_[kMaxCbid] = {};
  std::atomic<int> captures_{0};  // stream captures in progress, process-wide
  // Hooked runtime calls in progress, process-wide: while 0, a driver call
  // cannot be nested in one and the thread-local depth is not read.
  std::atomic<int> runtime_calls_{0};
  // Context -> device ordinal, packed (pointer << 16 | ordinal), direct-mapped.
  static constexpr int kContexts = 8;
  std::atomic<uint64_t> contexts_[kContexts] = {};
  std::atomic<int> n_ignored_{0};
  std::atomic<CUstream> ignored_[kMaxIgnored] = {};
  bool diagnose_ = false;
  void (*first_copy_hook_)(void*) = nullptr;
  void* first_copy_arg_ = nullptr;
  std::atomic<bool> first_copy_{false};
  static constexpr int kMaxPairs = 32;
  std::atomic<uint32_t> pairs_[kMaxPairs] = {};

  struct alignas(64) Counters {
    std::atomic<uint64_t> runtime{0}, driver{0}, nested{0}, captured{0}, failed{0}, unsupported{0};
  };
  Counters counters_;
};

}  // namespace cupti
}  // namespace graphsignal
