// The API hooks' dispatcher (api_callbacks.h): enables the table's entry
// points and records each call that succeeded, ran and was not nested in
// another hooked call.
#include "api_callbacks.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api_params.h"
#include "cupti_call.h"
#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {

typedef CUptiResult (*GetGraphExecIdFn)(CUgraphExec, uint32_t*);

// The libcupti this library runs against (it may be newer than the headers
// it was built with), found through a function every version exports.
static GetGraphExecIdFn graph_exec_id_fn() {
  static GetGraphExecIdFn fn = []() -> GetGraphExecIdFn {
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(&cuptiGetGraphId), &info) || !info.dli_fname) return nullptr;
    void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<GetGraphExecIdFn>(dlsym(h, "cuptiGetGraphExecId")) : nullptr;
  }();
  return fn;
}

thread_local int tl_runtime_depth = 0;  // hooked runtime calls in progress on this thread
thread_local uint16_t tl_runtime_cbid = 0;  // the outermost one (diagnostics)

uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

ApiCallbacks::ApiCallbacks(RingSink* sink, Devices* devices, HostMemory* host, GraphRegistry* graphs,
                           const CopyEstimator* estimator, const DriverApi* driver, CallTables* tables)
    : sink_(sink),
      devices_(devices),
      host_(host),
      graphs_(graphs),
      estimator_(estimator),
      driver_(driver),
      tables_(tables),
      addresses_(host, driver) {}

bool ApiCallbacks::enable(CUpti_SubscriberHandle subscriber, const CallbackConfig& cfg) {
  cfg_ = cfg;
  auto wanted = [&cfg](const Api& a) {
    switch (a.op) {
      case Op::kSync:
        return cfg.syncs;
      case Op::kInstantiate:
      case Op::kExecUpdate:
        return cfg.graphs;
      default:
        return cfg.copies;  // copies, memsets, and what classifies them (allocations, captures)
    }
  };
  // The entry points every workload of the kind uses; the rest may be
  // missing from an older CUPTI and are skipped quietly.
  auto core = [](bool runtime, uint16_t cbid) {
    return runtime ? (cbid == 131 || cbid == 165 || cbid == 41 || cbid == 51) : (cbid == 126 || cbid == 306);
  };
  // The calls made on every step (syncs, copies, memsets) are hooked in the
  // configured domains only: a runtime call reaches the driver through its
  // public entry points, where the driver callback sees it (a second domain
  // doubles CUPTI's dispatch on every call; scripts/bench_percall.py). Rare
  // calls (allocations, captures, instantiations) are hooked in both, the
  // driver call inside a hooked runtime call skipped.
  auto hot = [](const Api& a) { return a.op == Op::kSync || a.op == Op::kCopy || a.op == Op::kMemset; };
  bool ok = true;
  int enabled = 0, missing = 0;
  for (int d = 0; d < 2 && ok; d++) {
    bool runtime = d == 0;
    const Api* table = runtime ? kRuntimeApis : kDriverApis;
    size_t n = runtime ? kRuntimeCount : kDriverCount;
    uint8_t* index = runtime ? runtime_index_ : driver_index_;
    CUpti_CallbackDomain domain = runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    for (size_t i = 0; i < n; i++) {
      const Api& a = table[i];
      if (!wanted(a) || a.cbid >= kMaxCbid) continue;
      if (hot(a) && (runtime ? !cfg.runtime : !cfg.driver)) continue;
      bool is_core = core(runtime, a.cbid) && (a.op == Op::kSync ? cfg.syncs : cfg.copies);
      // Not through GS_CUPTI_CALL: an id this CUPTI does not know is expected.
      if (cuptiEnableCallback(1, subscriber, domain, a.cbid) != CUPTI_SUCCESS) {
        missing++;
        if (is_core) ok = false;
        continue;
      }
      index[a.cbid] = static_cast<uint8_t>(i + 1);
      enabled++;
    }
  }
  if (!ok) {
    for (int d = 0; d < 2; d++) {
      uint8_t* index = d == 0 ? runtime_index_ : driver_index_;
      CUpti_CallbackDomain domain = d == 0 ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
      for (int c = 0; c < kMaxCbid; c++) {
        if (index[c]) cuptiEnableCallback(0, subscriber, domain, static_cast<CUpti_CallbackId>(c));
        index[c] = 0;
      }
    }
    log(Level::kInfo, "CUPTI API callbacks unavailable; synchronization and copies are traced by activity records");
    return false;
  }
  log(Level::kDebug, "%d API callbacks enabled (%d unknown to this CUPTI)", enabled, missing);
  return true;
}

