// probe_rocm.h in a HIP program (compiled by the tests with hipcc for gfx90a;
// not run: no AMD GPU here).
#include <graphsignal/probe_rocm.h>

static graphsignal_probe_entry* g_tile_ns;

__global__ void my_kernel(float* out, graphsignal_instrument_data* tile_ns) {
  unsigned long long t0 = graphsignal_gtimer();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
  if (threadIdx.x == 0) {
    GRAPHSIGNAL_RECORD(tile_ns, graphsignal_gtimer() - t0);
  }
}

int main() {
  float* out;
  g_tile_ns = graphsignal_probe_register_rocm("mykernels_tile_duration_nanoseconds", NULL, NULL, 0);
  if (hipMalloc((void**)&out, 64 * 128 * sizeof(float)) != hipSuccess) return 1;
  hipLaunchKernelGGL(my_kernel, dim3(64), dim3(128), 0, 0, out, graphsignal_probe_device_data(g_tile_ns));
  return hipDeviceSynchronize() == hipSuccess ? 0 : 1;
}
