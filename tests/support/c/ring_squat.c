/* ring_squat SHAPE WHICH N: another user takes this process's ring names
 * before its first record. A child that drops to uid and gid 65534 creates
 * SHAPE (symlink | dir | file | fifo; file: empty, mode 0600) for the probe
 * and the cupti kind under the plain name (WHICH "first") or under every
 * name the header would try, its fallback names and its marker (WHICH
 * "all"), and says each path it took on stderr ("ring_squat: took PATH").
 * Then the process works as it would unprofiled: it counts N into the probe
 * counter squat_events_total, opens a CUPTI-kind ring as the injection
 * library does and writes N kernel records into it when it got one, and
 * prints the same two lines to stdout whatever happened to its rings.
 * Needs root (exit 77 otherwise); compiles against older copies of the
 * header too (then only the plain names are taken). */
#include <graphsignal/probe.h>
#include <grp.h>
#include <sys/wait.h>

#define SQUATTER 65534

static int take(const char* shape, const char* path) {
  if (strcmp(shape, "symlink") == 0) return symlink("/etc/passwd", path);
  if (strcmp(shape, "dir") == 0) return mkdir(path, 0700);
  if (strcmp(shape, "fifo") == 0) return mkfifo(path, 0600);
  if (strcmp(shape, "file") == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    return close(fd);
  }
  errno = EINVAL;
  return -1;
}

/* Takes the names of process `owner`'s ring of this kind (as the header
 * builds them for it). */
static int squat_kind(const char* shape, int all, pid_t owner, const char* kind) {
  const char* run = getenv(GRAPHSIGNAL_RUN_ID_ENV);
  char name[256], path[512];
  int i, names = 1;
  if (!run || !*run) return -1;
  snprintf(name, sizeof name, GRAPHSIGNAL_RING_PREFIX "%s-%ld-%s", run, (long)owner, kind);
#ifdef GRAPHSIGNAL_RING_NAME_ATTEMPTS
  if (all) names = GRAPHSIGNAL_RING_NAME_ATTEMPTS + 1; /* the fallback names and the marker */
#else
  (void)all;
#endif
  for (i = 0; i < names; i++) {
    if (i == 0)
      snprintf(path, sizeof path, GRAPHSIGNAL_SHM_DIR "/%s", name);
#ifdef GRAPHSIGNAL_RING_NAME_ATTEMPTS
    else if (i == GRAPHSIGNAL_RING_NAME_ATTEMPTS)
      snprintf(path, sizeof path, GRAPHSIGNAL_SHM_DIR "/%s" GRAPHSIGNAL_RING_MARKER_SUFFIX, name);
#endif
    else
      snprintf(path, sizeof path, GRAPHSIGNAL_SHM_DIR "/%s.%d", name, i);
    if (take(shape, path) != 0) return -1;
    fprintf(stderr, "ring_squat: took %s\n", path);
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* shape = argc > 1 ? argv[1] : "symlink";
  int all = argc > 2 && strcmp(argv[2], "all") == 0, st = 0;
  unsigned long n = argc > 3 ? strtoul(argv[3], NULL, 10) : 1000ul, i;
  pid_t pid, self = getpid();
  char name[256];
  size_t size = 0;
  uint32_t id = 0;
  uint64_t sum = 0;
  graphsignal_ring_header* ring = NULL;
  graphsignal_probe_entry* e;
  if (geteuid() != 0) return 77;
  fflush(stderr);
  pid = getenv(GRAPHSIGNAL_RUN_ID_ENV) ? fork() : -2; /* bare: no run, no ring names to take */
  if (pid == -2) {
    /* nothing to take */
  } else if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(SQUATTER) != 0 || setuid(SQUATTER) != 0 || getuid() != SQUATTER) _exit(3);
    if (squat_kind(shape, all, self, "probe") != 0 || squat_kind(shape, all, self, "cupti") != 0) {
      perror("ring_squat");
      _exit(4);
    }
    _exit(0);
  } else if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return 5;
  }
  /* the workload, as it would run unprofiled */
  e = graphsignal_probe_register("squat_events_total", GRAPHSIGNAL_COUNTER, NULL, NULL, 0);
  for (i = 0; i < n; i++) {
    graphsignal_add(e, 1);
    sum += i;
  }
  if (graphsignal_ring_name(name, sizeof name, "cupti"))
    ring = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_CUPTI, graphsignal_ring_env_capacity(),
                                 GRAPHSIGNAL_RING_DEFAULT_STRINGS, &size);
  if (ring) {
    graphsignal_ring_put_name(ring, &id, GRAPHSIGNAL_NAME_PLAIN, "_Z12squat_kernelv", 17);
    for (i = 0; i < n; i++) graphsignal_ring_write(ring, GRAPHSIGNAL_REC_KERNEL, 0, 0, id, 100, 0);
    graphsignal_ring_close(ring);
  }
  printf("sum %llu\n", (unsigned long long)sum);
  printf("done\n");
  return 0;
}
