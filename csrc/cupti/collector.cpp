#include "collector.h"

#include <graphsignal/probe.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "cupti_call.h"
#include "log.h"
#include "nvtx_gpu.h"

namespace graphsignal {
namespace cupti {

Collector* Collector::self_ = nullptr;
std::atomic<bool> Collector::forked_{false};

static unsigned long env_number(const char* name, unsigned long def, unsigned long lo, unsigned long hi) {
  const char* s = getenv(name);
  if (!s || !*s) return def;
  char* end = nullptr;
  unsigned long v = strtoul(s, &end, 10);
  if (!end || *end || v < lo || v > hi) {
    log(Level::kWarning, "%s=%s is not a number in [%lu, %lu]; using %lu", name, s, lo, hi, def);
    return def;
  }
  return v;
}

// The ranges below are graphsignal-run's too (graphsignal.envcheck.NUMERIC
// drops a bad value before the workload starts);
// tests/integration/test_cupti_env_bounds.py holds the two equal.
CollectorConfig CollectorConfig::from_env() {
  CollectorConfig c;
  // graphsignal-run resolves --cuda-graph-trace / the variable (and warns
  // about bad values) before it starts the workload.
  const char* mode = getenv("GRAPHSIGNAL_CUDA_GRAPH_TRACE");
  c.mode = (mode && !strcasecmp(mode, "node")) ? GraphTrace::kNode : GraphTrace::kGraph;
  c.flush_ms = static_cast<unsigned>(env_number("GRAPHSIGNAL_CUPTI_FLUSH_MS", c.flush_ms, 10, 60000));
  c.max_buffers = env_number("GRAPHSIGNAL_CUPTI_MAX_BUFFERS", c.max_buffers, 2, 4096);
  c.callbacks = env_number("GRAPHSIGNAL_CUPTI_CALLBACKS", 1, 0, 1) != 0;
  c.handoff = env_number("GRAPHSIGNAL_CUPTI_HANDOFF", 1, 0, 1) != 0;
  c.pinned = env_number("GRAPHSIGNAL_CUPTI_PINNED", 0, 0, 1) != 0;
  const char* coll = getenv("GRAPHSIGNAL_CUPTI_COLLECTION");
  if (coll && *coll) {
    if (!strcasecmp(coll, "activity")) {
      c.collection = Collection::kActivity;
    } else if (strcasecmp(coll, "hybrid")) {
      log(Level::kWarning, "GRAPHSIGNAL_CUPTI_COLLECTION=%s is not hybrid or activity; using hybrid", coll);
    }
  }
  c.sample_ms = static_cast<unsigned>(env_number("GRAPHSIGNAL_CUPTI_SAMPLE_MS", c.sample_ms, 0, 60000));
  c.sample_period_ms =
      static_cast<unsigned>(env_number("GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS", c.sample_period_ms, 10, 3600000));
  if (c.sample_ms >= c.sample_period_ms) c.sample_ms = c.sample_period_ms;  // always on: every copy timed
  const char* domains = getenv("GRAPHSIGNAL_CUPTI_CB_DOMAINS");
  if (domains && *domains) {
    c.callback.runtime = strstr(domains, "runtime") != nullptr;
    c.callback.driver = strstr(domains, "driver") != nullptr;
    if (!c.callback.runtime && !c.callback.driver) {
      log(Level::kWarning, "GRAPHSIGNAL_CUPTI_CB_DOMAINS=%s names neither runtime nor driver; using driver", domains);
      c.callback.driver = true;
    }
  }
  c.callback.write = env_number("GRAPHSIGNAL_CUPTI_CB_WRITE", 1, 0, 1) != 0;
  const char* kinds = getenv("GRAPHSIGNAL_CUPTI_SAMPLE_KINDS");
  if (kinds && *kinds) {
    c.sample_memcpy = strstr(kinds, "memcpy") != nullptr;
    c.sample_memset = strstr(kinds, "memset") != nullptr;
  }
  return c;
}

Collector::Collector(graphsignal_ring_header* ring, const CollectorConfig& cfg)
    : cfg_(cfg),
      pid_(getpid()),
      sink_(ring),
      devices_(&sink_, &uuids_),
      graphs_(&sink_, &driver_),
      estimator_(new CopyEstimator()),
      tables_(&sink_, estimator_),
      api_(&sink_, &devices_, &host_memory_, &graphs_, estimator_, &driver_, &tables_),
      pool_(cfg.buffer_bytes, cfg.max_buffers),
      translator_(&sink_, &devices_, cfg.mode, &graphs_, estimator_) {
  queue_.reserve(cfg.max_buffers);
  batch_.reserve(cfg.max_buffers);
}

bool Collector::ignore_stream(void* stream) {
  Collector* self = self_;
  if (!self || !stream) return false;
  // The stream's context comes from the driver (already loaded: CUDA loaded
  // us); CUPTI then names the stream as its activity records do.
  typedef int (*StreamGetCtxFn)(void*, CUcontext*);
  static StreamGetCtxFn get_ctx = []() -> StreamGetCtxFn {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<StreamGetCtxFn>(dlsym(h, "cuStreamGetCtx")) : nullptr;
  }();
  CUcontext ctx = nullptr;
  uint32_t id = 0;
  if (!get_ctx || get_ctx(stream, &ctx) != 0 || !ctx) return false;
  if (GS_CUPTI_CALL(cuptiGetStreamIdEx(ctx, static_cast<CUstream>(stream), 0, &id)) != CUPTI_SUCCESS) return false;
  self->api_.ignore_stream(stream);  // callbacks see the handle, activity records the id
  return self->translator_.ignore_stream(id);
}

void Collector::initialize() {
  char name[256];
  if (!graphsignal_ring_name(name, sizeof name, "cupti")) {
    log(Level::kDebug, "not running under graphsignal-run (no %s); inactive", GRAPHSIGNAL_RUN_ID_ENV);
    return;
  }
  size_t size = 0;
  graphsignal_ring_header* ring = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_CUPTI, graphsignal_ring_env_capacity(),
                                                        GRAPHSIGNAL_RING_DEFAULT_STRINGS, &size);
  if (!ring) {
    // Never retried: initialize() runs once per process (InitializeInjection).
    // The header left the marker <name>.none, from which the sidecar reports it.
    int err = errno;
    log(Level::kWarning, "cannot create /dev/shm/%s: %s; this process runs unprofiled", name,
        graphsignal_ring_error_text(err));
    return;
  }
  self_ = new Collector(ring, CollectorConfig::from_env());
  self_->start();
}

void Collector::start() {
  uuids_.attach_driver();
  driver_.load();
  if (cfg_.pinned) {
    // Where CUPTI keeps the kernel timestamps it collects: device memory by
    // default since CUDA 12.0 (copied back as buffers fill), page-locked host
    // memory with this. Set before any context exists (cuInit is running).
    uint8_t one = 1;
    size_t size = sizeof one;
    if (GS_CUPTI_CALL(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, &size, &one)) ==
        CUPTI_SUCCESS)
      log(Level::kDebug, "CUPTI profiling buffers in pinned host memory");
  }
  if (GS_CUPTI_CALL(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
    log(Level::kWarning, "CUPTI cannot trace this process; it runs unprofiled");
    sink_.close();  // tells the sidecar nothing more will come
    return;
  }
  if (cfg_.callbacks) subscribe();
  if (!enable_activity()) {
    log(Level::kWarning, "CUPTI cannot trace this process; it runs unprofiled");
    sink_.close();
    return;
  }
  {
    std::lock_guard<std::mutex> g(translate_mu_);
    translator_.write_meta();
  }
  nvtx::attach(subscriber_, translator_.mode() == GraphTrace::kGraph);  // GPU time per NVTX range (nvtx_gpu.h)
  pthread_t t;
  {
    std::lock_guard<std::mutex> g(flush_mu_);
    worker_running_ = true;  // before the thread exists: no completion may slip past the queue
  }
  if (pthread_create(&t, nullptr, flush_main, this) == 0) {
    pthread_detach(t);  // at exit we wait for it to finish its round, never join (it may be stuck in CUPTI)
  } else {
    std::lock_guard<std::mutex> g(flush_mu_);
    worker_running_ = false;
    flush_thread_done_ = true;
    log(Level::kWarning, "no collector thread; activity is translated as CUPTI returns it");
  }
  atexit(at_exit_trampoline);
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

void Collector::subscribe() {
  CUptiResult r = GS_CUPTI_CALL_QUIET(cuptiSubscribe(&subscriber_, on_callback, this),
                                      CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    // Another tool (Nsight, a sanitizer) holds CUPTI's callback API. Activity
    // still works; contexts are learned from CONTEXT records instead.
    log(Level::kInfo, "another CUPTI subscriber is active; using activity records for everything");
  }
  if (r != CUPTI_SUCCESS) {
    subscriber_ = nullptr;
    return;
  }
  GS_CUPTI_CALL(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
  GS_CUPTI_CALL(cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPH_CLONED));
}

bool Collector::enable_activity() {
  // Kernels first: if CUPTI cannot trace them (no usable driver, a profiler
  // that owns the GPU's counters), it can trace nothing, and one line says so.
  if (GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) return false;
  if (cfg_.mode == GraphTrace::kGraph &&
      GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)) != CUPTI_SUCCESS) {
    // Without whole-graph records, the nodes' kernel records are the only
    // measure of graph replays: report them rather than nothing.
    log(Level::kWarning, "CUDA graph tracing unavailable; graph kernels are reported per node");
    translator_.set_mode(GraphTrace::kNode);
  }
  // CONTEXT records are the fallback map from context to device (sync
  // records carry only the context).
  GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONTEXT));

  // The API callbacks: graph names in every collection; syncs, and in graph
  // mode copies, in the hybrid one. Node mode keeps copy activity records:
  // a graph's copy nodes have no API call of their own.
  bool hybrid = cfg_.collection == Collection::kHybrid && subscriber_;
  CallbackConfig cb = cfg_.callback;
  cb.graphs = subscriber_ != nullptr;
  cb.syncs = hybrid;
  cb.copies = hybrid && translator_.mode() == GraphTrace::kGraph;
  api_.set_diagnose(log_enabled(Level::kDebug));
  if (subscriber_ && !api_.enable(subscriber_, cb)) {
    cb.syncs = cb.copies = false;
    cb.graphs = api_.enable(subscriber_, cb);  // at least the names, if those can be hooked
  }
  callbacks_syncs_ = cb.syncs;
  callbacks_copies_ = cb.copies;
  if (callbacks_copies_ && cfg_.sample_ms && cfg_.sample_ms < cfg_.sample_period_ms)
    api_.set_first_copy_hook(on_first_copy, this);
  translator_.set_copies_counted_elsewhere(callbacks_copies_);

  if (!callbacks_syncs_) GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION));
  if (!callbacks_copies_) {
    enable_copy_activity(true, true, true);
  } else if (cfg_.sample_ms >= cfg_.sample_period_ms) {
    // every copy timed: activity always on, callbacks still count
    enable_copy_activity(true, cfg_.sample_memcpy, cfg_.sample_memset);
  }
  log(Level::kInfo, "collecting kernels and graphs by activity; synchronization by %s; copies and memsets by %s; "
      "graph trace mode %s",
      callbacks_syncs_ ? "API callbacks" : "activity", callbacks_copies_
          ? (cfg_.sample_ms ? "API callbacks (GPU time sampled)" : "API callbacks (no GPU time)")
          : "activity",
      translator_.mode() == GraphTrace::kNode ? "node" : "graph");
  return true;
}

