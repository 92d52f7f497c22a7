// In-kernel probes on known values. probe_kernel BLOCKS REPLAYS SPIN_US
//  - kp_blocks_value: one kernel of BLOCKS blocks; block b records b + 1
//  - kp_graph_value: the same kernel captured in a CUDA graph, replayed REPLAYS times
//  - kp_spin_nanoseconds: 8 blocks each spin SPIN_US microseconds on the global
//    timer, timed with graphsignal_gtimer (the SPEC.md example's shape)
#include <graphsignal/probe_cuda.h>

#include <cstdio>
#include <cstdlib>

static graphsignal_probe_entry* g_blocks;
static graphsignal_probe_entry* g_graph;
static graphsignal_probe_entry* g_tile_ns;

__global__ void record_block(graphsignal_instrument_data* d) {
  if (threadIdx.x == 0) GRAPHSIGNAL_RECORD(d, blockIdx.x + 1);
}

__global__ void spin(unsigned long long ns, graphsignal_instrument_data* tile_ns) {
  unsigned long long t0 = graphsignal_gtimer();
  while (graphsignal_gtimer() - t0 < ns) {
  }
  if (threadIdx.x == 0) {
    GRAPHSIGNAL_RECORD(tile_ns, graphsignal_gtimer() - t0);
  }
}

#define CHECK(x)                                                        \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    if (e_ != cudaSuccess) {                                            \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));          \
      return 1;                                                         \
    }                                                                   \
  } while (0)

int main(int argc, char** argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 1000;
  int replays = argc > 2 ? atoi(argv[2]) : 50;
  unsigned long long spin_us = argc > 3 ? strtoull(argv[3], NULL, 10) : 100;
  cudaStream_t s;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaSetDevice(0));
  g_blocks = graphsignal_probe_register_cuda("kp_blocks_value", NULL, NULL, 0);
  g_graph = graphsignal_probe_register_cuda("kp_graph_value", NULL, NULL, 0);
  g_tile_ns = graphsignal_probe_register_cuda("kp_spin_nanoseconds", NULL, NULL, 0);
  printf("active %d\n", graphsignal_probe_device_data(g_blocks) != NULL);
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  record_block<<<blocks, 128, 0, s>>>(graphsignal_probe_device_data(g_blocks));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  record_block<<<blocks, 128, 0, s>>>(graphsignal_probe_device_data(g_graph));
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; i++) CHECK(cudaGraphLaunch(exec, s));
  spin<<<8, 32, 0, s>>>(spin_us * 1000ull, graphsignal_probe_device_data(g_tile_ns));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError());
  printf("done\n");
  return 0;
}
