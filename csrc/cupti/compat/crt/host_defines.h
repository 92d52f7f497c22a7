/*
 * Fallback for builds against the PyPI CUDA wheels: nvidia-cuda-runtime-cu12
 * ships cuda.h and the runtime headers but not crt/host_defines.h (it comes
 * with the compiler wheel), and cupti.h reaches it through builtin_types.h.
 * The injection library is host-only C++, so the qualifiers CUDA's headers
 * put on types and functions mean nothing here; this defines them empty.
 * The build adds this directory with -idirafter, so a real toolkit's file
 * always wins.
 */
#ifndef GRAPHSIGNAL_COMPAT_HOST_DEFINES_H
#define GRAPHSIGNAL_COMPAT_HOST_DEFINES_H

#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define __annotate__(a) __attribute__((a))
#define __location__(a) __annotate__(a)
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define __specialization_static
#define __builtin_align__(a) __align__(a)
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
#define __nv_pure__

#endif
