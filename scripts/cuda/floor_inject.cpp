// The floor: what any CUPTI tool pays for the same data, with nothing of its
// own done. A minimal injection (CUDA_INJECTION64_PATH) that enables the
// activity kinds named in GS_FLOOR_KINDS and discards every buffer unread,
// and with GS_FLOOR_CALLBACKS also subscribes to the API callbacks on the
// entry points graphsignal's hybrid collection hooks (synchronization,
// copies, memsets), with a callback that returns at once: the floor of the
// callback method. GS_FLOOR_TOGGLE_MS=N switches the copy and memset kinds
// on N ms after start, for 20 ms, and off again: whether a sampling window
// leaves a cost behind. GS_FLOOR_GRAPH_LAUNCH=1 adds the driver's graph
// launch entry points (cuGraphLaunch, _ptsz) to the callbacks: the floor of
// counting replays by callback. GS_FLOOR_GRAPH_OFF_MS=N switches
// GRAPH_TRACE off N ms after start (a state reached by switching, as
// sampled graph timing reaches it). GS_FLOOR_KERNEL_LAUNCH=1 adds the
// driver's kernel launch entry points (cuLaunchKernel, cuLaunchKernelEx,
// and their _ptsz): the floor of counting eager kernels by callback.
// GS_FLOOR_NOOP=1: nothing at all (not even CUPTI's buffer callbacks): an
// injection that only stands in for graphsignal's, so that graphsignal-run
// (which leaves a CUDA_INJECTION64_PATH the user set alone) runs its
// sidecar, telemetry and engine scrape with no CUPTI cost (engine_e2e.py's
// ablation modes).
//
// GS_FLOOR_PINNED=1: CUPTI keeps its profiling buffers in pinned host memory
// (CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED) instead of device
// memory, its default since CUDA 12.0. GS_FLOOR_DEVBUF_KB=N: CUPTI's device
// buffer size (CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE).
// GS_FLOOR_GRAPH_EVENTS=1: every driver graph launch (cuGraphLaunch, _ptsz)
// is timed by a CUDA event pair recorded on its stream from the launch
// callbacks, read back by a thread every 50 ms: what timing graphs without
// CUPTI's graph tracing costs. (On the H200 the span was not the replay's
// GPU time: it includes the stream's wait for the host to submit the
// graph, 570 us against CUPTI's 347 us per replay of llama.cpp's decode.)
// GS_FLOOR_NO_ACTIVITY=1: CUPTI's activity API is never touched (no buffer
// callbacks registered, no kind enabled): with GS_FLOOR_CALLBACKS, the
// floor of a collection by API callbacks alone; with
// GS_FLOOR_CALLBACKS=none, a subscriber with no callback enabled.
// GS_FLOOR_REPORT=1 reads the buffers (a diagnosis then, not a floor) and
// prints at exit the records CUPTI wrote by kind and, with the kind
// "overhead" enabled, CUPTI's own overhead records (buffer flushes,
// instrumentation, resources, ...) summed by overhead kind; with graph
// events, the replays they timed and their mean span.
//
// GS_FLOOR_DETACH_MS=N: CUPTI detaches itself from the process
// (cuptiFinalize, called at the exit of a driver API call as CUPTI's header
// recommends) N ms after the first driver graph launch, or after init when
// the process launches no graph within 10 s: whether CUPTI's cost goes with
// it. GS_FLOOR_CYCLE_MS=ON,OFF: attached for ON ms, detached for OFF ms,
// over and over, each attach doing the whole setup again (kinds, buffer
// callbacks, subscriber): what duty-cycled collection would cost; with
// GS_FLOOR_REPORT, the graph and kernel records of every window, which
// says whether a re-attached CUPTI still sees graphs instantiated before.
// Both subscribe the driver callbacks of GS_FLOOR_CALLBACKS=driver and the
// graph launch entry points (the detach needs an API exit to run in);
// GS_FLOOR_DETACH_AT_SYNC=1 detaches only at a synchronization's exit.
// On an H200 (driver 580, CUDA 13.0) every variant made the graph replays
// after the detach fail with an illegal memory access: a finding, not a
// tool to use.
//
// Built by scripts/bench_percall.py and scripts/build_floor_inject.py.
//
//   GS_FLOOR_KINDS=kernel,memcpy,memcpy2,memset,sync,context,graph,overhead   (or "all", or "")
//   GS_FLOOR_CALLBACKS=1 (both API domains) | driver | runtime | none (subscribed, nothing enabled)
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

static std::mutex mu;
static std::vector<uint8_t*> free_list;

