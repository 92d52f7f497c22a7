/* shm_writer N HOLD: one worker of a job on a small /dev/shm: records N
 * values into the probe histogram shm_step_nanoseconds as fast as it can
 * (a ring smaller than N drops and counts what does not fit), prints
 * "PID probe yes CAPACITY" (its ring's records) or "PID probe no", then keeps its
 * ring while the file HOLD exists (at most 120 s), as a live worker does. */
#include <graphsignal/probe.h>

int main(int argc, char** argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000ul, i;
  const char* hold = argc > 2 ? argv[2] : NULL;
  struct timespec nap = {0, 20000000L};
  graphsignal_probe_entry* h = graphsignal_probe_register("shm_step_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
  for (i = 0; i < n; i++) graphsignal_record(h, 1000 + i);
  if (graphsignal_probe_type_of(h))
    printf("%ld probe yes %llu\n", (long)getpid(), (unsigned long long)h->ring->capacity);
  else
    printf("%ld probe no\n", (long)getpid());
  fflush(stdout);
  for (i = 0; hold && i < 6000 && access(hold, F_OK) == 0; i++) nanosleep(&nap, NULL);
  return 0;
}
