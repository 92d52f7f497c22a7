// The graph-trace toggle spike: what switching CUPTI's graph tracing
// (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) and kernel tracing
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) off and on at run time does to
// CUDA graph launches, and whether it reaches graphs instantiated before the
// switch. Run by scripts/bench_graph_toggle.py (which compiles it with nvcc
// against libcupti, runs it interleaved, and reads the findings off the
// rows); one JSON line per (phase, graph) on stdout.
//
//   graph_trace_toggle --mode bare                  no CUPTI at all: the per-launch cost to subtract
//   graph_trace_toggle --mode cupti [--flush-on-toggle] [--launches N]
//   graph_trace_toggle --stress SECONDS [--toggle-ms N] [--node] [--toggle-kernels]
//
// --stress: what a profiler's own thread does to a running workload. A
// second thread switches GRAPH_TRACE off and on every --toggle-ms (kernel
// tracing on throughout; --node starts with GRAPH_TRACE off; with
// --toggle-kernels it switches CONCURRENT_KERNEL instead, GRAPH_TRACE on)
// while the main thread launches graphs, instantiates new ones (and updates
// and destroys old ones) and runs eager kernels, with callbacks on the
// graph and kernel launch entry points (counted: does a runtime launch
// reach the driver's callback?). One JSON line at the end ("event":
// "stress") when the process survives.
//
// In cupti mode the program is its own CUPTI client, set up before CUDA
// initializes (as an injection library is): buffer callbacks registered,
// a subscriber for the driver's graph launch entry points (cuGraphLaunch,
// cuGraphLaunch_ptsz: the callback only keeps the launch's correlation id)
// enabled or not per phase. Six executable graphs are made at three points:
//
//   A1, A128   instantiated while nothing is traced (CUPTI initialized only)
//   B1, B128   instantiated while kernels and graphs are traced (graphsignal's default start)
//   C1, C128   instantiated while kernels but not graphs are traced (node mode's start)
//
// (1 and 128 empty one-block kernels). Then phases, each switching the kinds
// named by its state (K kernels, G graphs, CB launch callbacks) and launching
// every graph and a run of eager kernels; at the end of a phase the device is
// synchronized and CUPTI flushed (forced), so the records counted in a phase
// are the phase's own. A row: launches, mean µs inside cudaGraphLaunch
// (api_us), wall µs per launch with a sync every 64 (wall_us), and the
// records the phase produced for that graph: GRAPH_TRACE records
// (graph_records), kernel records of its nodes (node_records), records whose
// correlation id is one a launch callback saw (corr_matched). Eager kernel
// rows count kernel records without a graph. The cost of the switch calls
// themselves is a row of its own (event "toggle").
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "records.h"  // csrc/cupti: the record structs of whichever CUPTI headers this is built with

using graphsignal::cupti::GraphRecord;
using graphsignal::cupti::KernelRecord;

__global__ void gs_toggle_empty() {}

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
      exit(2);                                                                             \
    }                                                                                      \
  } while (0)
#define CP(x)                                                                              \
  do {                                                                                     \
    CUptiResult r_ = (x);                                                                  \
    if (r_ != CUPTI_SUCCESS) {                                                             \
      const char* s_ = "?";                                                                \
      cuptiGetResultString(r_, &s_);                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                      \
      exit(3);                                                                             \
    }                                                                                      \
  } while (0)

using Clock = std::chrono::steady_clock;

static double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

namespace {

// What the buffer callback counted, per CUPTI graph id (records may carry
// the executable's id or the source graph's: both are mapped to the graph).
struct Counts {
  uint64_t graph_records = 0, node_records = 0, corr_matched = 0, zero_time = 0;
};
std::mutex mu;
std::map<uint32_t, Counts> by_id;
uint64_t eager_records = 0;
uint64_t other_records = 0;
std::set<uint32_t> launch_corr;  // correlation ids the launch callbacks saw in this phase
std::atomic<uint64_t> callbacks_seen{0};
std::atomic<uint64_t> callbacks_zero_corr{0};
std::atomic<uint64_t> kernel_callbacks{0};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> g(mu);
  CUpti_Activity* r = nullptr;
  while (valid && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
      auto* gr = reinterpret_cast<GraphRecord*>(r);
      Counts& c = by_id[gr->graphId];
      c.graph_records++;
      if (launch_corr.count(gr->correlationId)) c.corr_matched++;
      if (!gr->start && !gr->end) c.zero_time++;
    } else if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<KernelRecord*>(r);
      if (k->graphId) {
        Counts& c = by_id[k->graphId];
        c.node_records++;
        if (launch_corr.count(k->correlationId)) c.corr_matched++;
      } else {
        eager_records++;
      }
    } else {
      other_records++;
    }
  }
  free(buffer);
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
    if (static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_EXIT)
      kernel_callbacks.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch && cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_EXIT) return;
  callbacks_seen.fetch_add(1, std::memory_order_relaxed);
  if (!cb->correlationId) callbacks_zero_corr.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> g(mu);
  launch_corr.insert(cb->correlationId);
}