static void CUPTIAPI req(uint8_t** b, size_t* s, size_t* m) {
  std::lock_guard<std::mutex> g(mu);
  if (!free_list.empty()) {
    *b = free_list.back();
    free_list.pop_back();
  } else {
    *b = static_cast<uint8_t*>(malloc(4u << 20));
  }
  *s = 4u << 20;
  *m = 0;
}

static bool reading = false;  // GS_FLOOR_REPORT: buffers are read, records counted
static uint64_t by_kind[64];
static std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> overheads;  // kind -> (count, ns)

static void CUPTIAPI done(CUcontext, uint32_t, uint8_t* b, size_t, size_t valid) {
  std::lock_guard<std::mutex> g(mu);
  if (reading && b) {
    CUpti_Activity* r = nullptr;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
      by_kind[static_cast<unsigned>(r->kind) & 63]++;
      if (r->kind != CUPTI_ACTIVITY_KIND_OVERHEAD) continue;
      const auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(r);
      uint32_t k = static_cast<uint32_t>(o->overheadKind);
      uint64_t ns = o->end > o->start ? o->end - o->start : 0;
      bool found = false;
      for (auto& e : overheads)
        if (e.first == k) {
          e.second.first++;
          e.second.second += ns;
          found = true;
        }
      if (!found) overheads.push_back({k, {1, ns}});
      free(o->overheadData);  // CUPTI hands it over
    }
  }
  if (b) free_list.push_back(b);
}

static void report_records() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> g(mu);
  fprintf(stderr, "floor_inject: records by kind:");
  for (int k = 0; k < 64; k++)
    if (by_kind[k]) fprintf(stderr, " %d=%llu", k, (unsigned long long)by_kind[k]);
  fprintf(stderr, "\n");
  for (auto& e : overheads)
    fprintf(stderr, "floor_inject: CUPTI overhead kind 0x%x: %llu records, %.3f ms\n", e.first,
            (unsigned long long)e.second.first, e.second.second / 1e6);
}