void ApiCallbacks::ignore_stream(void* stream) {
  CUstream s = static_cast<CUstream>(stream);
  for (int i = 0, n = n_ignored_.load(std::memory_order_acquire); i < n; i++)
    if (ignored_[i].load(std::memory_order_acquire) == s) return;
  int i = n_ignored_.load(std::memory_order_relaxed);
  while (i < kMaxIgnored && !n_ignored_.compare_exchange_weak(i, i + 1, std::memory_order_acq_rel)) {
  }
  if (i < kMaxIgnored) ignored_[i].store(s, std::memory_order_release);
}

CallbackStats ApiCallbacks::stats() const {
  CallbackStats s;
  s.runtime = counters_.runtime.load(std::memory_order_relaxed);
  s.driver = counters_.driver.load(std::memory_order_relaxed);
  s.nested = counters_.nested.load(std::memory_order_relaxed);
  s.captured = counters_.captured.load(std::memory_order_relaxed);
  s.failed = counters_.failed.load(std::memory_order_relaxed);
  s.unsupported = counters_.unsupported.load(std::memory_order_relaxed);
  return s;
}

void ApiCallbacks::on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (cbid >= static_cast<CUpti_CallbackId>(kMaxCbid) || !cb) return;
  uint8_t i = runtime ? runtime_index_[cbid] : driver_index_[cbid];
  if (!i) return;
  const Api& api = runtime ? kRuntimeApis[i - 1] : kDriverApis[i - 1];
  // A driver call inside a hooked runtime call is the runtime call's own
  // work: the runtime call is the one reported.
  bool nested = !runtime && runtime_calls_.load(std::memory_order_relaxed) && tl_runtime_depth;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (runtime) {
      runtime_calls_.fetch_add(1, std::memory_order_relaxed);
      if (!tl_runtime_depth++) tl_runtime_cbid = static_cast<uint16_t>(cbid);
    } else if (nested) {
      if (diagnose_) note_nested(tl_runtime_cbid, static_cast<uint16_t>(cbid));
      return;
    }
    if (api.op == Op::kSync && cb->correlationData) *cb->correlationData = now_ns();
    return;
  }
  if (runtime) {
    if (tl_runtime_depth > 0) {
      tl_runtime_depth--;
      runtime_calls_.fetch_sub(1, std::memory_order_relaxed);
    }
  } else if (nested) {
    if (diagnose_) counters_.nested.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (diagnose_) (runtime ? counters_.runtime : counters_.driver).fetch_add(1, std::memory_order_relaxed);
  on_exit(api, cb);
}

void ApiCallbacks::on_exit(const Api& api, const CUpti_CallbackData* cb) {
  int result = -1;
  if (cb->functionReturnValue)
    result = *static_cast<const int*>(cb->functionReturnValue);  // a cudaError_t or a CUresult: 0 is success
  const void* params = cb->functionParams;
  if (api.op == Op::kCaptureEnd) {
    // An invalidated capture has ended too (901: the same value in both APIs).
    if (result == 0 || result == 901) {
      int n = captures_.load(std::memory_order_relaxed);
      while (n > 0 && !captures_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
      }
    }
    return;
  }
  if (result != 0) {
    counters_.failed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!params && api.layout != Layout::kNoParams) return;
  bool ptsz = (api.flags & kPtsz) != 0;
  switch (api.op) {
    case Op::kSync: {
      uint64_t start = cb->correlationData ? *cb->correlationData : 0;
      uint64_t end = now_ns();
      CUstream stream;
      if (sync_stream(api, params, &stream) && skip_stream(stream, ptsz)) return;
      record(CallTables::kSync, static_cast<uint8_t>(api.flags & kLowMask), 0, 0, device_of(cb->context),
             start && end > start ? end - start : 0, 0);
      return;
    }
    case Op::kCopy: {
      CopyCall c;
      Decoded d = decode_copy(api, params, addresses_, &c);
      if (d == Decoded::kUnsupported) counters_.unsupported.fetch_add(1, std::memory_order_relaxed);
      if (d != Decoded::kYes || skip_stream(c.stream, ptsz)) return;
      record_copy(c.kind, c.src, c.dst, c.bytes, device_of(cb->context));
      return;
    }
    case Op::kMemset: {
      MemsetCall m;
      if (decode_memset(api, params, addresses_, &m) != Decoded::kYes || skip_stream(m.stream, ptsz)) return;
      record(CallTables::kMemset, m.kind, 0, 0, device_of(cb->context), 0, m.bytes);
      return;
    }
    case Op::kHostAlloc:
    case Op::kHostRegister:
    case Op::kHostFree: {
      uintptr_t base;
      size_t size;
      if (!host_range(api, params, &base, &size)) return;
      if (api.op == Op::kHostFree) host_->remove(base);
      else host_->add(base, size, static_cast<uint8_t>(api.flags & kLowMask));
      return;
    }
    case Op::kCaptureBegin:
      captures_.fetch_add(1, std::memory_order_relaxed);
      return;
    case Op::kInstantiate:
    case Op::kExecUpdate: {
      CUgraphExec exec;
      CUgraph graph;
      if (!graphs_ || !graph_of(api, params, &exec, &graph)) return;
      uint32_t exec_id = 0, graph_id = 0;
      // cuptiGetGraphExecId is newer than the oldest CUPTI 12 headers we
      // build against: looked up in the loaded libcupti; without it the
      // records carry (and the registry keys on) the source graph's id.
      if (GetGraphExecIdFn get_exec_id = graph_exec_id_fn())
        if (get_exec_id(exec, &exec_id) != CUPTI_SUCCESS) exec_id = 0;
      if (graph) GS_CUPTI_CALL(cuptiGetGraphId(graph, &graph_id));
      if (!exec_id && !graph_id) return;
      if (api.op == Op::kInstantiate) graphs_->on_instantiate(exec_id, graph_id, graph);
      else graphs_->on_update(exec_id, graph_id, graph);
      return;
    }
    case Op::kCaptureEnd:
      return;
  }
}