void Collector::enable_copy_activity(bool on, bool memcpy, bool memset) {
  if (memcpy) {
    if (on) GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    else GS_CUPTI_CALL(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
    if (on) GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2));
    else GS_CUPTI_CALL(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2));
  }
  if (memset) {
    if (on) GS_CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    else GS_CUPTI_CALL(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET));
  }
}

void Collector::on_first_copy(void* arg) {
  // On a workload thread, inside an API callback: no lock, a flag and a
  // wake-up (a wake-up lost in a race only delays the window to the next
  // round of the thread).
  auto* self = static_cast<Collector*>(arg);
  self->window_now_.store(true, std::memory_order_release);
  self->flush_cv_.notify_one();
}

void Collector::set_sampling(bool on) {
  if (on == sampling_) return;
  sampling_ = on;
  enable_copy_activity(on, cfg_.sample_memcpy, cfg_.sample_memset);
}

void CUPTIAPI Collector::buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *max_num_records = 0;  // as many as fit
  uint8_t* b = (self_ && !forked_.load(std::memory_order_relaxed)) ? self_->pool_.acquire() : nullptr;
  if (!b) {
    // CUPTI drops what it cannot store and counts it; buffer_completed
    // reports that count.
    GS_LOG_ONCE(Level::kWarning, "all activity buffers are in use; CUPTI drops records until one is returned "
                "(counted in graphsignal_dropped_records)");
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *buffer = b;
  *size = self_->pool_.buffer_size();
}

