/* Fails an assert(): glibc prints "prog: file:line: func: Assertion `...' failed." and aborts. */
#undef NDEBUG
#include <assert.h>
#include <stdio.h>

int main(int argc, char** argv) {
  (void)argv;
  printf("checking\n");
  fflush(stdout);
  assert(argc == 42 && "block table is consistent");
  return 0;
}
