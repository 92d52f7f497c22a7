/* Launches more distinct kernels than the interposer's table holds (16,384
 * handles): "hot" first (it has a slot), then `distinct` kernels once each,
 * then "hot" again, through cuGetProcAddress as the CUDA runtime does.
 * Prints what it did as one JSON line. Usage: many_kernels DISTINCT HOT */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef CUresult (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
typedef CUresult (*gpa_t)(const char*, void**, int, unsigned long long, int*);

int main(int argc, char** argv) {
  long distinct = argc > 1 ? atol(argv[1]) : 16500, hot = argc > 2 ? atol(argv[2]) : 1000, i, failed = 0;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* (*fake_function)(const char*);
  void* (*fake_stream_new)(void);
  void *p = NULL, *hot_fn, *s;
  int status = 0;
  char name[32];
  gpa_t gpa;
  launch_t launch;
  if (!h || !(gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2"))) return 2;
  *(void**)&fake_function = dlsym(h, "fake_function");
  *(void**)&fake_stream_new = dlsym(h, "fake_stream_new");
  if (!fake_function || !fake_stream_new || gpa("cuLaunchKernel", &p, 13000, 0, &status) != 0 || !p) return 3;
  launch = (launch_t)p;
  s = fake_stream_new();
  hot_fn = fake_function("hot_kernel");
  for (i = 0; i < hot; i++) failed += launch(hot_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != 0;
  for (i = 0; i < distinct; i++) {
    snprintf(name, sizeof name, "k%06ld", i);
    failed += launch(fake_function(name), 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != 0;
  }
  for (i = 0; i < hot; i++) failed += launch(hot_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != 0;
  printf("{\"launches\":%ld,\"hot\":%ld,\"distinct\":%ld,\"failed\":%ld}\n", 2 * hot + distinct, 2 * hot, distinct,
         failed);
  return failed != 0;
}
