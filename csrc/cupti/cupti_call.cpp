#include "cupti_call.h"

#include <string.h>

#include "log.h"

namespace graphsignal {
namespace cupti {

CUptiResult check(CUptiResult result, const char* call, const char* file, int line, std::atomic<bool>* logged,
                  CUptiResult quiet) {
  if (result == CUPTI_SUCCESS || result == quiet) return result;
  if (logged->exchange(true, std::memory_order_relaxed)) return result;
  const char* text = nullptr;
  // Not through the macro: a failure to describe a failure has nothing left to log.
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || !text) text = "unknown CUPTI result";
  const char* base = strrchr(file, '/');
  log(Level::kWarning, "%s failed: %s (%d) at %s:%d", call, text,
      static_cast<int>(result), base ? base + 1 : file, line);
  return result;
}

}  // namespace cupti
}  // namespace graphsignal
