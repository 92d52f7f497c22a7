// Logging for the injection library: one line per event on stderr, which
// graphsignal-run passes through to the console (and its error capture).
#pragma once

#include <atomic>

namespace graphsignal {
namespace cupti {

enum class Level { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// Threshold from GRAPHSIGNAL_LOG_LEVEL (the sidecar's variable), read once.
bool log_enabled(Level level);

void log(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Logs only the first time `flag` is seen unset: for conditions that may
// repeat once per buffer or per record and must not flood the console.
#define GS_LOG_ONCE(level, ...)                                    \
  do {                                                             \
    static std::atomic<bool> gs_once_{false};                      \
    if (!gs_once_.exchange(true, std::memory_order_relaxed))       \
      ::graphsignal::cupti::log((level), __VA_ARGS__);             \
  } while (0)

}  // namespace cupti
}  // namespace graphsignal
