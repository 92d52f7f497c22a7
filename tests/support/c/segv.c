/* Prints a line, then dies by SIGSEGV (a real invalid access). */
#include <stdio.h>
#include <stdint.h>

int main(void) {
  volatile uintptr_t addr = 8;
  puts("before");
  fflush(stdout);
  return *(volatile int*)addr;
}
