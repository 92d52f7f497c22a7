/* ring_vandal: counts 500 into a probe counter in rounds the sidecar reads
 * (run it with a small GRAPHSIGNAL_RING_CAPACITY: the read index then has
 * gone round the ring), then rewrites its own probe ring's header as buggy
 * workload code (or another process) could: capacity 2^40, write index
 * 2^34. Then it keeps working (printing to stdout) and never records
 * again: its own writer would use the bogus capacity too. */
#include <graphsignal/probe.h>

int main(void) {
  char name[256], path[300];
  int fd, i, j;
  struct timespec nap = {0, 600000000L}, round_nap = {0, 100000000L};
  graphsignal_ring_header* h;
  graphsignal_probe_entry* e = graphsignal_probe_register("vandal_events_total", GRAPHSIGNAL_COUNTER, NULL, NULL, 0);
  for (i = 0; i < 10; i++) {
    for (j = 0; j < 50; j++) graphsignal_add(e, 1);
    nanosleep(&round_nap, NULL);
  }
  nanosleep(&nap, NULL);
  if (!graphsignal_ring_name(name, sizeof name, "probe")) return 2;
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  fd = open(path, O_RDWR);
  if (fd < 0) return 3;
  h = (graphsignal_ring_header*)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if ((void*)h == MAP_FAILED) return 4;
  h->capacity = 1ull << 40;
  h->strings_offset = 1ull << 45;
  h->strings_size = 1ull << 45;
  __atomic_store_n(&h->write_index, 1ull << 34, __ATOMIC_RELEASE);
  nanosleep(&nap, NULL);
  for (i = 0; i < 2000; i++) printf("line %d after the vandalism\n", i);
  return 0;
}
