// Prints graphsignal_hist_bin(v) for each v on the command line (host code:
// runs without a GPU), so tests can check it against the sidecar's bins.
#include <graphsignal/probe_cuda.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) printf("%u\n", graphsignal_hist_bin(strtoull(argv[i], NULL, 10)));
  return 0;
}