struct Graph {
  std::string name;
  int nodes;
  std::string instantiated_in;  // the state it was instantiated in
  cudaGraphExec_t exec;
  uint32_t exec_id = 0, graph_id = 0;
};

struct State {
  bool kernel, graph, callbacks;
};

bool cupti_mode = false;
bool flush_on_toggle = false;
CUpti_SubscriberHandle subscriber = nullptr;
State current = {false, false, false};

const char* state_name(const State& s) {
  static char buf[32];
  snprintf(buf, sizeof buf, "%s%s%s", s.kernel ? "K" : "", s.graph ? "G" : "", s.callbacks ? "+cb" : "");
  if (!buf[0] || buf[0] == '+') {
    memmove(buf + 4, buf, strlen(buf) + 1);
    memcpy(buf, "none", 4);
  }
  return buf;
}

double timed_call(CUptiResult (*fn)(CUpti_ActivityKind), CUpti_ActivityKind kind) {
  auto a = Clock::now();
  CP(fn(kind));
  return 1e6 * seconds(a, Clock::now());
}

// Switches to `s`; prints what each switch call cost.
void set_state(const State& s, const char* phase) {
  if (!cupti_mode) return;
  double k_us = 0, g_us = 0, f_us = 0, cb_us = 0;
  if (s.graph != current.graph)
    g_us = timed_call(s.graph ? cuptiActivityEnable : cuptiActivityDisable, CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  if (s.kernel != current.kernel)
    k_us = timed_call(s.kernel ? cuptiActivityEnable : cuptiActivityDisable, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (s.callbacks != current.callbacks) {
    auto a = Clock::now();
    CP(cuptiEnableCallback(s.callbacks ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch));
    CP(cuptiEnableCallback(s.callbacks ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz));
    cb_us = 1e6 * seconds(a, Clock::now());
  }
  if (flush_on_toggle && ((s.graph != current.graph && !s.graph) || (s.kernel != current.kernel && !s.kernel))) {
    auto a = Clock::now();
    CP(cuptiActivityFlushAll(0));
    f_us = 1e6 * seconds(a, Clock::now());
  }
  printf("{\"event\": \"toggle\", \"phase\": \"%s\", \"from\": \"%s\", ", phase, state_name(current));
  printf("\"to\": \"%s\", \"kernel_us\": %.2f, \"graph_us\": %.2f, \"callbacks_us\": %.2f, \"flush_us\": %.2f}\n",
         state_name(s), k_us, g_us, cb_us, f_us);
  current = s;
}

Graph make_graph(cudaStream_t s, const char* name, int kernels) {
  Graph g;
  g.name = name;
  g.nodes = kernels;
  g.instantiated_in = cupti_mode ? state_name(current) : "bare";
  cudaGraph_t graph;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kernels; i++) gs_toggle_empty<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&g.exec, graph, 0));
  if (cupti_mode) {
    CP(cuptiGetGraphId(graph, &g.graph_id));
    // newer than the oldest CUPTI 12 headers: looked up in the loaded libcupti
    typedef CUptiResult (*ExecIdFn)(CUgraphExec, uint32_t*);
    if (auto fn = reinterpret_cast<ExecIdFn>(dlsym(RTLD_DEFAULT, "cuptiGetGraphExecId"))) CP(fn(g.exec, &g.exec_id));
  }
  CK(cudaGraphDestroy(graph));
  CK(cudaGraphUpload(g.exec, s));
  CK(cudaStreamSynchronize(s));
  return g;
}

// Launches n times: (mean µs inside the call, wall µs per launch with a sync every 64).
void launch(const Graph& g, cudaStream_t s, int n, double* api_us, double* wall_us) {
  double inside = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < n; i++) {
    auto a = Clock::now();
    CK(cudaGraphLaunch(g.exec, s));
    inside += seconds(a, Clock::now());
    if ((i + 1) % 64 == 0) CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamSynchronize(s));
  *wall_us = 1e6 * seconds(t0, Clock::now()) / n;
  *api_us = 1e6 * inside / n;
}

void eager(cudaStream_t s, int n, double* api_us) {
  double inside = 0;
  for (int i = 0; i < n; i++) {
    auto a = Clock::now();
    gs_toggle_empty<<<1, 1, 0, s>>>();
    inside += seconds(a, Clock::now());
    if ((i + 1) % 1024 == 0) CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamSynchronize(s));
  *api_us = 1e6 * inside / n;
}

