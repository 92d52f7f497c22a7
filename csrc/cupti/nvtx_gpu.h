// GPU time per NVTX range, as Nsight Systems projects it: a kernel (or a
// graph replay) launched on a thread while a push/pop range is open there
// counts toward the innermost such range.
//
// A launch's API callback (on the launching thread) stores the pair
// (correlation id, innermost range's path) in a direct-mapped table; the
// kernel's activity record, translated later on the collector's thread,
// carries the same correlation id and finds its range there. Launches are
// hooked in the runtime and the driver domain (a runtime launch reaches the
// driver, and its kernel record carries one of the two calls' ids), only
// with GRAPHSIGNAL_NVTX=gpu and only from the first NVTX range on: a
// workload without NVTX ranges pays no callback on its launches.
//
// Start/end ranges are not on a thread's stack, so no kernel is
// attributed to them. A table slot is overwritten by the launch 2^20 launches
// later: a kernel whose record arrives after that many newer launches inside
// ranges is not attributed (counted as lost in the exit log line).
//
// Threading: on_api runs on the workload's threads (lock-free); on_record
// on the collector's translating thread (under its translate lock);
// attach/collector_finished on the collector's start and exit.
//
// Below the NVTX collection (nvtx_ranges.h), not beside it: it reads the
// calling thread's innermost range (nvtx_stacks.h) and adds to a path's
// sums (nvtx_paths.h); what it tells the collection goes through bind().
#pragma once

#include <cupti.h>
#include <stdint.h>

namespace graphsignal {
namespace cupti {
namespace nvtx {

class PathTable;

// The NVTX collection started (paths: where GPU time goes; finished: called
// once the collector translated its last buffers), or, with nullptrs, a
// fork child stopped collecting. Lock-free: safe in an atfork handler.
void bind(PathTable* paths, void (*finished)());

// The CUPTI collector started (sub: its subscriber, nullptr when it has
// none; graph_mode: graph replays are measured by GRAPH_TRACE records, so a
// graph's kernel records are not counted again).
void attach(CUpti_SubscriberHandle sub, bool graph_mode);
// The collector is attached and has not finished: it may still add GPU time.
bool collector_pending();
// The collector translated its last buffers (its exit).
void collector_finished();

// The first push/pop range of the process (GRAPHSIGNAL_NVTX=gpu): launch
// callbacks are enabled from now on (or when the collector attaches).
void note_first_range();

// From the collector's subscriber callback, for the runtime and driver
// domains; does nothing for a call that is not a launch.
void on_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
// Every activity record the collector translates.
void on_record(const CUpti_Activity* record);

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
