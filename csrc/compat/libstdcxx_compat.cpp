// Linked into the CUPTI injection library, which links libstdc++
// dynamically (see csrc/cupti_build.py): the process that loads it always
// has a libstdc++, and a second, static copy would bring glibc symbols of
// the build machine (arc4random, _dl_find_object, ...) with it. The
// library then needs only the libstdc++ symbols of gcc 4.8 (GLIBCXX_3.4.19,
// the manylinux2014 level), with the old std::string ABI and no sized
// delete (build flags), and with the two definitions below for what gcc
// 11+ headers reach for beyond that.
//
// The exports map keeps it local: the process's own libstdc++ is untouched.
#include <new>

#if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11
#include <bits/functexcept.h>

namespace std {
// Reached only for an allocation size that overflows size_t: the same end
// as libstdc++'s own (bad_alloc, which -fno-exceptions code cannot catch).
void __throw_bad_array_new_length() { __throw_bad_alloc(); }
}  // namespace std
#endif

#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
// gcc 11+ headers skip atomic reference counts when glibc (2.32+) says the
// process is single-threaded. A library loaded into a CUDA process never
// is for long: this local copy says "threaded" always, so the atomics stay
// and the symbol is not needed from glibc.
extern "C" {
char __libc_single_threaded = 0;
}
#endif
#endif

#if defined(__cpp_aligned_new)
#include <bits/functexcept.h>
#include <stdlib.h>

// Over-aligned objects (cache-line aligned counters) are allocated with
// C++17's aligned operator new, which libstdc++ exports only from gcc 7
// (CXXABI_1.3.11). Local definitions keep the library at the gcc 4.8
// level; the exports map keeps them out of the process's namespace, so
// only this library's own allocations use them.
void* operator new(std::size_t n, std::align_val_t al) {
  size_t a = static_cast<size_t>(al) < sizeof(void*) ? sizeof(void*) : static_cast<size_t>(al);
  void* p = nullptr;
  if (posix_memalign(&p, a, n ? n : 1) != 0) std::__throw_bad_alloc();
  return p;
}
void* operator new[](std::size_t n, std::align_val_t al) { return operator new(n, al); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
#endif
