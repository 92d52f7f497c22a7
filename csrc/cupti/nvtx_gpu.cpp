// GPU time per NVTX range (nvtx_gpu.h): launch callbacks store (correlation
// id, path), kernel records find it; a stale or missing pair is counted as
// unmatched, never attributed to the wrong range.
#include "nvtx_gpu.h"

#include <stddef.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>

#include "cupti_call.h"
#include "log.h"
#include "nvtx_paths.h"
#include "nvtx_stacks.h"
#include "records.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

// The correlation id both records carry (not among records.h's fields:
// asserted here, as records.h asserts its own).
static_assert(offsetof(KernelRecord, correlationId) == 92, "kernel correlationId");
static_assert(offsetof(GraphRecord, correlationId) == 4, "graph trace correlationId");

namespace {

constexpr uint32_t kTableBits = 20;  // launches remembered (8 MiB, made when attribution starts)
constexpr uint32_t kMaxCbid = 1024;

// Launch entry points (cupti_runtime_cbid.h, cupti_driver_cbid.h; ids are
// stable across CUPTI versions, and one a CUPTI does not know is skipped).
const uint16_t kRuntimeLaunches[] = {
    13,   // cudaLaunch_v3020
    211,  // cudaLaunchKernel_v7000
    213,  // cudaLaunch_ptsz_v7000
    214,  // cudaLaunchKernel_ptsz_v7000
    269,  // cudaLaunchCooperativeKernel_v9000
    270,  // cudaLaunchCooperativeKernel_ptsz_v9000
    272,  // cudaLaunchCooperativeKernelMultiDevice_v9000
    311,  // cudaGraphLaunch_v10000
    312,  // cudaGraphLaunch_ptsz_v10000
    430,  // cudaLaunchKernelExC_v11060
    431,  // cudaLaunchKernelExC_ptsz_v11060
    505,  // __cudaLaunchKernel_v13000
    506,  // __cudaLaunchKernel_ptsz_v13000
};
const uint16_t kDriverLaunches[] = {
    115,  // cuLaunch
    116,  // cuLaunchGrid
    117,  // cuLaunchGridAsync
    307,  // cuLaunchKernel
    442,  // cuLaunchKernel_ptsz
    477,  // cuLaunchCooperativeKernel
    478,  // cuLaunchCooperativeKernel_ptsz
    480,  // cuLaunchCooperativeKernelMultiDevice
    514,  // cuGraphLaunch
    515,  // cuGraphLaunch_ptsz
    652,  // cuLaunchKernelEx
    653,  // cuLaunchKernelEx_ptsz
};

struct State {
  std::mutex mu;  // attach, enable, finish: rare
  CUpti_SubscriberHandle subscriber = nullptr;
  bool attached = false;
  bool first_range = false;
  std::atomic<bool> enabled{false};  // launch callbacks on: on_api and on_record work
  std::atomic<bool> finished{false};
  bool graph_mode = true;  // read by on_record after `enabled` is set
  // [0] runtime, [1] driver: cbid -> launch
  bool launch[2][kMaxCbid] = {};
  // correlation id & mask -> correlation id << 32 | path
  std::atomic<uint64_t>* table = nullptr;
  uint64_t attributed = 0, unmatched = 0;  // kernels (on_record's thread only)
  // bind()'s
  std::atomic<PathTable*> paths{nullptr};
  std::atomic<void (*)()> finished_hook{nullptr};
};

State& state() {
  static State* s = new State();  // never freed: callbacks may come during exit
  return *s;
}

// Under s.mu: both the collector's subscriber and a first range are there.
void enable_locked(State& s) {
  if (s.enabled.load(std::memory_order_relaxed) || !s.attached || !s.subscriber || !s.first_range) return;
  s.table = static_cast<std::atomic<uint64_t>*>(calloc(1u << kTableBits, sizeof(std::atomic<uint64_t>)));
  if (!s.table) {
    log(Level::kWarning, "out of memory; GPU time per NVTX range is not measured");
    return;
  }
  int on = 0;
  for (int d = 0; d < 2; d++) {
    const uint16_t* ids = d == 0 ? kRuntimeLaunches : kDriverLaunches;
    size_t n = d == 0 ? sizeof kRuntimeLaunches / sizeof *ids : sizeof kDriverLaunches / sizeof *ids;
    CUpti_CallbackDomain domain = d == 0 ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    for (size_t i = 0; i < n; i++) {
      // Not through GS_CUPTI_CALL: an id this CUPTI does not know is expected.
      if (cuptiEnableCallback(1, s.subscriber, domain, ids[i]) != CUPTI_SUCCESS) continue;
      s.launch[d][ids[i]] = true;
      on++;
    }
  }
  if (!on) {
    log(Level::kWarning, "CUPTI refused the launch callbacks; GPU time per NVTX range is not measured");
    return;
  }
  s.enabled.store(true, std::memory_order_release);
  log(Level::kInfo, "GPU time per NVTX range: %d launch entry points hooked", on);
}

}  // namespace

void bind(PathTable* paths, void (*finished)()) {
  State& s = state();
  s.paths.store(paths, std::memory_order_release);
  s.finished_hook.store(finished, std::memory_order_release);
}

void attach(CUpti_SubscriberHandle sub, bool graph_mode) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.subscriber = sub;
  s.graph_mode = graph_mode;
  s.attached = true;
  enable_locked(s);
}

bool collector_pending() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  return s.attached && !s.finished.load(std::memory_order_relaxed);
}

void collector_finished() {
  State& s = state();
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.attached || s.finished.exchange(true)) return;
  }
  if (s.enabled.load(std::memory_order_acquire))
    log(Level::kDebug, "exit: %llu kernels attributed to NVTX ranges, %llu launched outside any (or not found)",
        static_cast<unsigned long long>(s.attributed), static_cast<unsigned long long>(s.unmatched));
  if (void (*hook)() = s.finished_hook.load(std::memory_order_acquire)) hook();
}

void note_first_range() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.first_range = true;
  enable_locked(s);
}

void on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  State& s = state();
  if (!s.enabled.load(std::memory_order_acquire) || cbid >= kMaxCbid) return;
  if (!s.launch[domain == CUPTI_CB_DOMAIN_DRIVER_API ? 1 : 0][cbid]) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  uint32_t path = Stacks::current_path();
  if (!path) return;
  uint32_t corr = cb->correlationId;
  s.table[corr & ((1u << kTableBits) - 1)].store(static_cast<uint64_t>(corr) << 32 | path,
                                                 std::memory_order_relaxed);
}

void on_record(const CUpti_Activity* record) {
  State& s = state();
  if (!s.enabled.load(std::memory_order_acquire) || !record) return;
  uint32_t corr;
  uint64_t start, end;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const KernelRecord*>(record);
      if (s.graph_mode && k->graphId) return;  // the graph's GRAPH_TRACE record carries its time
      corr = k->correlationId, start = k->start, end = k->end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
      const auto* gr = reinterpret_cast<const GraphRecord*>(record);
      corr = gr->correlationId, start = gr->start, end = gr->end;
      break;
    }
    default:
      return;
  }
  uint64_t v = s.table[corr & ((1u << kTableBits) - 1)].load(std::memory_order_relaxed);
  PathTable* paths = s.paths.load(std::memory_order_acquire);
  if (!paths || v >> 32 != corr || !static_cast<uint32_t>(v)) {
    s.unmatched++;
    return;
  }
  s.attributed++;
  paths->add_gpu(static_cast<uint32_t>(v), end > start ? end - start : 0);
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
