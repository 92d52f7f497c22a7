/* Prints CLOCK_REALTIME in nanoseconds as its first act: the moment the
 * workload starts running, for scripts/bench_sidecar.py. */
#include <stdio.h>
#include <time.h>

int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return 0;
}
