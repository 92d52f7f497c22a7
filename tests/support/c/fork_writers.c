/* fork_writers N: forks N writer processes; writer k (1-based) creates its
 * own ring (as the CUPTI library would), sends a kernel name and writes
 * k * 1000 kernel records of k ns each, then exits. The parent waits for
 * them, then waits (up to 20 s) for the sidecar to remove their rings and
 * prints "removed <count>". */
#include <graphsignal/probe.h>
#include <sys/wait.h>

static int ring_exists(pid_t pid) {
  char path[300];
  snprintf(path, sizeof path, "/dev/shm/gs-%s-%ld-cupti", getenv("GRAPHSIGNAL_RUN_ID"), (long)pid);
  return access(path, F_OK) == 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3, k, removed = 0, i;
  pid_t pids[64];
  if (n > 64) n = 64;
  for (k = 1; k <= n; k++) {
    pid_t pid = fork();
    if (pid == 0) {
      char name[256], kname[64];
      size_t size;
      graphsignal_ring_header* h;
      uint32_t id;
      if (!graphsignal_ring_name(name, sizeof name, "cupti")) _exit(3);
      h = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_CUPTI, 1 << 16, 1 << 16, &size);
      if (!h) _exit(4);
      id = graphsignal_ring_new_name_id(h);
      snprintf(kname, sizeof kname, "kernel_%d", k);
      graphsignal_ring_send_name(h, id, GRAPHSIGNAL_NAME_PLAIN, kname, strlen(kname));
      for (i = 0; i < k * 1000; i++) graphsignal_ring_write(h, GRAPHSIGNAL_REC_KERNEL, 0, 0, id, (uint64_t)k, 0);
      graphsignal_ring_close(h);
      _exit(0);
    }
    pids[k - 1] = pid;
  }
  for (k = 0; k < n; k++) {
    int st;
    waitpid(pids[k], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 10 + k;
  }
  for (i = 0; i < 400; i++) {
    removed = 0;
    for (k = 0; k < n; k++) removed += !ring_exists(pids[k]);
    if (removed == n) break;
    usleep(50000);
  }
  for (k = 0; k < n; k++) printf("%ld\n", (long)pids[k]);
  printf("removed %d\n", removed);
  return 0;
}
