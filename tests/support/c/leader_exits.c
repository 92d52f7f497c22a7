/* Holds 64 MiB for two seconds, then its main thread exits (pthread_exit)
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

int main(void) {
  size_t n = (size_t)64 << 20;
  volatile char* p = malloc(n);
  if (!p) return 1;
  memset((char*)p, 1, n);
  printf("%d %d\n", (int)getpid(), p[n - 1]);
  fflush(stdout);
  sleep(2);
  pthread_t t;
  if (pthread_create(&t, NULL, linger, NULL) != 0) return 1;
  pthread_exit(NULL);
}
