// Kernel time with and without one in-kernel probe record per block.
// probe_overhead [ITERS] [REPS]: a compute kernel of ~20 us (1056 blocks x 256
// threads of dependent FMAs) launched ITERS times per repetition, with
// (probed) and without (bare) a GRAPHSIGNAL_RECORD of the block's duration
// by thread 0; REPS interleaved repetitions, timed with CUDA events. Prints
// one JSON line with the median per-launch times.
#include <graphsignal/probe_cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void work(float* out, int n_iter, graphsignal_instrument_data* probe) {
  unsigned long long t0 = graphsignal_gtimer();
  float a = threadIdx.x * 0.001f, b = 1.0001f;
  for (int i = 0; i < n_iter; i++) a = a * b + 0.0001f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = a;
  if (probe != NULL && threadIdx.x == 0) GRAPHSIGNAL_RECORD(probe, graphsignal_gtimer() - t0);
}

static float time_launches(float* out, int n_iter, int iters, graphsignal_instrument_data* probe, cudaStream_t s) {
  cudaEvent_t a, b;
  float ms = 0;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; i++) work<<<1056, 256, 0, s>>>(out, n_iter, probe);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0f / iters;  // us per launch
}

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  float* out;
  cudaStream_t s;
  cudaSetDevice(0);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaMalloc(&out, 1056 * 256 * sizeof(float));
  graphsignal_probe_entry* e = graphsignal_probe_register_cuda("overhead_block_nanoseconds", NULL, NULL, 0);
  graphsignal_instrument_data* d = graphsignal_probe_device_data(e);
  int n_iter = 2000;
  time_launches(out, n_iter, 200, NULL, s);  // warm up
  time_launches(out, n_iter, 200, d, s);
  std::vector<float> bare, probed;
  for (int r = 0; r < reps; r++) {
    bare.push_back(time_launches(out, n_iter, iters, NULL, s));
    probed.push_back(time_launches(out, n_iter, iters, d, s));
  }
  const char* mode = getenv("GRAPHSIGNAL_PROBE_CUDA_MEMORY");
  double mb = median(bare), mp = median(probed);
  printf("{\"bench\": \"probe_kernel_overhead\", \"memory\": \"%s\", \"collected\": %s, \"kernel_us_bare\": %.3f, "
         "\"kernel_us_probed\": %.3f, \"overhead_percent\": %.3f, \"launches\": %d, \"reps\": %d, "
         "\"target_percent\": 2.0}\n",
         mode ? mode : "device", d ? "true" : "false", mb, mp, 100.0 * (mp - mb) / mb, iters, reps);
  return 0;
}
