/* Writes to stdout and stderr, then dies by SIGSEGV (a real invalid
   access), the way a native extension crashes under an engine. */
#include <stdint.h>
#include <stdio.h>

int main(void) {
  volatile uintptr_t addr = 16;
  printf("step 1 done\n");
  fflush(stdout);
  fprintf(stderr, "about to touch %p\n", (void*)addr);
  fflush(stderr);
  *(volatile int*)addr = 1;
  return 0;
}
