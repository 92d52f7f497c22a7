// Throws a C++ exception nobody catches: libstdc++ prints
// "terminate called after throwing ..." with its what() and aborts.
#include <cstdio>
#include <stdexcept>

static void load(int n) {
  if (n > 0) throw std::runtime_error("failed to load engine: bad plan file");
}

int main(int argc, char**) {
  std::printf("loading\n");
  std::fflush(stdout);
  load(argc);
  return 0;
}