bool ApiCallbacks::skip_stream(CUstream stream, bool ptsz) {
  if (!stream && ptsz) stream = CU_STREAM_PER_THREAD;  // a _ptsz call's null stream
  int n = n_ignored_.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++)
    if (ignored_[i].load(std::memory_order_acquire) == stream) return true;
  if (captures_.load(std::memory_order_relaxed) > 0 && driver_ && driver_->stream_is_capturing) {
    // Work put on a capturing stream joins the graph instead of running;
    // the graph's replays carry it. Asked only while some capture runs.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_->stream_is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) {
      counters_.captured.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

uint16_t ApiCallbacks::device_of(CUcontext ctx) {
  // user-space pointers fit 48 bits: (pointer << 16 | ordinal) in one word
  uint64_t c = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx));
  bool cacheable = ctx && c < (1ull << 48);
  std::atomic<uint64_t>& slot = contexts_[(c >> 4) % kContexts];
  if (cacheable) {
    uint64_t v = slot.load(std::memory_order_relaxed);
    if (v >> 16 == c) return static_cast<uint16_t>(v & 0xFFFF);
  }
  uint32_t dev = 0;
  if (!ctx || GS_CUPTI_CALL(cuptiGetDeviceId(ctx, &dev)) != CUPTI_SUCCESS) dev = devices_->last();
  uint16_t d = devices_->use(dev);  // announced before any record of it
  if (cacheable) slot.store(c << 16 | d, std::memory_order_relaxed);
  return d;
}

void ApiCallbacks::note_nested(uint16_t runtime_cbid, uint16_t driver_cbid) {
  uint32_t pair = static_cast<uint32_t>(runtime_cbid) << 16 | driver_cbid;
  for (int i = 0; i < kMaxPairs; i++) {
    uint32_t v = pairs_[i].load(std::memory_order_relaxed);
    if (v == pair) return;
    if (!v && pairs_[i].compare_exchange_strong(v, pair, std::memory_order_relaxed)) return;
    if (v == pair) return;
  }
}

std::string ApiCallbacks::nested_pairs() const {
  std::string out;
  char buf[32];
  for (int i = 0; i < kMaxPairs; i++) {
    uint32_t v = pairs_[i].load(std::memory_order_relaxed);
    if (!v) break;
    snprintf(buf, sizeof buf, "%s%u>%u", out.empty() ? "" : " ", v >> 16, v & 0xFFFF);
    out += buf;
  }
  return out;
}

void ApiCallbacks::record_copy(uint8_t kind, uint8_t src, uint8_t dst, uint64_t bytes, uint16_t dev) {
  if (first_copy_hook_ && !first_copy_.load(std::memory_order_relaxed) && !first_copy_.exchange(true))
    first_copy_hook_(first_copy_arg_);
  record(CallTables::kMemcpy, kind, src, dst, dev, 0, bytes);
}

void ApiCallbacks::record(CallTables::Kind kind, uint8_t sub, uint8_t src, uint8_t dst, uint16_t dev, uint64_t ns,
                          uint64_t bytes) {
  if (!cfg_.write) return;
  if (tables_ && tables_->add(kind, sub, src, dst, dev, ns, bytes)) return;
  // not tabled (see CallTables::add): this call's own record
  CallTables direct(sink_, estimator_);
  if (kind != CallTables::kSync) ns = direct.estimate(kind, sub, src, dst, 1, bytes);
  direct.write(kind, sub, src, dst, dev, 1, ns, bytes);
}

}  // namespace cupti
}  // namespace graphsignal
