// The CUPTI side of the injection library: registers the activity buffer
// callbacks, enables the activity kinds, runs the periodic flush and the
// exit flush, and hands completed buffers to the Translator.
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

#include "buffer_pool.h"
#include "device_uuids.h"
#include "ring_sink.h"
#include "translator.h"

namespace graphsignal {
namespace cupti {

struct CollectorConfig {
  GraphTrace mode = GraphTrace::kGraph;
  unsigned flush_ms = 1000;          // GRAPHSIGNAL_CUPTI_FLUSH_MS
  size_t buffer_bytes = 4u << 20;    // CUPTI suggests 1-10 MB
  size_t max_buffers = 64;           // GRAPHSIGNAL_CUPTI_MAX_BUFFERS
  bool callbacks = true;             // GRAPHSIGNAL_CUPTI_CALLBACKS=0 leaves CUPTI's callback API to other tools
  bool handoff = true;               // GRAPHSIGNAL_CUPTI_HANDOFF=0 translates on CUPTI's completing thread (A/B)
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