void CUPTIAPI Collector::buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                                          size_t valid) {
  Collector* self = self_;
  if (!self || forked_.load(std::memory_order_relaxed)) return;
  size_t dropped = 0;
  if (GS_CUPTI_CALL(cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped)) == CUPTI_SUCCESS && dropped) {
    self->sink_.add_dropped(dropped);
    GS_LOG_ONCE(Level::kWarning, "CUPTI dropped %zu activity records (counted in graphsignal_dropped_records)",
                dropped);
  }
  if (!buffer) return;
  if (!valid) {
    self->pool_.release(buffer);
    return;
  }
  {
    std::lock_guard<std::mutex> g(self->flush_mu_);
    if (self->worker_running_ && self->cfg_.handoff) {
      self->queue_.push_back(Completed{buffer, valid});
      self->flush_cv_.notify_one();
      return;
    }
  }
  self->translate_now(buffer, valid);  // exit flush, or no collector thread
}

void Collector::translate_now(uint8_t* buffer, size_t valid) {
  {
    std::lock_guard<std::mutex> g(translate_mu_);
    translator_.translate_buffer(buffer, valid, next_record, nullptr);
  }
  pool_.release(buffer);
}

bool Collector::next_record(void* /*ctx*/, uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  // MAX_LIMIT_REACHED is the end of the buffer, not an error.
  if (GS_CUPTI_CALL_QUIET(cuptiActivityGetNextRecord(buffer, valid, record), CUPTI_ERROR_MAX_LIMIT_REACHED) !=
      CUPTI_SUCCESS)
    return false;
  nvtx::on_record(*record);  // kernels and graph replays launched inside NVTX ranges
  return true;
}

