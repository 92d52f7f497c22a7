/* Holds 64 MiB until the file argv[1] exists (at most 60 s: the test makes
 * it once the profiler has read the 64 MiB), then its main thread exits (pthread_exit)
 * while another thread runs on for three more: the process is alive, its
 * leader is exiting (PF_EXITING, a zombie), and /proc reads its memory as
 * 0. The profiler's last readings of it must be the ones from before. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void* linger(void* arg) {
  (void)arg;
  sleep(3);
  return NULL;
}

int main(int argc, char** argv) {
  int waited;
  size_t n = (size_t)64 << 20;
  volatile char* p = malloc(n);
  if (!p) return 1;
  memset((char*)p, 1, n);
  printf("%d %d\n", (int)getpid(), p[n - 1]);
  fflush(stdout);
  for (waited = 0; argc > 1 && waited < 6000 && access(argv[1], F_OK) != 0; waited++) usleep(10000);
  pthread_t t;
  if (pthread_create(&t, NULL, linger, NULL) != 0) return 1;
  pthread_exit(NULL);
}