void flush_phase() {
  if (!cupti_mode) return;
  CK(cudaDeviceSynchronize());
  CP(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  usleep(20000);
  CP(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
}

void reset_counts() {
  std::lock_guard<std::mutex> g(mu);
  by_id.clear();
  eager_records = other_records = 0;
  launch_corr.clear();
  callbacks_seen = 0;
  callbacks_zero_corr = 0;
}

void run_phase(const char* phase, std::vector<Graph>& graphs, cudaStream_t s, int launches, int eager_n) {
  struct Row {
    const Graph* g;
    int n;
    double api_us, wall_us;
  };
  std::vector<Row> rows;
  flush_phase();
  reset_counts();
  for (const Graph& g : graphs) {
    int n = g.nodes > 1 ? launches / 8 : launches;
    Row r{&g, n, 0, 0};
    launch(g, s, n / 10 + 1, &r.api_us, &r.wall_us);  // warm-up, counted in the records too
    r.n += n / 10 + 1;
    double api = 0, wall = 0;
    launch(g, s, n, &api, &wall);
    r.api_us = api, r.wall_us = wall;
    rows.push_back(r);
  }
  double eager_us = 0;
  eager(s, eager_n, &eager_us);
  flush_phase();
  std::lock_guard<std::mutex> lk(mu);
  for (const Row& r : rows) {
    Counts c;
    for (uint32_t id : {r.g->exec_id, r.g->graph_id}) {
      if (!id) continue;
      auto it = by_id.find(id);
      if (it == by_id.end()) continue;
      c.graph_records += it->second.graph_records;
      c.node_records += it->second.node_records;
      c.corr_matched += it->second.corr_matched;
      c.zero_time += it->second.zero_time;
      if (r.g->exec_id == r.g->graph_id) break;
    }
    printf("{\"event\": \"launches\", \"mode\": \"%s\", \"flush_on_toggle\": %d, \"phase\": \"%s\", \"state\": \"%s\", "
           "\"graph\": \"%s\", \"nodes\": %d, \"instantiated_in\": \"%s\", \"launches\": %d, \"api_us\": %.4f, "
           "\"wall_us\": %.4f, \"graph_records\": %llu, \"node_records\": %llu, \"corr_matched\": %llu, "
           "\"zero_time_records\": %llu}\n",
           cupti_mode ? "cupti" : "bare", flush_on_toggle ? 1 : 0, phase, cupti_mode ? state_name(current) : "bare",
           r.g->name.c_str(), r.g->nodes, r.g->instantiated_in.c_str(), r.n, r.api_us, r.wall_us,
           (unsigned long long)c.graph_records, (unsigned long long)c.node_records,
           (unsigned long long)c.corr_matched, (unsigned long long)c.zero_time);
  }
  printf("{\"event\": \"eager\", \"mode\": \"%s\", \"flush_on_toggle\": %d, \"phase\": \"%s\", \"state\": \"%s\", "
         "\"kernels\": %d, \"api_us\": %.4f, \"kernel_records\": %llu, \"other_records\": %llu, "
         "\"launch_callbacks\": %llu, \"callbacks_with_zero_corr\": %llu}\n",
         cupti_mode ? "cupti" : "bare", flush_on_toggle ? 1 : 0, phase, cupti_mode ? state_name(current) : "bare",
         eager_n, eager_us, (unsigned long long)eager_records, (unsigned long long)other_records,
         (unsigned long long)callbacks_seen.load(), (unsigned long long)callbacks_zero_corr.load());
  fflush(stdout);
}

// Instantiates a graph of `kernels` empty kernels (no CUPTI ids asked).
cudaGraphExec_t capture_exec(cudaStream_t s, int kernels, cudaGraph_t* keep) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kernels; i++) gs_toggle_empty<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  if (keep) *keep = graph;
  else CK(cudaGraphDestroy(graph));
  return exec;
}

