// The one way the injection library calls CUPTI: GS_CUPTI_CALL(call)
// evaluates the call, and on failure logs the call's text and CUPTI's own
// description of the result, once per call site. It returns the
// CUptiResult and never throws or aborts: a failing CUPTI call costs the
// workload nothing but that feature.
#pragma once

#include <cupti.h>

#include <atomic>

namespace graphsignal {
namespace cupti {

// `quiet` is a result that is expected at this call site (e.g. the end of
// a buffer) and is returned without logging.
CUptiResult check(CUptiResult result, const char* call, const char* file, int line, std::atomic<bool>* logged,
                  CUptiResult quiet);

}  // namespace cupti
}  // namespace graphsignal

#define GS_CUPTI_CALL_QUIET(call, quiet)                                                            \
  ([&]() -> CUptiResult {                                                                          \
    static std::atomic<bool> gs_logged_{false};                                                    \
    return ::graphsignal::cupti::check((call), #call, __FILE__, __LINE__, &gs_logged_, (quiet));   \
  }())

#define GS_CUPTI_CALL(call) GS_CUPTI_CALL_QUIET(call, CUPTI_SUCCESS)
