/* fork under the interposer: the parent launches PARENT kernels, forks a
 * child that launches CHILD and exits, waits for it, launches PARENT more
 * and exits. The parent's ring must hold 2 * PARENT launches: a child
 * inherits the parent's counters, so one that sent them would count the
 * parent's launches twice.
 *
 *   fork_user [PARENT] [CHILD] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char*, void**, int, unsigned long long, int*);
typedef CUresult (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);

static void launch_n(launch_t launch, void* f, int n) {
  int i;
  for (i = 0; i < n; i++) launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

int main(int argc, char** argv) {
  int parent = argc > 1 ? atoi(argv[1]) : 100, child = argc > 2 ? atoi(argv[2]) : 50, status = 0;
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  gpa_t gpa;
  launch_t launch = NULL;
  void* (*fake_function)(const char*);
  void* f;
  pid_t pid;
  int st = 0;
  if (!h) return 2;
  *(void**)&gpa = dlsym(h, "cuGetProcAddress_v2");
  *(void**)&fake_function = dlsym(h, "fake_function");
  if (!gpa || !fake_function || gpa("cuLaunchKernel", (void**)&launch, 13000, 0, &st) != 0 || !launch) return 3;
  f = fake_function("forked_kernel");
  launch_n(launch, f, parent);
  pid = fork();
  if (pid == 0) {
    launch_n(launch, f, child);
    exit(0); /* atexit handlers run here, as in any child that exits */
  }
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  launch_n(launch, f, parent);
  printf("{\"parent\":%d,\"child\":%d}\n", 2 * parent, child);
  return 0;
}