int stress(double secs, int toggle_ms, bool node, bool toggle_kernels) {
  CP(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  if (!node) CP(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE));
  for (CUpti_CallbackId id : {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz})
    CP(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id));
  const CUpti_ActivityKind toggled = toggle_kernels ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL : CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> toggles{0};
  std::thread t([&] {
    bool on = toggle_kernels || !node;
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(toggle_ms));
      on = !on;
      if (on) CP(cuptiActivityEnable(toggled));
      else CP(cuptiActivityDisable(toggled));
      toggles++;
      if (toggles % 8 == 0) CP(cuptiActivityFlushAll(0));
    }
  });
  uint64_t launches = 0, instantiated = 0, updated = 0, eager_n = 0;
  cudaGraph_t g_keep;
  cudaGraphExec_t fixed = capture_exec(s, 16, nullptr), moving = capture_exec(s, 32, &g_keep);
  auto t0 = Clock::now();
  for (int it = 0; seconds(t0, Clock::now()) < secs; it++) {
    for (int i = 0; i < 50; i++) {
      CK(cudaGraphLaunch(fixed, s));
      CK(cudaGraphLaunch(moving, s));
      launches += 2;
    }
    for (int i = 0; i < 20; i++) gs_toggle_empty<<<1, 1, 0, s>>>();
    eager_n += 20;
    CK(cudaStreamSynchronize(s));
    if (it % 4 == 1) {
      // a new capture of the same shape: updated in place (llama.cpp's way)
      cudaGraph_t g2;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < 32; i++) gs_toggle_empty<<<1, 1, 0, s>>>();
      CK(cudaStreamEndCapture(s, &g2));
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(moving, g2, &info) != cudaSuccess) {
        cudaGetLastError();
        CK(cudaGraphExecDestroy(moving));
        CK(cudaGraphInstantiate(&moving, g2, 0));
        instantiated++;
      } else {
        updated++;
      }
      CK(cudaGraphDestroy(g_keep));
      g_keep = g2;
    } else if (it % 4 == 3) {
      // a different shape: destroyed and instantiated anew
      CK(cudaGraphExecDestroy(moving));
      CK(cudaGraphDestroy(g_keep));
      moving = capture_exec(s, 24 + it % 16, &g_keep);
      instantiated++;
    }
  }
  stop = true;
  t.join();
  CK(cudaDeviceSynchronize());
  CP(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  printf("{\"event\": \"stress\", \"node\": %d, \"toggled\": \"%s\", \"toggle_ms\": %d, \"seconds\": %.1f, "
         "\"launches\": %llu, \"instantiated\": %llu, \"updated\": %llu, \"toggles\": %llu, "
         "\"launch_callbacks\": %llu, \"eager_kernels\": %llu, \"kernel_launch_callbacks\": %llu}\n",
         node ? 1 : 0, toggle_kernels ? "kernel" : "graph", toggle_ms, secs, (unsigned long long)launches,
         (unsigned long long)instantiated, (unsigned long long)updated, (unsigned long long)toggles.load(),
         (unsigned long long)callbacks_seen.load(), (unsigned long long)eager_n,
         (unsigned long long)kernel_callbacks.load());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int launches = 4000, eager_n = 4000, toggle_ms = 5;
  double stress_s = 0;
  bool node = false, toggle_kernels = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mode") && i + 1 < argc) cupti_mode = !strcmp(argv[++i], "cupti");
    else if (!strcmp(argv[i], "--flush-on-toggle")) flush_on_toggle = true;
    else if (!strcmp(argv[i], "--launches") && i + 1 < argc) launches = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--eager") && i + 1 < argc) eager_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--stress") && i + 1 < argc) stress_s = atof(argv[++i]), cupti_mode = true;
    else if (!strcmp(argv[i], "--toggle-ms") && i + 1 < argc) toggle_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--node")) node = true;
    else if (!strcmp(argv[i], "--toggle-kernels")) toggle_kernels = true;
  }
  if (cupti_mode) {
    // before CUDA initializes, as an injection library sets up
    CP(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CP(cuptiSubscribe(&subscriber, on_api, nullptr));
  }
  if (stress_s > 0) return stress(stress_s, toggle_ms, node, toggle_kernels);
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Graph> graphs;
  graphs.push_back(make_graph(s, "A1", 1));
  graphs.push_back(make_graph(s, "A128", 128));
  if (!cupti_mode) {
    run_phase("bare", graphs, s, launches, eager_n);
    return 0;
  }
  // Phases: (name, K, G, CB). B graphs are made at the start of "KG", C
  // graphs at the start of "K+cb".
  struct Phase {
    const char* name;
    State state;
    const char* make;  // graphs instantiated as the phase starts
  };
  const Phase phases[] = {
      {"p0_nothing", {false, false, false}, nullptr},
      {"p1_kernel_graph", {true, true, false}, "B"},
      {"p2_kernel_graph_cb", {true, true, true}, nullptr},
      {"p3_kernel_cb_graph_off", {true, false, true}, "C"},
      {"p4_kernel_graph_cb_again", {true, true, true}, nullptr},
      {"p5_cb_only_after_off", {false, false, true}, nullptr},
      {"p6_graph_cb", {false, true, true}, nullptr},
      {"p7_nothing_after_all", {false, false, false}, nullptr},
      {"p8_kernel_cb_graph_off_again", {true, false, true}, nullptr},
      {"p9_kernel_graph_cb_last", {true, true, true}, nullptr},
  };
  for (const Phase& p : phases) {
    set_state(p.state, p.name);
    if (p.make) {
      std::string one = std::string(p.make) + "1", many = std::string(p.make) + "128";
      graphs.push_back(make_graph(s, one.c_str(), 1));
      graphs.push_back(make_graph(s, many.c_str(), 128));
    }
    run_phase(p.name, graphs, s, launches, eager_n);
  }
  set_state({false, false, false}, "end");
  flush_phase();
  return 0;
}
