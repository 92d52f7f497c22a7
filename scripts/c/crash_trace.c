/* A debugging aid for hosts without gdb: LD_PRELOAD=crash_trace.so makes a
 * process that dies of SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT print the
 * crashing thread's native stack (module+offset per frame, for addr2line)
 * and the faulting address to stderr, then die of the same signal as it
 * would have. Not part of graphsignal's product (README's Benchmarks table
 * says how to build and use it; tests/integration/test_scripts_smoke.py
 * crashes a process under it).
 *
 *   gcc -O1 -g -fPIC -shared -o crash_trace.so crash_trace.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char altstack[1 << 16];

static void put(const char* s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

static void on_fatal(int sig, siginfo_t* info, void* uctx) {
  (void)uctx;
  char buf[256];
  snprintf(buf, sizeof buf, "\n[crash_trace] signal %d (%s) at address %p in thread %ld\n", sig, strsignal(sig),
           info ? info->si_addr : NULL, (long)syscall(SYS_gettid));
  put(buf);
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; i++) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_fname) {
      snprintf(buf, sizeof buf, "[crash_trace] #%d %s+0x%lx (%s)\n", i, d.dli_fname,
               (unsigned long)((char*)frames[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    } else {
      snprintf(buf, sizeof buf, "[crash_trace] #%d %p\n", i, frames[i]);
    }
    put(buf);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}
