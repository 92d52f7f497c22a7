#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

namespace graphsignal {
namespace cupti {

static int threshold() {
  // Read once: getenv is not safe against a concurrent setenv, and the
  // level does not change during a run.
  static const int level = [] {
    const char* s = getenv("GRAPHSIGNAL_LOG_LEVEL");
    if (!s || !*s) return static_cast<int>(Level::kWarning);
    if (!strcasecmp(s, "debug")) return static_cast<int>(Level::kDebug);
    if (!strcasecmp(s, "info")) return static_cast<int>(Level::kInfo);
    if (!strcasecmp(s, "error") || !strcasecmp(s, "critical")) return static_cast<int>(Level::kError);
    return static_cast<int>(Level::kWarning);
  }();
  return level;
}

bool log_enabled(Level level) { return static_cast<int>(level) <= threshold(); }

void log(Level level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  static const char* const kNames[] = {"error", "warning", "info", "debug"};
  char line[1024];
  int n = snprintf(line, sizeof line, "graphsignal-cupti[%ld] %s: ", static_cast<long>(getpid()),
                   kNames[static_cast<int>(level)]);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = strnlen(line, sizeof line - 2);
  line[len++] = '\n';
  // One write(2) per line so lines from several threads do not interleave.
  ssize_t w = write(2, line, len);
  (void)w;
}

}  // namespace cupti
}  // namespace graphsignal
