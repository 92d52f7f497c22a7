// GPU time per NVTX range without a GPU: the injection library with the
// stand-in libcupti (fake_cupti.cpp, linked here, so its test hooks are
// callable), NVTX calls through NVTX_INJECTION64_PATH, and launches and
// kernel records carrying correlation ids the way CUDA and CUPTI make them.
// tests/integration/test_nvtx_injection.py checks what reaches the payload:
//
//   outer:        runtime launch (corr 101, its driver launch 102 inside; the
//                 record carries 101), 1000 ns; a driver launch (110), 2000 ns
//   outer/inner:  runtime launch (120), 4000 ns; a graph launch (130): its
//                 GRAPH_TRACE record 8000 ns (its kernel record, graphId 5,
//                 500 ns, is the graph's and not counted again)
//   thread-range: on another thread, a driver launch (150), 32000 ns
//   none:         a launch after the ranges closed (140), 16000 ns
//
//   nvtx_gpu_driver LIB
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>

#include <thread>

extern "C" {
void fake_cupti_launch(int runtime, uint32_t cbid, uint32_t corr, uint32_t driver_cbid, uint32_t driver_corr);
void fake_cupti_kernel_corr(const char* name, uint32_t corr, uint64_t ns, uint32_t graph_id);
void fake_cupti_graph_corr(uint32_t graph_id, uint32_t corr, uint64_t ns);
}

enum : uint32_t { kCudaLaunchKernel = 211, kCudaGraphLaunch = 311, kCuLaunchKernel = 307, kCuGraphLaunch = 514 };

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  // what CUDA does in cuInit when CUDA_INJECTION64_PATH names the library
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
  if (!init || !init()) return 2;

  nvtxRangePushA("outer");  // the first range: launch callbacks go on (GRAPHSIGNAL_NVTX=gpu)
  fake_cupti_launch(1, kCudaLaunchKernel, 101, kCuLaunchKernel, 102);
  fake_cupti_launch(0, kCuLaunchKernel, 110, 0, 0);
  nvtxRangePushA("inner");
  fake_cupti_launch(1, kCudaLaunchKernel, 120, kCuLaunchKernel, 121);
  fake_cupti_launch(1, kCudaGraphLaunch, 130, kCuGraphLaunch, 131);
  nvtxRangePop();
  nvtxRangePop();
  fake_cupti_launch(1, kCudaLaunchKernel, 140, kCuLaunchKernel, 141);
  std::thread other([] {
    nvtxRangePushA("thread-range");
    fake_cupti_launch(0, kCuLaunchKernel, 150, 0, 0);
    nvtxRangePop();
  });
  other.join();

  // the activity records arrive later, as CUPTI returns its buffers
  fake_cupti_kernel_corr("k_outer_runtime", 101, 1000, 0);
  fake_cupti_kernel_corr("k_outer_driver", 110, 2000, 0);
  fake_cupti_kernel_corr("k_inner", 120, 4000, 0);
  fake_cupti_graph_corr(5, 130, 8000);
  fake_cupti_kernel_corr("k_graph_node", 130, 500, 5);
  fake_cupti_kernel_corr("k_outside", 140, 16000, 0);
  fake_cupti_kernel_corr("k_thread", 150, 32000, 0);
  printf("{\"done\": true}\n");
  return 0;  // the collector's exit flush hands the records over
}
