// The CUPTI side of the injection library: registers the activity buffer
// callbacks, enables the activity kinds and the API callbacks, runs the
// periodic flush, the copy sampling windows and the exit flush, and hands
// completed buffers to the Translator.
//
// Two collections (GRAPHSIGNAL_CUPTI_COLLECTION):
//   hybrid (default)  kernels and graph replays by activity records (exact
//                     GPU time); synchronization, copies and memsets by API
//                     callbacks (api_callbacks.h: exact counts, bytes and
//                     host time; copy GPU time estimated from sampling
//                     windows of the copy activity kinds). In node mode
//                     copies stay on activity records (graph nodes' copies
//                     need them), syncs on callbacks.
//   activity          every kind by activity records, CUPTI's price on every
//                     call, exact copy times.
// Without CUPTI's callback API (another subscriber) hybrid falls back to
// activity.
//
// Nothing here runs on a kernel launch. CUPTI may return a full buffer on
// whichever thread filled it, so the completion callback only queues the
// buffer (O(1)) and the collector's own thread translates it (as libkineto
// keeps completed buffers for later processing); at exit, and if that
// thread is gone, buffers are translated where they complete.
#pragma once

#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "api_callbacks.h"
#include "buffer_pool.h"
#include "call_tables.h"
#include "copy_estimator.h"
#include "device_uuids.h"
#include "devices.h"
#include "driver_api.h"
#include "graph_registry.h"
#include "host_memory.h"
#include "ring_sink.h"
#include "translator.h"

namespace graphsignal {
namespace cupti {

enum class Collection : uint8_t { kHybrid = 0, kActivity = 1 };

struct CollectorConfig {
  GraphTrace mode = GraphTrace::kGraph;
  Collection collection = Collection::kHybrid;  // GRAPHSIGNAL_CUPTI_COLLECTION=hybrid|activity
  unsigned sample_ms = 20;            // GRAPHSIGNAL_CUPTI_SAMPLE_MS: copy activity window (0: none)
  unsigned sample_period_ms = 1000;   // GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS: one window per period
  bool sample_memcpy = true;          // GRAPHSIGNAL_CUPTI_SAMPLE_KINDS=memcpy[,memset]: what windows time
  bool sample_memset = false;
  CallbackConfig callback;            // GRAPHSIGNAL_CUPTI_CB_DOMAINS, GRAPHSIGNAL_CUPTI_CB_WRITE (benchmarks)
  unsigned flush_ms = 1000;          // GRAPHSIGNAL_CUPTI_FLUSH_MS
  size_t buffer_bytes = 4u << 20;    // CUPTI suggests 1-10 MB
  size_t max_buffers = 64;           // GRAPHSIGNAL_CUPTI_MAX_BUFFERS
  bool callbacks = true;             // GRAPHSIGNAL_CUPTI_CALLBACKS=0 leaves CUPTI's callback API to other tools
  bool handoff = true;               // GRAPHSIGNAL_CUPTI_HANDOFF=0 translates on CUPTI's completing thread (A/B)
  bool pinned = false;               // GRAPHSIGNAL_CUPTI_PINNED=1: CUPTI's profiling buffers in pinned host memory
  static CollectorConfig from_env();
};

class Collector {
 public:
  // Called once, from InitializeInjection (inside the process's cuInit).
  // Never fails the workload: on any problem the process runs unprofiled.
  static void initialize();

  // graphsignal_cupti_ignore_stream: a stream (CUstream) whose records are
  // not the workload's (probe_cuda.h's reader). Returns false when it
  // cannot be resolved.
  static bool ignore_stream(void* stream);

 private:
  Collector(graphsignal_ring_header* ring, const CollectorConfig& cfg);
  void start();
  bool enable_activity();
  void subscribe();
  void enable_copy_activity(bool on, bool memcpy, bool memset);
  void set_sampling(bool on);
  void flush_loop();
  void at_exit();
  void translate_now(uint8_t* buffer, size_t valid);

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records);
  static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t size,
                                        size_t valid);
  static void CUPTIAPI on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void* data);
  static bool next_record(void* ctx, uint8_t* buffer, size_t valid, CUpti_Activity** record);
  static void* flush_main(void* self);
  static void at_exit_trampoline();
  static void on_fork_child();

  CollectorConfig cfg_;
  pid_t pid_;
  RingSink sink_;
  DeviceUuids uuids_;
  Devices devices_;
  DriverApi driver_;
  HostMemory host_memory_;
  GraphRegistry graphs_;
  CopyEstimator* estimator_;  // large; never freed (read by callbacks until exit)
  CallTables tables_;         // what API callbacks counted, flushed with the activity
  ApiCallbacks api_;
  bool callbacks_syncs_ = false;   // syncs come from API callbacks
  bool callbacks_copies_ = false;  // copies and memsets come from API callbacks (sampled activity times them)
  bool sampling_ = false;          // inside a copy sampling window (flush thread only)
  std::atomic<bool> window_now_{false};  // the first copy was counted: open a window now
  static void on_first_copy(void* self);
  BufferPool pool_;
  // Serializes translation: CUPTI may return buffers on its worker thread
  // and on any thread that flushes. Waiting here is allowed (no launch
  // waits on it).
  std::mutex translate_mu_;
  Translator translator_;
  CUpti_SubscriberHandle subscriber_ = nullptr;

  struct Completed {
    uint8_t* buffer;
    size_t valid;
  };
  // Guards the queue and the thread's state; the completion callback holds
  // it only to append. Both vectors are reserved to the pool's cap, so no
  // append ever allocates.
  std::mutex flush_mu_;
  std::condition_variable flush_cv_;
  std::vector<Completed> queue_;
  std::vector<Completed> batch_;  // the thread's side of the swap
  bool worker_running_ = false;
  bool stopping_ = false;
  bool flush_thread_done_ = false;
  std::atomic<bool> exited_{false};

  static Collector* self_;            // never freed: CUPTI may call back during exit
  static std::atomic<bool> forked_;   // a fork child never touches the parent's CUPTI state
};

}  // namespace cupti
}  // namespace graphsignal