static void CUPTIAPI nothing(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

static bool wants(const char* kinds, const char* kind) {
  if (!strcmp(kinds, "all")) return strcmp(kind, "overhead") != 0;  // "all": what a tool collects, not the diagnosis
  size_t n = strlen(kind);
  for (const char* p = kinds; (p = strstr(p, kind)); p += n)
    if ((p == kinds || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
  return false;
}

// The entry points of graphsignal's hybrid collection (csrc/cupti/api_table.cpp):
// sync, memcpy, memset families of both APIs.
static const unsigned kRuntime[] = {131, 239, 165, 126, 137, 147, 247, 31, 215, 41, 225, 32, 216, 44, 228, 144, 245,
                                    145, 246, 39, 223, 47, 231, 40, 224, 48, 232, 160, 161, 49, 233, 51, 235, 50, 234,
                                    52, 236, 142, 243, 143, 244, 25, 27, 206, 152, 26, 153, 22, 315, 316, 452, 453,
                                    319, 320};
static const unsigned kDriver[] = {126, 440, 17, 800, 121, 295, 436, 276, 278, 280, 397, 398, 399, 277, 279, 281, 421,
                                   422, 423, 305, 408, 306, 418, 318, 409, 319, 426, 287, 405, 288, 406, 289, 424, 290,
                                   407, 291, 425, 249, 411, 216, 428, 252, 414, 222, 431, 250, 412, 218, 429, 253, 415,
                                   224, 432, 251, 413, 220, 430, 254, 416, 226, 433, 294, 39, 371, 301, 379, 38, 302,
                                   245, 495, 496, 539, 540, 720, 721, 497, 498};

// Graph launches timed by event pairs (GS_FLOOR_GRAPH_EVENTS).
namespace ev {
typedef int (*CreateFn)(CUevent*, unsigned);
typedef int (*RecordFn)(CUevent, CUstream);
typedef int (*QueryFn)(CUevent);
typedef int (*ElapsedFn)(float*, CUevent, CUevent);
typedef int (*SetCtxFn)(CUcontext);
static CreateFn create;
static RecordFn record, record_ptsz;
static QueryFn query;
static ElapsedFn elapsed;
static SetCtxFn set_ctx;
struct Pair {
  CUevent start, end;
};
static std::mutex mu;
static std::vector<Pair> free_pairs;
static std::deque<Pair> pending;
static std::atomic<CUcontext> ctx{nullptr};
static thread_local Pair open_pair{nullptr, nullptr};
static thread_local bool open_ok = false;
static uint64_t timed = 0;
static std::atomic<uint64_t> failed{0};
static double total_ms = 0;

static bool load() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  create = reinterpret_cast<CreateFn>(dlsym(h, "cuEventCreate"));
  record = reinterpret_cast<RecordFn>(dlsym(h, "cuEventRecord"));
  record_ptsz = reinterpret_cast<RecordFn>(dlsym(h, "cuEventRecord_ptsz"));
  query = reinterpret_cast<QueryFn>(dlsym(h, "cuEventQuery"));
  elapsed = reinterpret_cast<ElapsedFn>(dlsym(h, "cuEventElapsedTime_v2"));
  if (!elapsed) elapsed = reinterpret_cast<ElapsedFn>(dlsym(h, "cuEventElapsedTime"));
  set_ctx = reinterpret_cast<SetCtxFn>(dlsym(h, "cuCtxSetCurrent"));
  return create && record && query && elapsed && set_ctx;
}

static void on_launch(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);
  if (!p) return;
  RecordFn rec = (cbid == 515 && record_ptsz) ? record_ptsz : record;
  if (cb->callbackSite == CUPTI_API_ENTER) {
    open_ok = false;
    {
      std::lock_guard<std::mutex> g(mu);
      if (!free_pairs.empty()) {
        open_pair = free_pairs.back();
        free_pairs.pop_back();
      } else {
        open_pair = Pair{nullptr, nullptr};
      }
    }
    if (!open_pair.start && (create(&open_pair.start, 0) || create(&open_pair.end, 0))) {
      failed++;
      return;
    }
    ctx.store(cb->context, std::memory_order_relaxed);
    open_ok = rec(open_pair.start, p->hStream) == 0;
    return;
  }
  if (!open_ok) return;
  open_ok = false;
  bool ok = *static_cast<const int*>(cb->functionReturnValue) == 0 && rec(open_pair.end, p->hStream) == 0;
  std::lock_guard<std::mutex> g(mu);
  if (ok) pending.push_back(open_pair);
  else free_pairs.push_back(open_pair);
}

static void* poll(void*) {
  bool bound = false;
  for (;;) {
    usleep(50000);
    CUcontext c = ctx.load(std::memory_order_relaxed);
    if (!c) continue;
    if (!bound) bound = set_ctx(c) == 0;
    for (;;) {
      Pair pr;
      {
        std::lock_guard<std::mutex> g(mu);
        if (pending.empty()) break;
        pr = pending.front();
      }
      if (query(pr.end) != 0) break;  // not done yet (or an error: tried again next round)
      float ms = 0;
      bool ok = elapsed(&ms, pr.start, pr.end) == 0;
      std::lock_guard<std::mutex> g(mu);
      pending.pop_front();
      free_pairs.push_back(pr);
      if (ok) {
        timed++;
        total_ms += ms;
      } else {
        failed++;
      }
    }
  }
  return nullptr;
}

static void report() {
  std::lock_guard<std::mutex> g(mu);
  fprintf(stderr, "floor_inject: graph events timed %llu replays, mean span %.3f us, %llu failed, %zu pending\n",
          (unsigned long long)timed, timed ? total_ms * 1000.0 / timed : 0.0, (unsigned long long)failed.load(),
          pending.size());
}
}  // namespace ev

static bool graph_events = false;

// Detach (GS_FLOOR_DETACH_MS, GS_FLOOR_CYCLE_MS): the thread that decides
// asks, the next API exit on any thread carries it out.
namespace det {
static int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

static std::atomic<bool> requested{false}, attached{false};
static std::atomic<bool> launched{false};  // a driver graph launch has returned
static std::mutex mu;
static std::vector<std::pair<uint64_t, uint64_t>> windows;  // (graph, kernel) records per window
static uint64_t graphs_before = 0, kernels_before = 0;
static int on_ms = 0, off_ms = -1;  // off_ms < 0: detach once
static bool at_sync = false;
struct Spent {  // time spent in a step, over its runs
  int64_t total_ns = 0, max_ns = 0;
  void add(int64_t t0) {
    int64_t t = now_ns() - t0;
    total_ns += t;
    if (t > max_ns) max_ns = t;
  }
};
static Spent detaching, attaching;

static void at_exit_site(CUpti_CallbackDomain d, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  if (d != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_EXIT) return;
  if ((cbid == 514 || cbid == 515) && !launched.load(std::memory_order_relaxed))
    launched.store(true, std::memory_order_relaxed);
  if (!requested.load(std::memory_order_relaxed)) return;
  // GS_FLOOR_DETACH_AT_SYNC: only at the exit of a synchronization (stream, event, context)
  if (at_sync && cbid != 126 && cbid != 440 && cbid != 121 && cbid != 17 && cbid != 800) return;
  std::unique_lock<std::mutex> g(mu, std::try_to_lock);  // never wait inside a callback: another thread detaches
  if (!g.owns_lock() || !requested.load()) return;
  int64_t t0 = now_ns();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiFinalize();
  detaching.add(t0);  // the workload's thread waited this long
  requested.store(false);
  attached.store(false);
}
}  // namespace det

static void CUPTIAPI on_api(void*, CUpti_CallbackDomain d, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (graph_events && d == CUPTI_CB_DOMAIN_DRIVER_API && (cbid == 514 || cbid == 515)) ev::on_launch(cbid, cb);
  det::at_exit_site(d, cbid, cb);
}

static void* graph_off(void* arg) {
  usleep(static_cast<useconds_t>(reinterpret_cast<uintptr_t>(arg)) * 1000);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  return nullptr;
}

static void* toggle(void* arg) {
  usleep(static_cast<useconds_t>(reinterpret_cast<uintptr_t>(arg)) * 1000);
  const CUpti_ActivityKind k[] = {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};
  for (auto x : k) cuptiActivityEnable(x);
  usleep(20000);
  for (auto x : k) cuptiActivityDisable(x);
  return nullptr;
}

// The setup, done once at init and again at every re-attach (GS_FLOOR_CYCLE_MS).
namespace cfg {
static const char* kinds = "all";
static bool pinned = false, activity = true, rt = false, drv = false, graph_launch = false, kernel_launch = false,
            subscribe = false;
static size_t devbuf = 0;
}  // namespace cfg

static void attach() {
  if (cfg::pinned) {
    uint8_t one = 1;
    size_t sz = sizeof one;
    CUptiResult r = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, &sz, &one);
    if (r != CUPTI_SUCCESS) fprintf(stderr, "floor_inject: pinned buffers refused (%d)\n", (int)r);
  }
  if (cfg::devbuf) {
    size_t v = cfg::devbuf, sz = sizeof v;
    CUptiResult r = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz, &v);
    if (r != CUPTI_SUCCESS) fprintf(stderr, "floor_inject: device buffer size refused (%d)\n", (int)r);
  }
  if (cfg::activity) cuptiActivityRegisterCallbacks(req, done);
  struct {
    const char* name;
    CUpti_ActivityKind kind;
  } kinds[] = {{"kernel", CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL}, {"memcpy", CUPTI_ACTIVITY_KIND_MEMCPY},
               {"memcpy2", CUPTI_ACTIVITY_KIND_MEMCPY2},         {"memset", CUPTI_ACTIVITY_KIND_MEMSET},
               {"sync", CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},    {"context", CUPTI_ACTIVITY_KIND_CONTEXT},
               {"graph", CUPTI_ACTIVITY_KIND_GRAPH_TRACE},
               {"overhead", CUPTI_ACTIVITY_KIND_OVERHEAD}};
  for (auto& kk : kinds)
    if (cfg::activity && wants(cfg::kinds, kk.name)) cuptiActivityEnable(kk.kind);
  if (cfg::subscribe) {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, graph_events || det::on_ms > 0 ? on_api : nothing, nullptr) == CUPTI_SUCCESS) {
      if (cfg::rt)
        for (unsigned id : kRuntime) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, id);
      if (cfg::drv)
        for (unsigned id : kDriver) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
      if (cfg::graph_launch)
        for (unsigned id : {514u, 515u}) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
      if (cfg::kernel_launch)
        for (unsigned id : {307u, 442u, 652u, 653u}) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
  }
  det::attached.store(true);
}

