/* Another interposer, preloaded after graphsignal's: it wraps getpid
 * through dlsym(RTLD_NEXT, ...), which must find libc's getpid, not its
 * own (a lookup made relative to the wrong library recurses forever). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/types.h>

static int g_calls;

__attribute__((visibility("default"))) pid_t getpid(void) {
  static pid_t (*next)(void);
  if (!next) *(void**)&next = dlsym(RTLD_NEXT, "getpid");
  g_calls++;
  return next();
}

__attribute__((visibility("default"))) int next_getpid_calls(void) { return g_calls; }
