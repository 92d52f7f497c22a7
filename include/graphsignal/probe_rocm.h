/*
 * Copyright 2026 Graphsignal, Inc.
 *
 * Licensed under the Apache License, Version 2.0 (the "License");
 * you may not use this file except in compliance with the License.
 * You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

/*
 * graphsignal/probe_rocm.h -- probes inside HIP kernels: the same API as
 * probe_cuda.h (graphsignal_probe_register_cuda, graphsignal_gtimer,
 * GRAPHSIGNAL_RECORD, graphsignal_probe_device_data), on the HIP runtime.
 * Vendor probe.h, probe_cuda.h and this file together.
 *
 *   #include <graphsignal/probe_rocm.h>
 *   g_tile_ns = graphsignal_probe_register_rocm("mykernels_tile_duration_nanoseconds", NULL, NULL, 0);
 *   __global__ void my_kernel(..., graphsignal_instrument_data* tile_ns) {
 *     unsigned long long t0 = graphsignal_gtimer();
 *     ...
 *     if (threadIdx.x == 0) GRAPHSIGNAL_RECORD(tile_ns, graphsignal_gtimer() - t0);
 *   }
 *
 * graphsignal_gtimer() reads s_memrealtime, ROCm's constant-rate wall clock
 * (100 MHz on MI100/MI200/MI300), in nanoseconds; define
 * GRAPHSIGNAL_ROCM_NS_PER_TICK before including this header for a GPU whose
 * wall clock runs at another rate.
 *
 * What was run: this header is compiled for gfx90a by the test suite with
 * Debian's hipcc (ROCm 5.2) where hipcc is installed; no AMD GPU was
 * available, so its kernels, the reader thread and the timer scale have not
 * been run. The host code is the same as probe_cuda.h's (which is run on
 * NVIDIA GPUs), with the HIP names of the same runtime calls.
 */
#ifndef GRAPHSIGNAL_PROBE_ROCM_H
#define GRAPHSIGNAL_PROBE_ROCM_H

#define GRAPHSIGNAL_PROBE_HIP 1
#include "probe_cuda.h"

/* The HIP spelling of graphsignal_probe_register_cuda. */
static inline graphsignal_probe_entry* graphsignal_probe_register_rocm(const char* name, const char** tag_keys,
                                                                       const char** tag_values, size_t ntags) {
  return graphsignal_probe_register_cuda(name, tag_keys, tag_values, ntags);
}

#endif /* GRAPHSIGNAL_PROBE_ROCM_H */