void CUPTIAPI Collector::on_callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                     const void* data) {
  auto* self = static_cast<Collector*>(userdata);
  if (!data || forked_.load(std::memory_order_relaxed)) return;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    nvtx::on_api(domain, cbid, data);  // launches, once GPU time per NVTX range is on
    self->api_.on_api(domain, cbid, static_cast<const CUpti_CallbackData*>(data));
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  // Only CUPTI calls here: CUPTI does not support driver calls from inside
  // its resource callbacks, and this runs on the thread creating the
  // context (or cloning the graph).
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  if (cbid == CUPTI_CBID_RESOURCE_GRAPH_CLONED) {
    const auto* gd = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
    uint32_t clone = 0, original = 0;
    if (gd && gd->graph && gd->originalGraph && GS_CUPTI_CALL(cuptiGetGraphId(gd->graph, &clone)) == CUPTI_SUCCESS &&
        GS_CUPTI_CALL(cuptiGetGraphId(gd->originalGraph, &original)) == CUPTI_SUCCESS)
      self->graphs_.note_clone(clone, original);
    return;
  }
  if (cbid != CUPTI_CBID_RESOURCE_CONTEXT_CREATED) return;
  uint32_t context_id = 0, device_id = 0;
  if (GS_CUPTI_CALL(cuptiGetContextId(rd->context, &context_id)) == CUPTI_SUCCESS &&
      GS_CUPTI_CALL(cuptiGetDeviceId(rd->context, &device_id)) == CUPTI_SUCCESS) {
    self->translator_.note_context(context_id, device_id);
  }
}

void* Collector::flush_main(void* arg) {
  static_cast<Collector*>(arg)->flush_loop();
  return nullptr;
}

