/* Which host memory a copy's host side is: page-locked (pinned), managed or
 * pageable, as the CUPTI collection tags it (host_memory), known once per
 * allocation and never asked of the driver per copy.
 *
 * Writers are the calls that make or end such memory, forwarded by the
 * interposer (bodies.h), which record what a call made only when it
 * succeeded:
 *
 *   pinned   cuMemHostAlloc, cuMemAllocHost[_v2], cuMemHostRegister[_v2]
 *            (cudaMallocHost, cudaHostAlloc, cudaHostRegister, PyTorch's
 *            pin_memory); ended by cuMemFreeHost, cuMemHostUnregister;
 *            cuMemMap of an allocation located on the host (cuMemCreate
 *            with a HOST or HOST_NUMA location: NCCL's host buffers), its
 *            location asked once per mapping; ended by cuMemUnmap;
 *   managed  cuMemAllocManaged; ended by cuMemFree_v2.
 *
 * Anything else is pageable (malloc, mmap, the stack: memory a driver call
 * never page-locked), with one exception: while the registry cannot vouch
 * for every page-locked range, a pointer outside the ranges it holds is
 * "unknown" (no host_memory tag), never a guess of pageable:
 *
 *   - the table is full (GS_HOSTMEM_MAX ranges live at once): a pinned range
 *     that did not fit is counted (`unrecorded`), and a successful free or
 *     unregister of a pointer the table does not hold takes one off; at 0
 *     the table vouches again. A managed or mapped range that did not fit
 *     cannot be told from the frees of device memory that share its calls,
 *     so it makes the registry unsure for good (`unsure`);
 *   - `unsure`, for the rest of the process: a pinning entry point was handed
 *     out uncounted (a cuGetProcAddress answer bound to no wrapper), a memory
 *     pool was created on the host or as managed memory (its allocations come
 *     from cuMemAllocFromPoolAsync, not followed here), or a mapping's
 *     location could not be asked.
 *
 * Each reason is said once on stderr. Memory page-locked before the
 * interposer was loaded cannot exist when it is preloaded from the
 * process's start (LD_PRELOAD); cuMemHostRegister of memory from mmap, a
 * file mapping or shared memory is recorded as any other range.
 *
 * Readers (every host copy) take no lock, allocate nothing and run in
 * bounded time: two copies of a sorted table behind a sequence counter
 * (hostmem.c says how), a binary search of at most log2(GS_HOSTMEM_MAX)
 * steps, retried while a writer moved the counter during the search, at
 * most GS_HOSTMEM_TRIES times (then "unknown", counted in `gave_up`). The
 * host pointer is compared, never read: a range freed during a copy costs
 * nothing but that copy's class. */
#ifndef GRAPHSIGNAL_INTERPOSE_HOSTMEM_H
#define GRAPHSIGNAL_INTERPOSE_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

/* Ranges live at once. PyTorch's pinned allocator caches its blocks (one
 * range each, rounded to powers of two), llama.cpp pins a few buffers,
 * NCCL maps a few host buffers per communicator: tens to hundreds. 4096
 * leaves room for a program that registers each tensor by itself, keeps the
 * search at 12 steps and each copy of the table at 68 KiB (base and end
 * 32 KiB each, the classes 4 KiB). */
#define GS_HOSTMEM_MAX 4096
#define GS_HOSTMEM_TRIES 64

/* A host side's class: the counters' index (counters.h); the ring carries
 * CUPTI's CUpti_ActivityMemoryKind (gs_hostmem_cupti_kind). */
enum { GS_MEM_NONE = 0, GS_MEM_PAGEABLE = 1, GS_MEM_PINNED = 2, GS_MEM_MANAGED = 3, GS_MEM_CLASSES = 4 };
/* GS_MEM_NONE: not a host side, or a host side of unknown memory */

/* Why the registry is unsure (gs_hostmem_stats.unsure, a bit set). */
enum {
  GS_UNSURE_UNBOUND = 1, /* a pinning entry point handed out uncounted */
  GS_UNSURE_POOL = 2,    /* a memory pool on the host or of managed memory */
  GS_UNSURE_FULL = 4,    /* a managed or mapped range did not fit */
  GS_UNSURE_MAP = 8      /* a mapping whose location could not be asked */
};

/* The hot path: the class of the host memory at p. */
int gs_hostmem_class(const void* p);

/* Writers (after the driver call succeeded). */
void gs_hostmem_pinned(const void* base, size_t size);             /* cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister */
void gs_hostmem_unpinned(const void* base);                        /* cuMemFreeHost, cuMemHostUnregister */
void gs_hostmem_managed(uintptr_t base, size_t size);              /* cuMemAllocManaged */
void gs_hostmem_freed(uintptr_t base);                             /* cuMemFree_v2 */
void gs_hostmem_mapped(uintptr_t base, size_t size, int on_host);  /* cuMemMap (on_host < 0: not known) */
void gs_hostmem_unmapped(uintptr_t base, size_t size);             /* cuMemUnmap */
void gs_hostmem_unsure(int why);

/* CUpti_ActivityMemoryKind of a class: 0 unknown, 1 pageable, 2 pinned, 5 managed. */
static inline uint32_t gs_hostmem_cupti_kind(int cls) {
  static const uint8_t k[GS_MEM_CLASSES] = {0, 1, 2, 5};
  return cls >= 0 && cls < GS_MEM_CLASSES ? k[cls] : 0;
}
const char* gs_hostmem_class_name(int cls); /* "unknown", "pageable", "pinned", "managed" */

typedef struct {
  uint32_t ranges;      /* held now */
  uint32_t unrecorded;  /* pinned ranges live that the full table did not hold */
  uint32_t unsure;      /* GS_UNSURE_* */
  uint64_t overflows;   /* ranges that did not fit, ever */
  uint64_t gave_up;     /* lookups that met a writer GS_HOSTMEM_TRIES times */
} gs_hostmem_stats;
void gs_hostmem_get_stats(gs_hostmem_stats* out);

/* Say the reasons on stderr (the report or a light run turns it on). */
void gs_hostmem_say(int on);

#endif