// GS_FLOOR_DETACH_MS / GS_FLOOR_CYCLE_MS: waits for the first graph launch
// (10 s at most), then detaches and, cycling, attaches again.
static void* cycler(void*) {
  for (int i = 0; i < 1000 && !det::launched.load(std::memory_order_relaxed); i++) usleep(10000);
  for (;;) {
    usleep(static_cast<useconds_t>(det::on_ms) * 1000);
    det::requested.store(true);
    while (det::attached.load()) usleep(1000);  // an API exit on some thread carries it out
    {
      std::lock_guard<std::mutex> g(mu);
      det::windows.push_back({by_kind[CUPTI_ACTIVITY_KIND_GRAPH_TRACE & 63] - det::graphs_before,
                              by_kind[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL & 63] - det::kernels_before});
      det::graphs_before = by_kind[CUPTI_ACTIVITY_KIND_GRAPH_TRACE & 63];
      det::kernels_before = by_kind[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL & 63];
    }
    if (det::off_ms < 0) return nullptr;
    usleep(static_cast<useconds_t>(det::off_ms) * 1000);
    std::lock_guard<std::mutex> g(det::mu);
    int64_t t0 = det::now_ns();
    attach();
    det::attaching.add(t0);
  }
}

static void report_windows() {
  std::lock_guard<std::mutex> g(mu);
  fprintf(stderr, "floor_inject: %zu windows closed; graph,kernel records per window:", det::windows.size());
  for (size_t i = 0; i < det::windows.size(); i++)
    if (i < 12 || i + 4 >= det::windows.size())
      fprintf(stderr, " %llu,%llu", (unsigned long long)det::windows[i].first,
              (unsigned long long)det::windows[i].second);
  size_t n = det::windows.size();
  fprintf(stderr, "\nfloor_inject: detach (flush + cuptiFinalize, in the workload's thread) mean %.3f ms, max %.3f ms;"
          " attach mean %.3f ms, max %.3f ms\n", n ? det::detaching.total_ns / 1e6 / n : 0.0,
          det::detaching.max_ns / 1e6, n > 1 ? det::attaching.total_ns / 1e6 / (n - 1) : 0.0,
          det::attaching.max_ns / 1e6);
}

