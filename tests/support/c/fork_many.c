/* fork_many N: N short-lived children one after another, each counting 1
 * into its own probe counter (its own ring) and exiting; then the parent
 * registers a probe of its own and prints "done N". */
#include <graphsignal/probe.h>
#include <sys/wait.h>

int main(int argc, char** argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100ul, i;
  graphsignal_probe_entry* late;
  for (i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
      graphsignal_probe_entry* e = graphsignal_probe_register("child_events_total", GRAPHSIGNAL_COUNTER, NULL, NULL, 0);
      graphsignal_add(e, 1);
      _exit(0);
    }
    waitpid(pid, NULL, 0);
  }
  {
    struct timespec nap = {1, 500000000L}; /* the sidecar sees every child gone */
    nanosleep(&nap, NULL);
  }
  late = graphsignal_probe_register("late_probe_total", GRAPHSIGNAL_COUNTER, NULL, NULL, 0);
  graphsignal_add(late, 42);
  {
    struct timespec nap = {0, 300000000L};
    nanosleep(&nap, NULL);
  }
  printf("done %lu\n", n);
  return 0;
}
