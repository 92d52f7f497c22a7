// The library's exported surface: the one entry point CUDA calls when
// CUDA_INJECTION64_PATH names this library. Everything else is hidden
// (-fvisibility=hidden).
#include <atomic>

#include "collector.h"

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  // CUDA calls this once per process from cuInit; guard anyway, since a
  // second collector would register CUPTI's callbacks twice.
  static std::atomic<bool> done{false};
  if (!done.exchange(true)) graphsignal::cupti::Collector::initialize();
  return 1;  // never fail cuInit: without profiling the workload still runs
}

// For probe_cuda.h's reader thread (found with dlsym on this library): its
// own copies, on its own stream, stay out of the workload's cuda_memcpy_*.
extern "C" __attribute__((visibility("default"))) int graphsignal_cupti_ignore_stream(void* stream) {
  return graphsignal::cupti::Collector::ignore_stream(stream) ? 1 : 0;
}