void Collector::flush_loop() {
  // Translates queued buffers as they come. Besides: the device UUIDs,
  // polled quickly while cuInit (which is running InitializeInjection right
  // now) finishes, then a flush every flush_ms so the sidecar sees activity
  // within about a second; and, when callbacks count copies, the copy
  // activity kinds switched on for sample_ms of every sample_period_ms.
  using Clock = std::chrono::steady_clock;
  bool uuids_done = false;
  int attempts = 0;
  auto flush_due = Clock::now() + std::chrono::milliseconds(20);
  bool windows = callbacks_copies_ && cfg_.sample_ms > 0 && cfg_.sample_ms < cfg_.sample_period_ms;
  // The first window opens as soon as the driver has finished initializing
  // (CUPTI is not switched while cuInit runs): short programs get their
  // copies timed too.
  auto window_due = Clock::time_point::max();
  std::unique_lock<std::mutex> lk(flush_mu_);
  for (;;) {
    auto due = windows ? std::min(flush_due, window_due) : flush_due;
    flush_cv_.wait_until(lk, due, [this] {
      return stopping_ || !queue_.empty() || window_now_.load(std::memory_order_acquire);
    });
    if (!queue_.empty()) {
      batch_.swap(queue_);
      lk.unlock();
      for (const Completed& c : batch_) translate_now(c.buffer, c.valid);
      batch_.clear();
      lk.lock();
      continue;
    }
    if (stopping_) break;
    auto now = Clock::now();
    if (window_now_.exchange(false, std::memory_order_acq_rel) && windows && !sampling_ && uuids_done) {
      window_due = now;  // the first copy: a window right away
    }
    if (windows && now >= window_due) {
      lk.unlock();
      set_sampling(!sampling_);
      lk.lock();
      window_due = now + std::chrono::milliseconds(sampling_ ? cfg_.sample_ms : cfg_.sample_period_ms - cfg_.sample_ms);
      continue;
    }
    if (now < flush_due) continue;
    lk.unlock();
    if (!uuids_done) {
      uuids_done = uuids_.resolve_all() || ++attempts >= 500;
      if (uuids_done && windows) window_due = Clock::now();
    } else {
      // Default flush: returns only buffers whose records are all complete.
      GS_CUPTI_CALL(cuptiActivityFlushAll(0));
      tables_.flush();
    }
    flush_due = Clock::now() + std::chrono::milliseconds(uuids_done ? cfg_.flush_ms : 20);
    lk.lock();
  }
  worker_running_ = false;
  flush_thread_done_ = true;
  lk.unlock();
  flush_cv_.notify_all();
}

void Collector::at_exit_trampoline() {
  if (self_) self_->at_exit();
}

void Collector::on_fork_child() { forked_.store(true, std::memory_order_relaxed); }

void Collector::at_exit() {
  // A fork child inherits this handler but not CUPTI's threads or state.
  if (getpid() != pid_ || forked_.load(std::memory_order_relaxed)) return;
  if (exited_.exchange(true)) return;
  {
    std::unique_lock<std::mutex> lk(flush_mu_);
    stopping_ = true;
    flush_cv_.notify_all();
    // Let a flush in progress finish, so no CUPTI call of ours is still
    // running while the process tears libraries down. Bounded: exit must
    // never hang on the profiler.
    flush_cv_.wait_for(lk, std::chrono::seconds(2), [this] { return flush_thread_done_; });
  }
  // Forced: also returns buffers with records still incomplete, so a short
  // program loses nothing that CUPTI holds. With the thread gone they are
  // translated right here, as they complete.
  GS_CUPTI_CALL(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  // Whatever the thread left queued (it stops between buffers, or is stuck).
  std::vector<Completed> left;
  {
    std::lock_guard<std::mutex> g(flush_mu_);
    worker_running_ = false;  // from now on completions translate inline
    left.swap(queue_);
  }
  for (const Completed& c : left) translate_now(c.buffer, c.valid);
  tables_.flush();  // what callbacks counted since the last period
  {
    std::lock_guard<std::mutex> g(translate_mu_);
    const TranslatorStats& s = translator_.stats();
    log(Level::kDebug,
        "exit: %llu records (%llu kernels, %llu graphs, %llu memcpy, %llu memset, %llu sync, %llu graph-node "
        "kernels skipped, %llu other); %llu buffer requests refused",
        (unsigned long long)s.records, (unsigned long long)s.kernels, (unsigned long long)s.graphs,
        (unsigned long long)s.memcpys, (unsigned long long)s.memsets, (unsigned long long)s.syncs,
        (unsigned long long)s.graph_kernels_skipped, (unsigned long long)s.other,
        (unsigned long long)pool_.refused());
    if (callbacks_syncs_ || callbacks_copies_) {
      CallbackStats c = api_.stats();
      log(Level::kDebug,
          "exit: API callbacks handled %llu runtime and %llu driver calls; skipped %llu driver calls inside runtime "
          "calls, %llu captured, %llu failed, %llu unsupported copies; %llu copy durations sampled",
          (unsigned long long)c.runtime, (unsigned long long)c.driver, (unsigned long long)c.nested,
          (unsigned long long)c.captured, (unsigned long long)c.failed, (unsigned long long)c.unsupported,
          (unsigned long long)s.copy_samples);
      std::string pairs = api_.nested_pairs();
      if (!pairs.empty()) log(Level::kDebug, "exit: runtime>driver callback ids seen nested: %s", pairs.c_str());
    }
  }
  nvtx::collector_finished();  // the last GPU time per NVTX range is in
  sink_.close();
}

}  // namespace cupti
}  // namespace graphsignal
