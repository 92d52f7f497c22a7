// SPEC.md's in-kernel probe example, verbatim, plus a main that launches it.
#include <graphsignal/probe_cuda.h>

static graphsignal_probe_entry* g_tile_ns;
void init() {
  g_tile_ns = graphsignal_probe_register_cuda(
      "mykernels_tile_duration_nanoseconds", NULL, NULL, 0);
}
__global__ void my_kernel(float* out, graphsignal_instrument_data* tile_ns) {
  unsigned long long t0 = graphsignal_gtimer();
  // ... tile work ...
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
  if (threadIdx.x == 0) {
    GRAPHSIGNAL_RECORD(tile_ns, graphsignal_gtimer() - t0);
  }
}

int main() {
  float* out;
  init();
  if (cudaMalloc(&out, 64 * 128 * sizeof(float)) != cudaSuccess) return 1;
  // launch: my_kernel<<<...>>>(..., graphsignal_probe_device_data(g_tile_ns));
  my_kernel<<<64, 128>>>(out, graphsignal_probe_device_data(g_tile_ns));
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