static bool on(const char* name) {
  const char* v = getenv(name);
  return v && atoi(v) > 0;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (on("GS_FLOOR_NOOP")) return 1;
  const char* k = getenv("GS_FLOOR_KINDS");
  if (k) cfg::kinds = k;
  cfg::pinned = on("GS_FLOOR_PINNED");
  const char* dev = getenv("GS_FLOOR_DEVBUF_KB");
  if (dev && atoi(dev) > 0) cfg::devbuf = static_cast<size_t>(atoi(dev)) * 1024;
  cfg::activity = !on("GS_FLOOR_NO_ACTIVITY");
  bool report = on("GS_FLOOR_REPORT");
  reading = cfg::activity && report;
  const char* dm = getenv("GS_FLOOR_DETACH_MS");
  const char* cy = getenv("GS_FLOOR_CYCLE_MS");
  if (cy && strchr(cy, ',') && atoi(cy) > 0 && atoi(strchr(cy, ',') + 1) > 0) {
    det::on_ms = atoi(cy);
    det::off_ms = atoi(strchr(cy, ',') + 1);
  } else if (dm && atoi(dm) > 0) {
    det::on_ms = atoi(dm);
  }
  det::at_sync = on("GS_FLOOR_DETACH_AT_SYNC");
  graph_events = on("GS_FLOOR_GRAPH_EVENTS") && ev::load();
  const char* cb = getenv("GS_FLOOR_CALLBACKS");
  bool any = cb && *cb && strcmp(cb, "none") != 0;
  cfg::rt = any && strcmp(cb, "driver") != 0;
  cfg::drv = (any && strcmp(cb, "runtime") != 0) || det::on_ms > 0;
  cfg::graph_launch = on("GS_FLOOR_GRAPH_LAUNCH") || graph_events || det::on_ms > 0;
  cfg::kernel_launch = on("GS_FLOOR_KERNEL_LAUNCH");
  cfg::subscribe = (cb && *cb) || graph_events || det::on_ms > 0;
  attach();
  if (reading) atexit(report_records);
  if (det::on_ms > 0) {
    pthread_t th;
    if (pthread_create(&th, nullptr, cycler, nullptr) == 0) pthread_detach(th);
    if (report) atexit(report_windows);
  }
  if (graph_events) {
    pthread_t th;
    if (pthread_create(&th, nullptr, ev::poll, nullptr) == 0) pthread_detach(th);
    if (report) atexit(ev::report);
  }
  const char* off = getenv("GS_FLOOR_GRAPH_OFF_MS");
  if (off && atoi(off) > 0) {
    pthread_t th;
    if (pthread_create(&th, nullptr, graph_off, reinterpret_cast<void*>(static_cast<uintptr_t>(atoi(off)))) == 0)
      pthread_detach(th);
  }
  const char* t = getenv("GS_FLOOR_TOGGLE_MS");
  if (t && atoi(t) > 0) {
    pthread_t th;
    if (pthread_create(&th, nullptr, toggle, reinterpret_cast<void*>(static_cast<uintptr_t>(atoi(t)))) == 0)
      pthread_detach(th);
  }
  return 1;
}
