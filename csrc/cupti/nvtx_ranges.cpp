// The NVTX collection's life (nvtx_ranges.h): started once from the
// environment, never unloaded once started, flushed at exit within a
// bounded wait, stopped in a fork child.
#include "nvtx_ranges.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <new>

#include "log.h"
#include "nvtx_gpu.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

namespace {

unsigned flush_ms_from_env() {
  // The library's flush period (the CUPTI collector's variable; graphsignal-run
  // checks its range before the workload starts).
  const char* s = getenv("GRAPHSIGNAL_CUPTI_FLUSH_MS");
  if (!s || !*s) return 1000;
  char* end = nullptr;
  unsigned long v = strtoul(s, &end, 10);
  return end && !*end && v >= 10 && v <= 60000 ? static_cast<unsigned>(v) : 1000;
}

}  // namespace

std::atomic<Ranges*> Ranges::instance_{nullptr};
std::atomic<bool> Ranges::forked_{false};

Ranges::Ranges(graphsignal_ring_header* ring, bool gpu)
    : pid_(getpid()),
      gpu_wanted_(gpu),
      domains_(&problems_),
      paths_(&problems_),
      stacks_(&paths_, &problems_),
      flusher_(ring, &domains_, &paths_, &stacks_, &problems_, collector_pending) {}

Ranges* Ranges::start() {
  static std::mutex start_mu;
  static bool tried = false;
  std::lock_guard<std::mutex> g(start_mu);
  if (tried) return get();
  tried = true;
  const char* mode = getenv("GRAPHSIGNAL_NVTX");
  bool gpu = false;
  if (mode && *mode) {
    if (!strcasecmp(mode, "0") || !strcasecmp(mode, "off") || !strcasecmp(mode, "false") ||
        !strcasecmp(mode, "no")) {
      log(Level::kDebug, "GRAPHSIGNAL_NVTX=%s: NVTX ranges are not collected", mode);
      return nullptr;
    }
    gpu = !strcasecmp(mode, "gpu");
    if (!gpu && strcasecmp(mode, "1") && strcasecmp(mode, "on") && strcasecmp(mode, "true") &&
        strcasecmp(mode, "yes"))
      log(Level::kWarning, "GRAPHSIGNAL_NVTX=%s is not on, off or gpu; using on", mode);
  }
  graphsignal_ring_header* ring = Flusher::open_ring();
  if (!ring) return nullptr;
  Ranges* r = new (std::nothrow) Ranges(ring, gpu);
  if (!r || !r->ok()) {
    log(Level::kWarning, "out of memory; NVTX ranges are not collected");
    graphsignal_ring_close(ring);
    return nullptr;  // what was allocated stays: this runs once
  }
  // From now on a thread, an atexit handler and thread-exit destructors
  // point into this library: it must never be unloaded (NVTX unloads an
  // injection library whose InitializeInjectionNvtx2 fails, and CUDA may
  // not hold it in a program without CUDA).
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&Ranges::at_exit), &self) && self.dli_fname)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  bind(&r->paths_, on_collector_finished);  // GPU time per range goes to these paths (nvtx_gpu.h)
  instance_.store(r, std::memory_order_release);
  if (!r->flusher_.start_thread(flush_ms_from_env()))
    log(Level::kWarning, "no NVTX flush thread; NVTX ranges are sent at exit only");
  atexit(at_exit);
  pthread_atfork(nullptr, nullptr, on_fork_child);
  log(Level::kInfo, "collecting NVTX ranges%s", gpu ? " and the GPU time of the kernels launched inside" : "");
  return r;
}

void Ranges::first_range() {
  if (!first_range_.exchange(true)) note_first_range();  // launch callbacks on from now (nvtx_gpu.h)
}

void Ranges::on_fork_child() {
  forked_.store(true, std::memory_order_relaxed);
  bind(nullptr, nullptr);
  if (Ranges* r = instance_.load(std::memory_order_acquire)) r->stacks_.on_fork_child();
}

void Ranges::on_collector_finished() {
  if (Ranges* r = get()) r->flusher_.collector_done();
}

void Ranges::at_exit() {
  Ranges* r = instance_.load(std::memory_order_acquire);
  if (!r || forked_.load(std::memory_order_relaxed) || getpid() != r->pid_) return;
  r->flusher_.stop_thread(std::chrono::seconds(2));
  r->flusher_.flush(true);
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
